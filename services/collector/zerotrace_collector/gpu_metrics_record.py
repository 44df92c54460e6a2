"""A GPU device sample as the ``zerotrace.raw.GpuDeviceMetrics`` datum (pure).

The first version of the schema had three required fields (``utilization_pct``,
``memory_used_bytes``, ``memory_total_bytes``); fields are only ever added, so they stay, filled
from ``gpu_util_pct``, ``fb_used_bytes`` and ``fb_total_bytes``, and -1 where those are unknown
(a value no device reports, never 0). Readers take the nullable DCGM-named fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zerotrace_collector.gpu_devices import DCGM_FIELDS, DeviceEvent, DeviceSample

__all__ = ["TRIGGER_INTERVAL", "TRIGGER_XID", "ProcessNames", "device_metrics_record"]

TRIGGER_INTERVAL = "interval"  # the sampling interval came
TRIGGER_XID = "xid"  # an XID error on the device: sampled at once
UNKNOWN = -1  # in the first version's required fields only


@dataclass(frozen=True)
class ProcessNames:
    """What the node knows of a pid: its comm, service and container (None: not known)."""

    process_name: str | None = None
    service: str | None = None
    container_id: str | None = None


def device_metrics_record(
    sample: DeviceSample,
    node_id: str,
    vendor: str,
    *,
    driver_version: str | None = None,
    trigger: str = TRIGGER_INTERVAL,
    xid_events: Sequence[DeviceEvent] = (),
    process_names: Mapping[int, ProcessNames] | None = None,
) -> dict[str, Any]:
    """The datum of one sample. *xid_events*: the device's XID errors since its previous
    record; *process_names*: the node's names of the pids in ``sample.processes``."""
    m = sample.metrics
    dev = sample.device
    names = process_names or {}
    datum: dict[str, Any] = {
        # The device's uuid and the time name one sample; the trigger tells an XID sample
        # taken in the same ns as an interval one apart.
        "event_id": f"{node_id}/{dev.uuid}/{sample.ts_ns}/{trigger}",
        "node_id": node_id,
        "ts_ns": sample.ts_ns,
        "vendor": vendor,
        "device_index": dev.index,
        "device_uuid": dev.uuid,
        "model": dev.model,
        "utilization_pct": float(_or_unknown(m.get("gpu_util_pct"))),
        "memory_used_bytes": _or_unknown(m.get("fb_used_bytes")),
        "memory_total_bytes": _or_unknown(m.get("fb_total_bytes")),
        "driver_version": driver_version,
        "trigger": trigger,
        "health": sample.health,
        **m,
        "clocks_event_reason_names": list(sample.clocks_event_reason_names),
        "unsupported": list(sample.unsupported),
        "failed": list(sample.failed),
        "warming_up": list(sample.warming_up),
        "xid_events": [{"xid": e.xid, "ts_ns": e.ts_ns} for e in xid_events],
        "processes": [
            {
                "pid": p.pid,
                "process_name": names.get(p.pid, _NOBODY).process_name,
                "service": names.get(p.pid, _NOBODY).service,
                "container_id": names.get(p.pid, _NOBODY).container_id,
                "used_memory_bytes": p.used_memory_bytes,
                "sm_util_pct": p.sm_util_pct,
                "mem_util_pct": p.mem_util_pct,
                "enc_util_pct": p.enc_util_pct,
                "dec_util_pct": p.dec_util_pct,
            }
            for p in sample.processes
        ],
    }
    for name in _DOUBLES:  # NVML gives integers; the schema's doubles take floats
        if datum[name] is not None:
            datum[name] = float(datum[name])
    return datum


_NOBODY = ProcessNames()
_DOUBLES = tuple(f.field for f in DCGM_FIELDS if f.avro == "double")


def _or_unknown(value: object) -> Any:
    return UNKNOWN if value is None else value
