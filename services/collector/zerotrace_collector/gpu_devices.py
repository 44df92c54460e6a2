"""GPU device samples, shared by every vendor: what one reading of one device holds, how a metric
a device does not give is marked, and the port a vendor adapter fills (pure).

A sample is one device at one time. Its metrics are named after DCGM's fields (:data:`DCGM_FIELDS`
is the table, DCGM name -> zerotrace field), so a DCGM user recognises each, and they are the
fields of ``zerotrace.raw.GpuDeviceMetrics``. A metric the device does not give is a *gap*: the
field is null and its name is in ``unsupported`` (NVML_ERROR_NOT_SUPPORTED and the like); a read
that failed otherwise is null and named in ``failed``. Never 0 for unknown.

The adapter (:class:`GpuDeviceSource`) is the I/O shell of one vendor library (NVML for NVIDIA:
``nvml_devices.py``); the feed (``gpu_metrics_feed.py``) owns the interval and the events thread,
the record builder (``gpu_metrics_record.py``) turns a sample into the Avro datum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

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


@dataclass(frozen=True)
class DcgmField:
    dcgm: str  # DCGM's field name, as dcgm-exporter exports it
    field: str  # the zerotrace field in GpuDeviceMetrics
    avro: str  # long, double or boolean (always nullable in the schema)
    doc: str  # what it is, with its unit
    exporter_default: bool  # in dcgm-exporter's default-counters.csv (uncommented)


# dcgm-exporter's default counter list (etc/default-counters.csv) is the checklist; the ones it
# lists commented out (ECC totals) and a few DCGM fields it lacks (FB reserved and total,
# clock event reasons, row remap pending) are read too. Counters stay counters: a rate is
# the difference of two samples over their interval, as Prometheus' rate() takes it.
DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", "long", "SM clock, MHz.", True),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz", "long", "Memory clock, MHz.", True),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "memory_temp_c", "long", "Memory temperature, C.", True),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "temperature_c", "double", "GPU temperature, C.", True),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "power_w", "double", "Power draw, W.", True),
    DcgmField(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "total_energy_consumption_mj",
        "long",
        "Energy since the driver loaded, mJ (counter).",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "pcie_tx_bytes",
        "long",
        "Bytes sent over PCIe (counter; may wrap).",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "pcie_rx_bytes",
        "long",
        "Bytes received over PCIe (counter; may wrap).",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "pcie_replay_counter",
        "long",
        "PCIe retries (counter).",
        True,
    ),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gpu_util_pct", "double", "GPU utilisation, %.", True),
    DcgmField(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "mem_copy_util_pct",
        "double",
        "Memory (copy engine) utilisation, %.",
        True,
    ),
    DcgmField("DCGM_FI_DEV_ENC_UTIL", "enc_util_pct", "double", "Encoder utilisation, %.", True),
    DcgmField("DCGM_FI_DEV_DEC_UTIL", "dec_util_pct", "double", "Decoder utilisation, %.", True),
    DcgmField(
        "DCGM_FI_DEV_XID_ERRORS",
        "xid_errors",
        "long",
        "The last XID error seen since the collector started (0: none; XIDs are never 0).",
        True,
    ),
    DcgmField("DCGM_FI_DEV_FB_FREE", "fb_free_bytes", "long", "Framebuffer free, bytes.", True),
    DcgmField("DCGM_FI_DEV_FB_USED", "fb_used_bytes", "long", "Framebuffer used, bytes.", True),
    DcgmField(
        "DCGM_FI_DEV_FB_RESERVED",
        "fb_reserved_bytes",
        "long",
        "Framebuffer reserved by the driver and firmware, bytes.",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_TOTAL", "fb_total_bytes", "long", "Framebuffer in all, bytes.", False
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "ecc_sbe_vol_total",
        "long",
        "Single-bit ECC errors since the driver loaded (counter).",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "ecc_dbe_vol_total",
        "long",
        "Double-bit ECC errors since the driver loaded (counter).",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "ecc_sbe_agg_total",
        "long",
        "Single-bit ECC errors over the device's life (counter).",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "ecc_dbe_agg_total",
        "long",
        "Double-bit ECC errors over the device's life (counter).",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "nvlink_bandwidth_total_kib",
        "long",
        "NVLink data sent and received over all links, KiB (counter).",
        True,
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "nvlink_tx_kib",
        "long",
        "NVLink data sent over all links, KiB (counter; DCGM's is a rate in bytes/s).",
        False,
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "nvlink_rx_kib",
        "long",
        "NVLink data received over all links, KiB (counter; DCGM's is a rate in bytes/s).",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "correctable_remapped_rows",
        "long",
        "Rows remapped for correctable errors.",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "uncorrectable_remapped_rows",
        "long",
        "Rows remapped for uncorrectable errors.",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "row_remap_failure",
        "boolean",
        "A row remapping failed.",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "row_remap_pending",
        "boolean",
        "A remapping waits for the next GPU reset.",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "clocks_event_reasons",
        "long",
        "Why clocks are below their maximum, a bitmask (formerly CLOCK_THROTTLE_REASONS).",
        False,
    ),
)
METRIC_FIELDS: tuple[str, ...] = tuple(f.field for f in DCGM_FIELDS)
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


@dataclass
class SampleBuilder:
    """Collects one device's readings; every field not put is a gap (unsupported unless said
    failed), so a metric a vendor adapter forgot to read can never look like a value."""

    device: DeviceInfo
    ts_ns: int
    _values: dict[str, MetricValue] = field(default_factory=dict)
    _failed: list[str] = field(default_factory=list)
    reason_names: tuple[str, ...] = ()
    processes: tuple[ProcessGpuUse, ...] = ()

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

    def build(self) -> DeviceSample:
        metrics = {name: self._values.get(name) for name in METRIC_FIELDS}
        failed = tuple(n for n in METRIC_FIELDS if n in self._failed)
        unsupported = tuple(
            n for n in METRIC_FIELDS if metrics[n] is None and n not in self._failed
        )
        return DeviceSample(
            self.device,
            self.ts_ns,
            metrics,
            unsupported,
            failed,
            self.reason_names,
            self.processes,
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
