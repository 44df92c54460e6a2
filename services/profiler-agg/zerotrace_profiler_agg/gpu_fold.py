"""raw.gpu records -> GPU_MEM_ALLOC, GPU_LAUNCH windows and GPU_MEM_INUSE snapshots (pure).

Event time of a call is its return (`end_ns`): an allocation exists once the call returned.
A call with result != 0 failed and changes nothing; it is counted, not folded. cudaFree(NULL)
is a documented no-op (often used to create the context) and is ignored.

GPU_MEM_ALLOC and GPU_LAUNCH are sums per window, as any profile. GPU_MEM_INUSE is a snapshot
of the live-allocation table at each window end, per process: allocations and frees wait in a
per-process buffer until their window's end is reached by the watermark, then go to the table
in event-time order, so a snapshot holds exactly what was live at the window end, even when
the records came out of order within the lateness. A pid gets a snapshot at a window end when
it has live allocations and had memory calls in one of the last `quiet_windows` windows (an
idle process keeps showing what it holds, a dead one stops after a while; a reader takes the
latest snapshot at or before the time it asks for), or when something happened to it in that
window (a free, an eviction, a lost free): a process whose memory went back to zero gets an
empty snapshot. A snapshot's `samples` is the number of live allocations it shows; `dropped`
counts what its process lost in that window (evictions, lost and double frees, late frees,
allocations of a reused pid).

Pid reuse: an allocation or free from a process's main thread (tid == pid) whose process name
differs from the previous main-thread call of that pid means a new program holds the pid (an
exec, or a new process after the old one exited): the old allocations are dropped, counted in
`dropped`. A new process with the same name that never calls from its main thread is not
detected; its predecessor's allocations stay until evicted. Only raw.gpu records take part, so
the answer does not depend on how raw.stack interleaves with raw.gpu.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zerotrace.service_identity import record_service
from zerotrace_profiler_agg.gpu_memory import Allocation, FreeOutcome, LiveAllocations
from zerotrace_profiler_agg.windows import Key, Series, Windows, folded, profile_record

ALLOC_APIS = frozenset(
    {"cudaMalloc", "cudaMallocAsync", "cudaMallocManaged", "cuMemAlloc_v2", "cuMemAllocAsync"}
)
FREE_APIS = frozenset({"cudaFree", "cudaFreeAsync", "cuMemFree_v2", "cuMemFreeAsync"})
LAUNCH_APIS = frozenset({"cudaLaunchKernel", "cuLaunchKernel"})
DEFAULT_QUIET_WINDOWS = 6  # one minute of snapshots of an idle process at 10 s windows

ALLOC, INUSE, LAUNCH = "GPU_MEM_ALLOC", "GPU_MEM_INUSE", "GPU_LAUNCH"


@dataclass
class GpuCounters:
    calls: int = 0
    failed_calls: int = 0  # result != 0: nothing changed
    other_apis: int = 0  # an API this fold does not take (memcpy, say)
    late: int = 0
    evicted: int = 0  # live allocations pushed out of the bounded table
    replaced: int = 0  # an address allocated again while live: its free was lost
    unknown_frees: int = 0
    double_frees: int = 0
    reused_pids: int = 0
    forgotten: int = 0  # allocations dropped because their pid was reused


@dataclass(order=True)
class _Call:
    ts: int
    seq: int  # arrival order breaks ties: the same input gives the same table
    free: bool = field(compare=False)
    node: str = field(compare=False)
    pid: int = field(compare=False)
    tid: int = field(compare=False)
    service: str = field(compare=False)
    address: int = field(compare=False)
    size: int = field(compare=False)
    stack: str = field(compare=False)


@dataclass
class _Process:
    done_end: int  # window ends up to here have had their snapshot
    last_active_end: int  # end of the latest window with a memory call
    pending: list[_Call] = field(default_factory=list)  # a heap
    marks: dict[tuple[str, int], int] = field(default_factory=dict)  # (service, start): dropped
    main_name: str | None = None


class GpuFold:
    def __init__(
        self,
        windows: Windows,
        table: LiveAllocations,
        quiet_windows: int = DEFAULT_QUIET_WINDOWS,
    ) -> None:
        self._w = windows
        self._table = table
        self._quiet_ns = quiet_windows * windows.width_ns
        self._procs: dict[Series, _Process] = {}
        self._seq = 0
        self.counters = GpuCounters()

    def add(self, call: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Fold one raw.gpu datum; returns the records it completed (unsorted)."""
        self.counters.calls += 1
        api, ts, node, pid = str(call["api"]), int(call["end_ns"]), call["node_id"], call["pid"]
        series: Series = (node, pid, "gpu")
        late = self._w.observe(series, ts)
        if series not in self._procs:
            # Windows before the watermark's are closed (a series forgotten and seen again).
            first = max(
                self._w.start_of(ts), self._w.start_of(self._w.mark(series) - self._w.lateness_ns)
            )
            self._procs[series] = _Process(first, first + self._w.width_ns)
        proc = self._procs[series]
        kind = ALLOC if api in ALLOC_APIS else LAUNCH if api in LAUNCH_APIS else None
        if kind is None and api not in FREE_APIS:
            self.counters.other_apis += 1
        elif int(call["result"]) != 0:
            self.counters.failed_calls += 1
        elif api in FREE_APIS and int(call["address"]) == 0:
            pass  # cudaFree(NULL): a no-op by the API's contract
        else:
            tid = int(call["tid"])
            frames = list(call["frames"]) or [f"thread:{tid}"]
            if frames[-1] != f"cuda:{api}":
                frames.append(f"cuda:{api}")  # the leaf the frame format promises
            stack = folded(frames, tid)
            service = record_service(call)
            key: Key = (node, service, pid, kind or "")
            if kind is not None:
                weight = int(call["size"]) if kind == ALLOC else 1
                if late:
                    self.counters.late += 1
                    self._w.count_late(series, key)
                else:
                    self._w.add(series, key, ts, stack, weight)
            if kind != LAUNCH:
                self._seq += 1
                mem = _Call(
                    ts=ts,
                    seq=self._seq,
                    free=kind is None,
                    node=node,
                    pid=pid,
                    tid=tid,
                    service=service,
                    address=int(call["address"]),
                    size=int(call["size"]),
                    stack=stack,
                )
                if ts < proc.done_end:
                    self._apply(proc, mem, late=True)
                else:
                    heapq.heappush(proc.pending, mem)
        return self.advance(series)

    def advance(self, series: Series) -> list[dict[str, Any]]:
        """Snapshots and windows the series' watermark has completed."""
        if series not in self._procs:
            return self._w.close_due(series)
        last_end = self._w.start_of(self._w.mark(series) - self._w.lateness_ns)
        return self._snapshots(series, last_end) + self._w.close_due(series)

    def flush(self, series: Series) -> list[dict[str, Any]]:
        """End of input: every snapshot still to come, then every open window."""
        proc = self._procs.get(series)
        out = []
        if proc is not None:
            width = self._w.width_ns
            # Buffered calls will be activity once applied: the quiet snapshots follow them.
            ends = [proc.last_active_end, *(self._w.start_of(c.ts) + width for c in proc.pending)]
            ends = [max(ends) + self._quiet_ns, proc.done_end]
            ends += [start + width for _s, start in proc.marks]
            out = self._snapshots(series, max(ends))
        return out + self._w.close_all(series)

    def idle(self, series: Series) -> bool:
        """Nothing left to say about the series: it may be forgotten."""
        proc = self._procs.get(series)
        if proc is not None and (proc.pending or proc.marks or self._table.live(*series[:2])):
            return False
        return not self._w.has_open(series)

    def forget(self, series: Series) -> None:
        self._procs.pop(series, None)
        self._w.forget(series)

    def _snapshots(self, series: Series, last_end: int) -> list[dict[str, Any]]:
        proc, width = self._procs[series], self._w.width_ns
        out: list[dict[str, Any]] = []
        while proc.done_end + width <= last_end:
            end = proc.done_end + width
            while proc.pending and proc.pending[0].ts < end:
                self._apply(proc, heapq.heappop(proc.pending), late=False)
            out += self._snapshot(series, proc, end - width)
            proc.done_end = end
            if end >= proc.last_active_end + self._quiet_ns or not self._table.live(*series[:2]):
                # Nothing to show until the next buffered call or mark: skip the empty ends.
                starts = [self._w.start_of(c.ts) for c in proc.pending]
                starts += [start for _s, start in proc.marks]
                proc.done_end = max(end, min([*starts, last_end]))
        return out

    def _snapshot(self, series: Series, proc: _Process, start: int) -> list[dict[str, Any]]:
        node, pid, _ = series
        live = self._table.live(node, pid)
        in_use = self._table.in_use(node, pid)
        live_shown = start + self._w.width_ns <= proc.last_active_end + self._quiet_ns
        services = set(in_use) if live_shown else set()
        services |= {s for s, st in proc.marks if st == start}
        out = []
        for service in sorted(services):
            stacks = in_use.get(service, {})
            count = sum(1 for a in live if a.service == service)
            dropped = proc.marks.pop((service, start), 0)
            key: Key = (node, service, pid, INUSE)
            out.append(profile_record(key, start, self._w.width_ns, stacks, count, dropped))
        return out

    def _apply(self, proc: _Process, call: _Call, late: bool) -> None:
        """One allocation or free into the table, in event-time order (or late)."""
        start = proc.done_end if late else self._w.start_of(call.ts)
        # A late free made snapshots already emitted wrong: counted (a late allocation was
        # counted in its GPU_MEM_ALLOC window already).
        late_free = int(late and call.free)
        self.counters.late += late_free
        if not late:
            proc.last_active_end = max(proc.last_active_end, start + self._w.width_ns)
        if call.tid == call.pid:
            if proc.main_name is not None and proc.main_name != call.service:
                self.counters.reused_pids += 1
                for gone in self._table.forget_pid(call.node, call.pid):
                    self.counters.forgotten += 1
                    self._mark(proc, gone.service, start, 1)
            proc.main_name = call.service
        if call.free:
            outcome, freed = self._table.free(call.node, call.pid, call.address)
            if outcome is FreeOutcome.FREED and freed is not None:
                self._mark(proc, freed.service, start, late_free)
            elif outcome is FreeOutcome.DOUBLE:
                self.counters.double_frees += 1
                self._mark(proc, call.service, start, 1)
            else:
                self.counters.unknown_frees += 1
                self._mark(proc, call.service, start, 1)
            return
        allocation = Allocation(
            call.node, call.pid, call.address, call.size, call.service, call.stack
        )
        for lost in self._table.allocate(allocation):
            if (lost.node, lost.pid, lost.address) == (call.node, call.pid, call.address):
                self.counters.replaced += 1
            else:
                self.counters.evicted += 1
            owner = self._procs.get((lost.node, lost.pid, "gpu"))
            if owner is not None:
                self._mark(owner, lost.service, start if owner is proc else owner.done_end, 1)

    @staticmethod
    def _mark(proc: _Process, service: str, start: int, dropped: int) -> None:
        proc.marks[(service, start)] = proc.marks.get((service, start), 0) + dropped
