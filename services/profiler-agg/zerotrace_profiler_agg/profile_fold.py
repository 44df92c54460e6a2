"""The whole fold: decoded raw.stack and raw.gpu records in, derived.profile records out (pure).

ON_CPU, OFF_CPU and GPU_TIME come from raw.stack, summed per stack (samples, ns blocked, ns on
the GPU); the GPU profile types come from raw.gpu (gpu_fold.py). Windows, keys and lateness as
in windows.py.

Contract: the same records in the same order give the same output records in the same order
(each batch is sorted), whichever shell drives the fold; time moves only with event times,
`tick(now_ns)` (a quiet input) and `flush()` (the end). Records that can never be folded raise
PoisonInput before changing any state.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import asdict
from typing import Any

from zerotrace.errors import PoisonInput
from zerotrace.holds import Holds
from zerotrace.service_identity import record_service
from zerotrace_profiler_agg.gpu_fold import GpuFold
from zerotrace_profiler_agg.gpu_memory import LiveAllocations
from zerotrace_profiler_agg.settings import MS, ProfilerAggSettings
from zerotrace_profiler_agg.windows import Key, Series, Windows, folded, record_order

# The types a stack sample may carry; the GPU memory and launch profiles are built from raw.gpu
# calls, and a sample claiming one would make a second window with the same id.
STACK_TYPES = frozenset({"ON_CPU", "OFF_CPU", "GPU_TIME"})
# An input partition this far behind the newest is taken as idle, not lagging: it stops
# holding back the time a tick gives to quiet series (as the correlator's watermark does).
IDLE_SOURCE_NS = 30_000_000_000


class ProfileFold:
    def __init__(self, settings: ProfilerAggSettings | None = None) -> None:
        s = settings or ProfilerAggSettings()
        self.windows = Windows(s.window_ms * MS, s.lateness_ms * MS)
        self.table = LiveAllocations(s.live_allocations)
        self.gpu = GpuFold(self.windows, self.table, s.quiet_windows)
        self._tick_lag_ns = s.tick_lag_ms * MS
        self._touched: set[Series] = set()  # series with records since the last tick
        self._source_ns: dict[Hashable, int] = {}  # newest event time per input partition
        self.samples = 0
        self.late_samples = 0

    def add_stack(
        self, sample: Mapping[str, Any], source: Hashable = "stack"
    ) -> list[dict[str, Any]]:
        """One raw.stack datum; returns the derived.profile data it completed, sorted.
        source: the input partition it came from (see tick)."""
        profile_type, weight = str(sample["profile_type"]), int(sample["weight"])
        if profile_type not in STACK_TYPES:
            raise PoisonInput(f"a stack sample of type {profile_type}: those come from raw.gpu")
        if weight < 0:
            raise PoisonInput(f"a stack sample with a negative weight ({weight})")
        self.samples += 1
        node, pid, ts = sample["node_id"], int(sample["pid"]), int(sample["ts_ns"])
        series: Series = (node, pid, "stack")
        self._seen(series, source, ts)
        key: Key = (node, record_service(sample), pid, profile_type)
        if self.windows.observe(series, ts):
            self.late_samples += 1
            self.windows.count_late(series, key)
        else:
            stack = folded(sample["frames"], int(sample["tid"]))
            self.windows.add(series, key, ts, stack, weight)
        return self.windows.close_due(series)

    def add_gpu(self, call: Mapping[str, Any], source: Hashable = "gpu") -> list[dict[str, Any]]:
        """One raw.gpu datum; returns the derived.profile data it completed, sorted."""
        if int(call["size"]) < 0:
            raise PoisonInput(f"a GPU call of {call['api']} with a negative size")
        self._seen((call["node_id"], int(call["pid"]), "gpu"), source, int(call["end_ns"]))
        return sorted(self.gpu.add(call), key=record_order)

    def tick(self, now_ns: int) -> list[dict[str, Any]]:
        """Called by a shell about once a second with the clock: lets time pass for the series
        that got no record since the previous tick (a process that exited, an input gone
        quiet), so their last windows close; a series with records moves by their times alone.

        A quiet series moves up to a reference time minus the tick lag: the clock when no
        record at all came since the previous tick; else the input's own event time, the
        oldest of the newest times of its partitions (those less than IDLE_SOURCE_NS behind
        the newest), so a worker going through a backlog does not push a process that is
        merely further back in it past its records, which would make them late."""
        if self._touched:
            newest = max(self._source_ns.values())
            active = [t for t in self._source_ns.values() if newest - t < IDLE_SOURCE_NS]
            reference = min(min(active), now_ns)
        else:
            reference = now_ns
        reference -= self._tick_lag_ns
        out = []
        for series in self.windows.series():
            if series not in self._touched and self.windows.mark(series) < reference:
                self.windows.raise_mark(series, reference)
                out += self._settle(series, final=False)
        self._touched.clear()
        return sorted(out, key=record_order)

    def flush(self) -> list[dict[str, Any]]:
        """End of input: every open window and every snapshot still due."""
        out = []
        for series in self.windows.series():
            out += self._settle(series, final=True)
        return sorted(out, key=record_order)

    @property
    def holds(self) -> Holds:
        """The input offsets open windows hold (zerotrace/holds.py). GPU in-use tracking is
        not held: the live allocations of a process may reach back hours, so a restarted
        worker starts with an empty table (frees of older ones count as unknown)."""
        return self.windows.holds

    def counters(self) -> dict[str, int]:
        return {
            "samples": self.samples,
            "late_samples": self.late_samples,
            "live_allocations": len(self.table),
            "watermarks_evicted": self.windows.marks_evicted,
            **{f"gpu_{name}": value for name, value in asdict(self.gpu.counters).items()},
        }

    def _seen(self, series: Series, source: Hashable, ts: int) -> None:
        self._touched.add(series)
        self._source_ns[source] = max(self._source_ns.get(source, ts), ts)

    def _settle(self, series: Series, final: bool) -> list[dict[str, Any]]:
        """Close what is due in one series (everything when final) and forget the series'
        state once nothing of it is left open."""
        if series[2] == "gpu":
            out = self.gpu.flush(series) if final else self.gpu.advance(series)
            if self.gpu.idle(series):
                self.gpu.forget(series)
            return out
        w = self.windows
        out = w.close_all(series) if final else w.close_due(series)
        if not w.has_open(series):
            w.forget(series)
        return out
