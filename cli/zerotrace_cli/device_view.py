"""What `zerotrace run --gpu-metrics` / `--rdma` shows of the devices it read: a line per GPU
and a line per RDMA port, in the live view and the end-of-run summary (pure: device windows
in, text out; a run without either flag stores no device window, so shows nothing here).

A GPU line is its latest window: the chip model, GPU utilisation, memory used of total, power
and temperature (each the window's last value; ``-`` where the device gave none: a gap is
never shown as 0), the XIDs of the whole run (code and how many times) and the vendor's health
verdict where it gives one (npu-smi), with the worst of the run when that was not OK.

An RDMA line is one port's sysfs counters (source SYSFS; the per-process counter sets and
the RoCE flows seen in packets have pages of their own): rx and tx throughput over its latest
window (the mean of that window's per-second rates) and every counter outside
:data:`TRAFFIC` that moved during the run, by how much. A counter's movement over the run is
the sum of its increases within windows and of the steps between consecutive windows, a step
down (a reset) counting the new value (zerotrace.counter_steps), as within a window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zerotrace.counter_steps import counter_step
from zerotrace.device_kinds import GPU, RDMA, health_rank

__all__ = ["TRAFFIC", "DevicesSeen", "gpu_line", "rdma_line", "throughput"]

SYSFS = "SYSFS"  # the RDMA source of a port's counters
GIB = 1 << 30
# Port counters that count traffic, not trouble (counter_names.py's names): left out of the
# counters that moved. Everything else there is an error, a discard, a retry, a NAK, a
# congestion signal or a counter of a driver zerotrace does not name: shown when it moved.
TRAFFIC = frozenset(
    {
        "tx_bytes",
        "rx_bytes",
        "tx_packets",
        "rx_packets",
        "tx_unicast_packets",
        "rx_unicast_packets",
        "tx_multicast_packets",
        "rx_multicast_packets",
        "rx_write_requests",
        "rx_read_requests",
        "rx_atomic_requests",
        "rx_dct_connect",
        "rdma_sends",
        "rdma_recvs",
        "ack_deferred",
    }
)

# node, device, index (a GPU's UUID and index; an RDMA device's name and port)
DeviceKey = tuple[str, str, int]


@dataclass
class GpuSeen:
    latest: dict[str, Any]
    xids: dict[tuple[int, int], None] = field(default_factory=dict)  # (code, ts_ns), in order
    health_worst: str | None = None


@dataclass
class PortSeen:
    latest: dict[str, Any]
    last: dict[str, int] = field(default_factory=dict)  # counter -> its last value
    moved: dict[str, int] = field(default_factory=dict)  # counter -> movement over the run


class DevicesSeen:
    """The device windows of one run, as the indexer stores them (any order across devices,
    in time order per device: a window older than the one kept is ignored)."""

    def __init__(self) -> None:
        self._gpus: dict[DeviceKey, GpuSeen] = {}
        self._ports: dict[DeviceKey, PortSeen] = {}

    def add(self, window: Mapping[str, Any]) -> None:
        key = (str(window["node_id"]), str(window["device"]), int(window["device_index"]))
        if window["kind"] == GPU:
            self._add_gpu(key, window)
        elif window["kind"] == RDMA and window["source"] == SYSFS:
            self._add_port(key, window)

    def _add_gpu(self, key: DeviceKey, w: Mapping[str, Any]) -> None:
        seen = self._gpus.get(key)
        if seen is None:
            seen = self._gpus[key] = GpuSeen(dict(w))
        elif w["window_start_ns"] < seen.latest["window_start_ns"]:
            return
        seen.latest = dict(w)
        for event in w.get("events") or ():
            if event["kind"] == "xid":
                seen.xids[(int(event["code"]), int(event["ts_ns"]))] = None
        worst = w.get("health_worst")
        if worst is not None and (
            seen.health_worst is None or health_rank(worst) > health_rank(seen.health_worst)
        ):
            seen.health_worst = worst

    def _add_port(self, key: DeviceKey, w: Mapping[str, Any]) -> None:
        seen = self._ports.get(key)
        if seen is None:
            seen = self._ports[key] = PortSeen(dict(w))
        elif w["window_start_ns"] <= seen.latest["window_start_ns"]:
            return  # counted already, or older
        seen.latest = dict(w)
        for name, c in (w.get("counters") or {}).items():
            before = seen.last.get(name)
            step = 0 if before is None else counter_step(before, int(c["first"]))
            seen.moved[name] = seen.moved.get(name, 0) + step + int(c["increase"])
            seen.last[name] = int(c["last"])

    def lines(self) -> list[str]:
        """A line per GPU (by node, index), then per RDMA port (by node, device, port)."""
        gpus = [gpu_line(s) for _k, s in sorted(self._gpus.items(), key=_gpu_order)]
        return gpus + [rdma_line(s) for _k, s in sorted(self._ports.items())]


def _gpu_order(item: tuple[DeviceKey, GpuSeen]) -> tuple[str, int, str]:
    (node, device, index), _seen = item
    return node, index, device


def _last(w: Mapping[str, Any], *names: str) -> float | None:
    """The window's last value of the first of *names* it has."""
    metrics = w.get("metrics") or {}
    for name in names:
        if name in metrics:
            return float(metrics[name]["last"])
    return None


