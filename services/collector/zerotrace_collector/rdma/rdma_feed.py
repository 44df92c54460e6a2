"""The RDMA counters feed (a collector Feed): every `interval_ns` of its clock, the sysfs
port counters and, where `rdma statistic` offers them, the per-process QP counter sets, as
zerotrace.raw.RdmaCounters records for raw.rdma. A thin shell: sysfs_ports and rdma_tool read,
rdma_sampler decides.

`poll` returns nothing until the next sample is due, and waits for it only up to the timeout
the collector loop gives (zero unless this feed leads the loop, as it does when it runs alone).
Per-process counters that cannot be read (no `rdma` program, no RDMA netlink) are turned off
after the first try, with the reason in `per_process_off`, counted and said once; the port
counters go on. `attach` says in one line which ports it found, or that there is no RDMA
device (the feed then idles: the node's other feeds run on).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from zerotrace import names
from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.feeds import RawRecord
from zerotrace_collector.rdma.rdma_sampler import RdmaSampler
from zerotrace_collector.rdma.rdma_statistic import QpCounterSet
from zerotrace_collector.rdma.rdma_tool import qp_counter_sets
from zerotrace_collector.rdma.sysfs_ports import DEFAULT_ROOT, list_ports, read_ports

# Port counters change by the microsecond but are read for dashboards and alerts: once a
# second matches the GPU metrics and Prometheus's usual scrape resolution.
INTERVAL_NS = 1_000_000_000


class RdmaFeed:
    name = "rdma"
    follows = True  # its records name no process to filter by (a counter set's pid is data)

    def __init__(
        self,
        node_id: str,
        interval_ns: int = INTERVAL_NS,
        clock: Callable[[], int] = time.time_ns,
        root: Path = DEFAULT_ROOT,
        per_process: Callable[[], list[QpCounterSet]] | None = qp_counter_sets,
        note: Callable[[str], None] | None = None,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        """per_process: reads the QP counter sets (rdma_tool.qp_counter_sets); None: don't.
        note: where a one-line note goes (default :attr:`notes`); wait: sleeps up to that many
        seconds while nothing is due (default: an Event never set)."""
        self.notes: list[str] = []
        self._note = note or self.notes.append
        self._wait = wait or threading.Event().wait
        self.ports: list[tuple[str, int]] = []
        self._sampler = RdmaSampler(node_id)
        self._node_id = node_id
        self._interval_ns = interval_ns
        self._clock = clock
        self._root = root
        self._per_process = per_process
        self._due_ns = 0
        self.per_process_off: str | None = None
        self._counts = dict.fromkeys(
            ("samples", "ports", "unreadable", "counter_sets", "per_process_errors"), 0
        )

    def attach(self) -> None:
        self.ports = list_ports(self._root)
        if not self.ports:
            self._note(f"RDMA counters: no RDMA device under {self._root}: skipped")
            return
        found = ", ".join(f"{device} port {port}" for device, port in self.ports)
        self._note(f"RDMA counters: {found}, every {self._interval_ns / 1e9:g} s")

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        now = self._clock()
        if not self.ports or now < self._due_ns:
            left_s = (self._due_ns - now) / 1e9 if self.ports else timeout_ms / 1000
            if timeout_ms > 0:
                self._wait(min(timeout_ms / 1000, left_s))
            return []
        self._due_ns = now + self._interval_ns
        self._counts["samples"] += 1
        readings = read_ports(now, self._root)
        self._counts["ports"] += len(readings)
        self._counts["unreadable"] += sum(len(r.unreadable) for r in readings)
        data = self._sampler.port_records(readings)
        if self._per_process is not None and self.per_process_off is None:
            try:
                sets = self._per_process()
            except (FeatureUnavailable, ValueError) as exc:
                self.per_process_off = str(exc)
                self._counts["per_process_errors"] += 1
                self._note(f"RDMA counters: per process off ({exc}); ports go on")
            else:
                self._counts["counter_sets"] += len(sets)
                data += self._sampler.counter_set_records(now, sets)
        key = self._node_id.encode()
        return [RawRecord(names.RAW_RDMA.name, key, names.RAW_RDMA.record, d) for d in data]

    def counters(self) -> dict[str, int]:
        return dict(self._counts)

    def close(self) -> None:
        pass
