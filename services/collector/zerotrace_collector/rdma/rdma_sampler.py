"""Readings -> RdmaCounters records with rates (pure): remembers each port's and each QP
counter set's previous reading, normalises names, and drops what it remembers of a port or
set that is gone (so one that comes back starts without rates, not with a bogus one).

A QP counter set is known by (device, port, cntn, pid): the kernel reuses a freed counter id
for the next process, whose counts start from zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zerotrace_collector.rdma.counter_names import normalise
from zerotrace_collector.rdma.port_rates import RateTracker
from zerotrace_collector.rdma.rdma_records import counter_set_record, port_record
from zerotrace_collector.rdma.rdma_statistic import QpCounterSet
from zerotrace_collector.rdma.sysfs_ports import PortReading


class RdmaSampler:
    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self._ports = RateTracker()
        self._sets = RateTracker()

    def port_records(self, readings: Iterable[PortReading]) -> list[dict[str, Any]]:
        out, seen = [], set()
        for reading in readings:
            key = (reading.device, reading.port)
            seen.add(key)
            normal = normalise(reading.port_counters, reading.hw_counters)
            rates = self._ports.update(key, reading.ts_ns, normal.values, normal.wraps_32)
            out.append(port_record(self.node_id, reading, normal.values, rates))
        _forget_others(self._ports, seen)
        return out

    def counter_set_records(
        self, ts_ns: int, counter_sets: Iterable[QpCounterSet]
    ) -> list[dict[str, Any]]:
        out, seen = [], set()
        for s in counter_sets:
            key = (s.device, s.port, s.counter_id, s.pid)
            seen.add(key)
            normal = normalise({}, s.counters)
            rates = self._sets.update(key, ts_ns, normal.values, normal.wraps_32)
            out.append(counter_set_record(self.node_id, ts_ns, s, normal.values, rates))
        _forget_others(self._sets, seen)
        return out


def _forget_others(tracker: RateTracker, seen: set[Any]) -> None:
    for source in tracker.sources():
        if source not in seen:
            tracker.forget(source)