def _or_dash(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def gpu_line(seen: GpuSeen) -> str:
    """``gpu 0 NVIDIA H100 80GB HBM3: util 37%, memory 5.0/80.0 GiB, power 312.5 W, 41 C,
    XIDs 79x1`` and, where the vendor gives a verdict, ``, health OK (worst Alarm)``."""
    w = seen.latest
    util = _last(w, "gpu_util_pct", "utilization_pct")
    used = _last(w, "fb_used_bytes", "memory_used_bytes")
    total = _last(w, "fb_total_bytes", "memory_total_bytes")
    memory = f"{_or_dash(_gib(used), '.1f')}/{_or_dash(_gib(total), '.1f')} GiB"
    parts = [
        f"util {_or_dash(util, 'g')}{'%' if util is not None else ''}",
        f"memory {memory}",
        f"power {_or_dash(_last(w, 'power_w'), '.1f')} W",
        f"{_or_dash(_last(w, 'temperature_c'), 'g')} C",
    ]
    xid_gap = "xid_errors" in (w.get("unsupported") or ()) and not seen.xids
    if not xid_gap:
        parts.append(f"XIDs {_xids(seen) or 'none'}")
    health = w.get("health")
    if health is not None:
        worst = seen.health_worst
        parts.append(
            f"health {health}" + (f" (worst {worst})" if worst not in (None, health) else "")
        )
    return f"gpu {w['device_index']} {w['model']}: " + ", ".join(parts)


def _gib(value: float | None) -> float | None:
    return None if value is None else value / GIB


def _xids(seen: GpuSeen) -> str:
    counts: dict[int, int] = {}
    for code, _ts in seen.xids:
        counts[code] = counts.get(code, 0) + 1
    return " ".join(f"{code}x{n}" for code, n in counts.items())


def throughput(bytes_per_s: float | None) -> str:
    """Bytes per second in decimal units, one decimal: ``12.5 MB/s``, ``640 B/s``."""
    if bytes_per_s is None:
        return "-"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.1f} {unit}"
    return f"{bytes_per_s:.0f} B/s"


def _rate(w: Mapping[str, Any], name: str) -> float | None:
    metric = (w.get("metrics") or {}).get(name)
    return None if metric is None else float(metric["mean"])


def rdma_line(seen: PortSeen) -> str:
    """``rdma mlx5_0 port 1: rx 12.5 MB/s, tx 3.0 MB/s; moved: local_ack_timeouts +2``, or
    ``; no error counter moved``."""
    w = seen.latest
    moved = [f"{name} +{n}" for name, n in sorted(seen.moved.items()) if n and name not in TRAFFIC]
    rx, tx = throughput(_rate(w, "rx_bytes")), throughput(_rate(w, "tx_bytes"))
    tail = f"moved: {', '.join(moved)}" if moved else "no error counter moved"
    return f"rdma {w['device']} port {w['device_index']}: rx {rx}, tx {tx}; {tail}"
