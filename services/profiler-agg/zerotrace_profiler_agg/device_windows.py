"""GPU device samples and RDMA counter records -> device windows (pure).

One window is one device over [start, start + width), start a multiple of the width since the
epoch: a GPU (raw.gpumetrics, by node and UUID), or on raw.rdma one port's sysfs counters, one
QP counter set of `rdma statistic` (by pid and counter id: a process may hold several, and
kernel consumers have no pid) or one RoCE queue pair flow seen in packets (by flow). Gauges
become min, max, mean and last, counters first, last and increase, XID errors events; the
fields a sample could not give stay named in `unsupported` and `failed`, never a value.
A GPU's vendor health verdict (npu-smi's Health) is kept as the last one given and, when some
sample said other than OK, the worst one (zerotrace.device_kinds.health_rank).

When a window closes: at a sample of the same device in a later window, at a tick once the
clock is `grace` past its end (the collector's delay: the device stopped sending, or the node
went away), and at the flush. A device's records share a partition (both raw topics are keyed
by node) and come in time order, so what a window holds does not depend on the shell; a sample
for a window already closed (the collector was more than `grace` behind) is late: counted,
not folded, as a second window with the same id would replace the first in the store.

Exactness: min, max and last are the raw values as given (a long as the double it converts
to); mean is math.fsum of the values over their number. A counter's increase is the sum of its
steps between consecutive samples of the window: a step up counts the difference, a step down
(a reset, a wrap) the new value, as Prometheus' increase() takes it (zerotrace.counter_steps).
Steps across a window boundary are not counted: a window depends on its own samples only, so a
restarted worker or a replay makes the same one; a rate is increase / (last_sample_ns -
first_sample_ns).

No clock is read: time moves with the records, `tick(now_ns)` and `flush()`.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zerotrace.counter_steps import counter_step
from zerotrace.device_kinds import GPU, RDMA, health_rank
from zerotrace.errors import PoisonInput
from zerotrace.gpu_fields import DCGM_FIELDS
from zerotrace.holds import Holds

__all__ = [
    "GPU_SOURCE",
    "DeviceWindows",
    "flow_label",
    "rdma_vendor",
]

GPU_SOURCE = "gpu"  # a GPU window's source (RDMA windows carry the raw record's)
HOLD = "device"  # tags this fold's claims apart from the profile fold's in a shared Holds
# The first schema version's gauges, -1 where the device did not give them (not a value).
LEGACY_GAUGES = ("utilization_pct", "memory_used_bytes", "memory_total_bytes")
UNKNOWN = -1
DCGM_GAUGES = tuple(f.field for f in DCGM_FIELDS if not f.counter)
DCGM_COUNTERS = tuple(f.field for f in DCGM_FIELDS if f.counter)
# Devices whose last window closed are remembered (the end of that window, ~150 bytes each),
# so a late sample is told from a new window; past this many the oldest are forgotten. A node
# has tens of GPUs and ports, but a RoCE fabric may show thousands of queue pair flows a day.
MAX_CLOSED_MARKS = 65_536
# An RDMA device's driver is its name less the instance number: mlx5_0, rxe0, bnxt_re1.
_INSTANCE = re.compile(r"_?\d+$")

# kind, node, device, GPU index or RDMA port, source, flow label or pid (and counter id)
DeviceKey = tuple[str, str, str, int, str, str]


def rdma_vendor(device: str) -> str:
    """The driver an RDMA device name starts with (mlx5_0: mlx5, rxe0: rxe); '' for ''."""
    return _INSTANCE.sub("", device)


def flow_label(flow: Mapping[str, Any] | None) -> str:
    """A RoCE flow as one searchable word: '<src>><dst> qp <dest_qp>'; '' for none."""
    if not flow:
        return ""
    return f"{flow['src_addr']}>{flow['dst_addr']} qp {flow['dest_qp']}"


@dataclass
class CounterSteps:
    first: int
    last: int
    increase: int = 0

    def add(self, value: int) -> None:
        self.increase += counter_step(self.last, value)
        self.last = value


@dataclass
class ProcessUse:
    pid: int
    process_name: str | None = None
    service: str | None = None
    container_id: str | None = None
    max_used: int | None = None
    last_used: int | None = None
    sm_util: list[float] = field(default_factory=list)

    def add(self, use: Mapping[str, Any]) -> None:
        self.process_name = use.get("process_name") or self.process_name
        self.service = use.get("service") or self.service
        self.container_id = use.get("container_id") or self.container_id
        used = use.get("used_memory_bytes")
        if used is not None:
            self.max_used = used if self.max_used is None else max(self.max_used, used)
            self.last_used = used
        sm = use.get("sm_util_pct")
        if sm is not None and math.isfinite(sm):
            self.sm_util.append(float(sm))

    def record(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "process_name": self.process_name,
            "service": self.service,
            "container_id": self.container_id,
            "max_used_memory_bytes": self.max_used,
            "last_used_memory_bytes": self.last_used,
            "mean_sm_util_pct": _mean(self.sm_util) if self.sm_util else None,
        }


@dataclass
class OpenWindow:
    identity: dict[str, Any]  # kind ... process_name, as the record names them
    start: int
    first_ns: int
    last_ns: int = 0
    samples: int = 0
    gauges: dict[str, list[float]] = field(default_factory=dict)
    counters: dict[str, CounterSteps] = field(default_factory=dict)
    events: set[tuple[str, int, int]] = field(default_factory=set)  # kind, code, ts_ns
    unsupported: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    processes: dict[int, ProcessUse] = field(default_factory=dict)
    driver_version: str | None = None
    reason_names: list[str] = field(default_factory=list)
    interval_ns: int | None = None
    health: str | None = None  # the last verdict given
    health_worst: str | None = None  # the worst verdict other than OK (the first of equals)

    def verdict(self, health: str) -> None:
        self.health = health
        rank = health_rank(health)
        worst = self.health_worst
        if rank > 0 and (worst is None or rank > health_rank(worst)):
            self.health_worst = health

    def gauge(self, name: str, value: float) -> bool:
        """False (and nothing kept) for NaN or an infinity: the store takes neither."""
        if not math.isfinite(value):
            return False
        self.gauges.setdefault(name, []).append(value)
        return True

    def counter(self, name: str, value: int) -> None:
        steps = self.counters.get(name)
        if steps is None:
            self.counters[name] = CounterSteps(value, value)
        else:
            steps.add(value)


class DeviceWindows:
    def __init__(self, width_ns: int, grace_ns: int, holds: Holds | None = None) -> None:
        """holds: where the offsets that open windows need are claimed (zerotrace/holds.py);
        the step shares its fold's, so one `held()` covers both."""
        if width_ns <= 0 or grace_ns < 0:
            raise ValueError("device windows need a positive width and a grace of 0 or more")
        self.width_ns = width_ns
        self.grace_ns = grace_ns
        self.holds = holds if holds is not None else Holds()
        self._open: dict[DeviceKey, OpenWindow] = {}
        self._closed: OrderedDict[DeviceKey, int] = OrderedDict()  # end of the last one closed
        self.gpu_samples = 0
        self.rdma_records = 0
        self.late_samples = 0
        self.not_finite = 0
        self.marks_evicted = 0

    def add_gpu(self, sample: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One raw.gpumetrics datum; returns the windows it closed, sorted."""
        ts = _time_of(sample, "GPU sample")
        node, device, index = (
            str(sample["node_id"]),
            str(sample["device_uuid"]),
            int(sample["device_index"]),
        )
        identity = {
            "kind": GPU,
            "node_id": node,
            "vendor": str(sample["vendor"]),
            "model": str(sample["model"]),
            "device": device,
            "device_index": index,
            "source": GPU_SOURCE,
            "flow": "",
            "pid": None,
            "process_name": None,
            "counter_id": None,
        }
        key: DeviceKey = (GPU, node, device, index, GPU_SOURCE, "")
        self.gpu_samples += 1
        closed, window = self._window_for(key, identity, ts)
        if window is not None:
            self._fold_gpu(window, sample)
        return closed

    def add_rdma(self, record: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One raw.rdma datum; returns the windows it closed, sorted."""
        ts = _time_of(record, "RDMA record")
        node, device, port = str(record["node_id"]), str(record["device"]), int(record["port"])
        source, flow, pid = str(record["source"]), flow_label(record.get("flow")), record.get("pid")
        counter_id = record.get("counter_id")
        identity = {
            "kind": RDMA,
            "node_id": node,
            "vendor": rdma_vendor(device),
            "model": "",
            "device": device,
            "device_index": port,
            "source": source,
            "flow": flow,
            "pid": pid,
            "process_name": record.get("process_name"),
            "counter_id": counter_id,
        }
        who = flow or ("" if pid is None else str(pid))
        if counter_id is not None:  # one process's sets (or the kernel's, no pid) stay apart
            who = f"{who}/cntn{counter_id}"
        key: DeviceKey = (RDMA, node, device, port, source, who)
        self.rdma_records += 1
        closed, window = self._window_for(key, identity, ts)
        if window is not None:
            self._fold_rdma(window, record)
        return closed

    def tick(self, now_ns: int) -> list[dict[str, Any]]:
        """The clock: windows `grace` past their end close (their device went quiet)."""
        due = [
            k for k, w in self._open.items() if w.start + self.width_ns + self.grace_ns <= now_ns
        ]
        return sorted((self._close(k) for k in due), key=_order)

    def flush(self) -> list[dict[str, Any]]:
        """End of input: every open window."""
        return sorted((self._close(k) for k in list(self._open)), key=_order)

    def counters(self) -> dict[str, int]:
        return {
            "device_gpu_samples": self.gpu_samples,
            "device_rdma_records": self.rdma_records,
            "device_late_samples": self.late_samples,
            "device_values_not_finite": self.not_finite,
            "device_open_windows": len(self._open),
            "device_marks_evicted": self.marks_evicted,
        }

    def _window_for(
        self, key: DeviceKey, identity: dict[str, Any], ts: int
    ) -> tuple[list[dict[str, Any]], OpenWindow | None]:
        """(windows closed by this record, the open window it goes in; None: it is late)."""
        start = ts - ts % self.width_ns
        window = self._open.get(key)
        # Not before the open window, nor in one closed already (marks are window ends).
        floor = window.start if window is not None else self._closed.get(key, 0)
        if start < floor:
            self.late_samples += 1
            return [], None
        closed = []
        if window is not None and window.start < start:
            closed.append(self._close(key))
            window = None
        if window is None:
            window = self._open[key] = OpenWindow(identity, start, ts)
            self._closed.pop(key, None)
        self.holds.claim((HOLD, key, start), ts)
        window.identity["process_name"] = (
            identity["process_name"] or window.identity["process_name"]
        )
        window.samples += 1
        window.last_ns = ts
        return closed, window

    def _fold_gpu(self, w: OpenWindow, sample: Mapping[str, Any]) -> None:
        for name in LEGACY_GAUGES:
            value = sample.get(name)
            if value is not None and value != UNKNOWN:
                self._gauge(w, name, value)
        for name in DCGM_GAUGES:
            value = sample.get(name)
            if value is not None:
                self._gauge(w, name, value)
        for name in DCGM_COUNTERS:
            value = sample.get(name)
            if value is not None:
                w.counter(name, int(value))
        w.unsupported.update(sample.get("unsupported") or ())
        w.failed.update(sample.get("failed") or ())
        for event in sample.get("xid_events") or ():
            w.events.add(("xid", int(event["xid"]), int(event["ts_ns"])))
        for use in sample.get("processes") or ():
            pid = int(use["pid"])
            w.processes.setdefault(pid, ProcessUse(pid)).add(use)
        w.driver_version = sample.get("driver_version") or w.driver_version
        w.reason_names = list(sample.get("clocks_event_reason_names") or ())
        health = sample.get("health")
        if health is not None:
            w.verdict(str(health))

    def _fold_rdma(self, w: OpenWindow, record: Mapping[str, Any]) -> None:
        for name, rate in (record.get("rates") or {}).items():
            self._gauge(w, str(name), rate)
        for name, value in (record.get("counters") or {}).items():
            w.counter(str(name), int(value))
        w.interval_ns = int(record.get("interval_ns") or 0)

    def _gauge(self, w: OpenWindow, name: str, value: float) -> None:
        if not w.gauge(name, float(value)):
            self.not_finite += 1

    def _close(self, key: DeviceKey) -> dict[str, Any]:
        w = self._open.pop(key)
        self.holds.release((HOLD, key, w.start))
        self._closed[key] = w.start + self.width_ns
        self._closed.move_to_end(key)
        while len(self._closed) > MAX_CLOSED_MARKS:
            self._closed.popitem(last=False)
            self.marks_evicted += 1
        return self._record(key, w)

    def _record(self, key: DeviceKey, w: OpenWindow) -> dict[str, Any]:
        kind, node, device, index, source, who = key
        return {
            "window_id": f"{kind}:{node}:{device}:{index}:{source}:{who}:{w.start}",
            **w.identity,
            "window_start_ns": w.start,
            "window_end_ns": w.start + self.width_ns,
            "first_sample_ns": w.first_ns,
            "last_sample_ns": w.last_ns,
            "samples": w.samples,
            "event_count": len(w.events),
            "metrics": {
                name: {
                    "min": min(values),
                    "max": max(values),
                    "mean": _mean(values),
                    "last": values[-1],
                    "samples": len(values),
                }
                for name, values in sorted(w.gauges.items())
            },
            "counters": {
                name: {"first": c.first, "last": c.last, "increase": c.increase}
                for name, c in sorted(w.counters.items())
            },
            "events": [
                {"kind": kind_, "code": code, "ts_ns": ts}
                for kind_, code, ts in sorted(w.events, key=lambda e: (e[2], e[0], e[1]))
            ],
            "unsupported": sorted(w.unsupported),
            "failed": sorted(w.failed),
            "processes": [w.processes[pid].record() for pid in sorted(w.processes)],
            "driver_version": w.driver_version,
            "clocks_event_reason_names": w.reason_names,
            "interval_ns": w.interval_ns,
            "health": w.health,
            "health_worst": w.health_worst,
        }


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _time_of(datum: Mapping[str, Any], what: str) -> int:
    ts = int(datum["ts_ns"])
    if ts < 0:
        raise PoisonInput(f"a {what} from before the epoch (ts_ns {ts})")
    return ts


def _order(record: dict[str, Any]) -> tuple[int, str]:
    """The order of records in every output batch: by window, then id."""
    return int(record["window_start_ns"]), str(record["window_id"])
