"""What this process costs: the CPU time and memory zerotrace's own work takes, in one line.

A tool that watches a node's programs competes with them for the same cores and memory, so its
own cost is reported next to what it saw (issue 9): CPU seconds (every thread, user and system
time, from ``/proc/self/stat``), resident memory now and at its peak (``VmRSS`` and ``VmHWM``
from ``/proc/self/status``), and the events per second that cost bought.

CPU is counted from when :class:`SelfCost` is made: a shell makes it once the probes are
attached, so the cores figure is what observing costs; what came before (imports, compiling the
probes) is kept apart as ``start_cpu_s``. The peak RSS is the process's whole life's (the
kernel keeps no other), compiling included. Children are not counted: a command started for
observation (``run -- CMD``) is the observed program, not zerotrace.

Parsing and rendering are pure (:func:`cpu_seconds`, :func:`memory_bytes`, :func:`cost_line`);
:class:`SelfCost` reads the two files, and time comes from the clock it is given.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zerotrace.cpu_budget import CpuBudget

__all__ = ["CostSnapshot", "SelfCost", "cost_line", "cpu_seconds", "memory_bytes", "per_second"]

# /proc/<pid>/stat after the ")" that closes comm (which may hold spaces and parentheses):
# field 3 (state) is index 0, so utime (field 14) and stime (field 15) are 11 and 12.
_UTIME, _STIME = 11, 12
_MIB = 1024 * 1024


@dataclass(frozen=True)
class CostSnapshot:
    """cpu_s: CPU seconds used over wall_s seconds; rss_bytes: resident memory now;
    peak_rss_bytes: its peak over the process's life; start_cpu_s: CPU seconds used before
    the count began (0 in an interval)."""

    cpu_s: float
    wall_s: float
    rss_bytes: int
    peak_rss_bytes: int
    start_cpu_s: float = 0.0

    @property
    def cores(self) -> float:
        """The cores used on average (0 before any time passed)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def since(self, earlier: CostSnapshot) -> CostSnapshot:
        """The interval from *earlier* to this snapshot (memory as of now)."""
        return CostSnapshot(
            self.cpu_s - earlier.cpu_s,
            self.wall_s - earlier.wall_s,
            self.rss_bytes,
            self.peak_rss_bytes,
        )


def cpu_seconds(stat: str, ticks_per_s: int) -> float:
    """User plus system CPU seconds of every thread, from /proc/<pid>/stat text;
    *ticks_per_s* is ``os.sysconf("SC_CLK_TCK")``. Raises ValueError for other text."""
    head, paren, tail = stat.rpartition(")")
    fields = tail.split()
    if not paren or not head or len(fields) <= _STIME:
        raise ValueError(f"not /proc/<pid>/stat text: {stat[:80]!r}")
    return (int(fields[_UTIME]) + int(fields[_STIME])) / ticks_per_s


def memory_bytes(status: str) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes from /proc/<pid>/status text; 0 for a line that is missing
    (a kernel thread, or a process being torn down, has none)."""
    found = {"VmRSS:": 0, "VmHWM:": 0}
    for line in status.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in found and parts[2] == "kB":
            found[parts[0]] = int(parts[1]) * 1024
    return found["VmRSS:"], found["VmHWM:"]


def per_second(count: int | float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def cost_line(
    cost: CostSnapshot,
    budget: CpuBudget | None = None,
    events: Sequence[tuple[str, float]] = (),
    label: str = "zerotrace itself",
) -> str:
    """One line for a person, such as ``zerotrace itself: 12.3 s CPU over 60.0 s (0.21 core;
    budget 0.5 core, cgroup v2 cpu.max), RSS 180 MiB (peak 210 MiB); events in 1,234/s, out
    1,200/s``. *events*: (what, per second) pairs, in order."""
    held = ""
    if budget is not None:
        how = budget.enforced_by or "not enforced"
        held = f"; budget {budget.cores:g} core, {how}" if budget.cores else "; no budget"
    start = f" plus {cost.start_cpu_s:.1f} s starting" if cost.start_cpu_s >= 0.05 else ""
    line = (
        f"{label}: {cost.cpu_s:.1f} s CPU over {cost.wall_s:.1f} s "
        f"({cost.cores:.2f} core{held}){start}, RSS {cost.rss_bytes / _MIB:.0f} MiB "
        f"(peak {cost.peak_rss_bytes / _MIB:.0f} MiB)"
    )
    if events:
        line += "; events " + ", ".join(f"{what} {_rate(rate)}/s" for what, rate in events)
    return line


def _rate(per_s: float) -> str:
    return f"{per_s:.1f}" if 0 < per_s < 10 else f"{per_s:,.0f}"


class SelfCost:
    """What this process has cost since this object was made. *clock*: monotonic seconds.
    :meth:`snapshot` reads two small /proc files (tens of microseconds): call it for a report
    or a periodic status, not per record. Raises OSError where /proc is not mounted."""

    def __init__(
        self,
        clock: Callable[[], float],
        proc_dir: Path = Path("/proc/self"),
        ticks_per_s: int | None = None,
    ) -> None:
        self._clock = clock
        self._proc = proc_dir
        self._ticks = ticks_per_s or os.sysconf("SC_CLK_TCK")
        self._started = clock()
        self._start_cpu_s = self._cpu()

    @property
    def wall_s(self) -> float:
        """Seconds since this object was made (the clock only, no /proc read)."""
        return self._clock() - self._started

    def snapshot(self) -> CostSnapshot:
        rss, peak = memory_bytes((self._proc / "status").read_text())
        return CostSnapshot(
            self._cpu() - self._start_cpu_s, self.wall_s, rss, peak, self._start_cpu_s
        )

    def _cpu(self) -> float:
        return cpu_seconds((self._proc / "stat").read_text(), self._ticks)
