"""GPU device samples, shared by every vendor: what one reading of one device holds, how a metric
a device does not give is marked, and the port a vendor adapter fills (pure).

A sample is one device at one time. Its metrics are named after DCGM's fields (:data:`DCGM_FIELDS`
is the table, DCGM name -> zerotrace field), so a DCGM user recognises each, and they are the
fields of ``zerotrace.raw.GpuDeviceMetrics``. A metric the device does not give is a *gap*: the
field is null and its name is in ``unsupported`` (NVML_ERROR_NOT_SUPPORTED and the like); a read
that failed otherwise is null and named in ``failed``; a metric measured between two samples (the
GPM ones) with no earlier sample yet is null and named in ``warming_up``. Never 0 for unknown.

The adapter (:class:`GpuDeviceSource`) is the I/O shell of one vendor library (NVML for NVIDIA:
``nvml_devices.py``); the feed (``gpu_metrics_feed.py``) owns the interval and the events thread,
the record builder (``gpu_metrics_record.py``) turns a sample into the Avro datum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from zerotrace.gpu_fields import DCGM_FIELDS, METRIC_FIELDS, DcgmField

__all__ = [
    "DCGM_FIELDS",
    "METRIC_FIELDS",
    "NOT_READ",
    "DcgmField",
    "DeviceEvent",
    "DeviceInfo",
    "DeviceSample",
    "GpuDeviceSource",
    "MetricValue",
    "ProcessGpuUse",
    "SampleBuilder",
    "with_xid",
]

MetricValue = int | float | bool | None


# In dcgm-exporter's default list but not read, with the reason.
NOT_READ: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vGPU guests only; no meaning on a bare-metal node"),
)


@dataclass(frozen=True)
class DeviceInfo:
    index: int  # the vendor library's index on this node
    uuid: str
    model: str


@dataclass(frozen=True)
class ProcessGpuUse:
    """One process's share of one device in the interval. A value the device does not give
    (memory under WDDM, no utilisation sample in the interval) is None."""

    pid: int
    used_memory_bytes: int | None = None
    sm_util_pct: float | None = None
    mem_util_pct: float | None = None
    enc_util_pct: float | None = None
    dec_util_pct: float | None = None


@dataclass(frozen=True)
class DeviceEvent:
    """An XID error (the only event kind read so far) on one device, at *ts_ns* (epoch ns,
    when the adapter returned it)."""

    device_index: int
    xid: int
    ts_ns: int


@dataclass(frozen=True)
class DeviceSample:
    device: DeviceInfo
    ts_ns: int  # when the reading began, epoch ns
    metrics: Mapping[str, MetricValue]  # every METRIC_FIELDS name; None for a gap
    unsupported: tuple[str, ...] = ()  # fields the device does not give
    failed: tuple[str, ...] = ()  # fields whose read failed otherwise (counted by the adapter)
    clocks_event_reason_names: tuple[str, ...] = ()  # the bits of clocks_event_reasons, named
    processes: tuple[ProcessGpuUse, ...] = ()
    # The vendor's own verdict, as its tool prints it (npu-smi's OK, Warning, Alarm, Critical);
    # None where the vendor gives none (NVML: health is read from XIDs, ECC, remapped rows).
    health: str | None = None
    # Fields measured between two samples that had no earlier one to measure from (the first
    # sample after start): neither unsupported nor failed, they come with the next sample.
    warming_up: tuple[str, ...] = ()


@dataclass
class SampleBuilder:
    """Collects one device's readings; every field not put is a gap (unsupported unless said
    failed or warming up), so a metric a vendor adapter forgot to read can never look like a
    value."""

    device: DeviceInfo
    ts_ns: int
    _values: dict[str, MetricValue] = field(default_factory=dict)
    _failed: list[str] = field(default_factory=list)
    _warming: list[str] = field(default_factory=list)
    reason_names: tuple[str, ...] = ()
    processes: tuple[ProcessGpuUse, ...] = ()
    health: str | None = None

    def put(self, name: str, value: MetricValue) -> None:
        if name not in _KNOWN:
            raise KeyError(f"{name} is not a GpuDeviceMetrics metric")
        self._values[name] = value

    def value(self, name: str) -> MetricValue:
        """What was put for *name* so far (None: nothing yet)."""
        return self._values.get(name)

    def fail(self, names: Sequence[str]) -> None:
        for name in names:
            if name not in _KNOWN:
                raise KeyError(f"{name} is not a GpuDeviceMetrics metric")
            self._values.pop(name, None)
            self._failed.append(name)

    def warm_up(self, names: Sequence[str]) -> None:
        """*names* are measured between two samples and this is the first: no value yet."""
        for name in names:
            if name not in _KNOWN:
                raise KeyError(f"{name} is not a GpuDeviceMetrics metric")
            self._values.pop(name, None)
            self._warming.append(name)

    def build(self) -> DeviceSample:
        metrics = {name: self._values.get(name) for name in METRIC_FIELDS}
        failed = tuple(n for n in METRIC_FIELDS if n in self._failed)
        warming = tuple(n for n in METRIC_FIELDS if n in self._warming and n not in self._failed)
        unsupported = tuple(
            n
            for n in METRIC_FIELDS
            if metrics[n] is None and n not in self._failed and n not in self._warming
        )
        return DeviceSample(
            self.device,
            self.ts_ns,
            metrics,
            unsupported,
            failed,
            self.reason_names,
            self.processes,
            self.health,
            warming,
        )


_KNOWN = frozenset(METRIC_FIELDS)
XID_FIELD = "xid_errors"


def with_xid(sample: DeviceSample, last_xid: int) -> DeviceSample:
    """*sample* of a device whose XID events are seen, with the last XID (0: none yet). An
    adapter reads no XID itself (they come as events), so it leaves the field a gap."""
    metrics = {**sample.metrics, XID_FIELD: last_xid}
    unsupported = tuple(n for n in sample.unsupported if n != XID_FIELD)
    return replace(sample, metrics=metrics, unsupported=unsupported)


class GpuDeviceSource(Protocol):
    """One vendor library on this node. Called from one thread, except :meth:`wait_events`,
    which the feed calls from its own events thread (the libraries are thread-safe)."""

    vendor: str  # nvidia, amd, ...

    def open(self) -> list[DeviceInfo]:
        """Load and initialise the library and list the devices; raises
        :class:`~zerotrace.errors.FeatureUnavailable` with one line when the library or its
        driver is not there. Called once."""
        ...

    def driver_version(self) -> str | None: ...

    def sample(self, device: DeviceInfo, ts_ns: int) -> DeviceSample:
        """Read everything of one device now; never raises for a metric (a gap instead)."""
        ...

    def wait_events(self, timeout_ms: int) -> list[DeviceEvent]:
        """Block up to *timeout_ms* for device events; [] when none came. Never raises."""
        ...

    def events_supported(self, device: DeviceInfo) -> bool:
        """Whether XID events of this device are seen (registered at open)."""
        ...

    def counters(self) -> dict[str, int]: ...

    def close(self) -> None:
        """Release the library; after :meth:`wait_events` has returned for the last time."""
        ...
