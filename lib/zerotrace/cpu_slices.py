"""Short turns on a busy CPU: zerotrace's own work steps aside after every slice of it.

Why. The kernel takes a CPU from a running thread at its scheduler tick (CONFIG_HZ=250 on
these machines: every 4 ms) or when the thread blocks, and a thread that wakes with work
runs at once where a CPU is idle. zerotrace works in batches (a ring taken every 100 ms, the
store written once a second), a few ms of CPU each beside a busy server. On a node whose
cores are all busy, a server thread that lost its CPU to such a batch waited for all of it:
bench.busy_llm's added p99 TTFT was about one batch (+3.9 to +4.6 ms, session 14) while
zerotrace used 0.04 core. Its cgroup's light weight (cpu_budget.py) decides how often it
runs, not how long each run lasts.

So the loops that do zerotrace's work call :meth:`CpuSlices.point` between records; after
each `slice_ns` of this thread's CPU time it sleeps `pause_s` (a real block, so the kernel
runs whatever waits for the CPU; a yield would not: the cgroup's entity, not the thread,
competes with the server's threads). Its batch is then pieces of at most a slice, and a
server request meets a piece, not the batch. The cost: a thread-clock read per point (about
0.3 µs) and the pause's wall time (CPU time barely moves). While zerotrace falls behind, the
pauses stop (`active`), so that it catches up at its budget.

Pure logic over injected clocks (:class:`CpuSlices` takes the thread clock and the sleep).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_PAUSE_S", "DEFAULT_SLICE_US", "CpuSlices", "no_pause"]

# A slice well under the 4 ms tick, and big enough that the pauses' context switches (a few
# µs each) stay about 1 % of it.
DEFAULT_SLICE_US: Final = 500
# Long enough to be a block (a sleep of 0 returns without giving the CPU up), short enough
# that an idle machine barely notices (the timer's slack makes it ~60-110 µs of wall time).
DEFAULT_PAUSE_S: Final = 20e-6


def no_pause() -> None:
    """The point of a loop that nothing paces (tests, tools)."""


class CpuSlices:
    """slice_us: this thread's CPU time between pauses (0: never pause); pause_s: how long
    each pause sleeps; thread_ns: this thread's CPU clock; sleep: blocks for seconds."""

    def __init__(
        self,
        slice_us: int = DEFAULT_SLICE_US,
        pause_s: float = DEFAULT_PAUSE_S,
        thread_ns: Callable[[], int] = time.thread_time_ns,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._slice_ns = slice_us * 1000
        self._pause_s = pause_s
        self._thread_ns = thread_ns
        self._sleep = sleep
        self._since = thread_ns()
        self.enabled = slice_us > 0
        self.active = self.enabled  # steered off while zerotrace falls behind
        self.pauses = 0  # counted for the summary: how often it stepped aside

    def steer(self, keeping_up: bool) -> None:
        """Pause only while zerotrace keeps up (cpu_budget.CpuBudget.keeping_up): behind, it
        catches up at its budget first."""
        self.active = self.enabled and keeping_up

    def point(self) -> None:
        """Called between pieces of work: pauses once a slice of CPU has gone since the last
        pause (or since the loop last blocked: blocking costs no CPU time)."""
        now = self._thread_ns()
        if now - self._since < self._slice_ns:
            return
        if self.active:
            self._sleep(self._pause_s)
            self.pauses += 1
        self._since = now
