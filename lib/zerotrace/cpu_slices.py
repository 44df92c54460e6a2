"""Short turns on a busy CPU: zerotrace's own work may step aside after every slice of it.
Off by default (ZEROTRACE_CPU_SLICE_US=0): measured, it did not pay for itself (below).

The idea. The kernel takes a CPU from a running thread at its scheduler tick (CONFIG_HZ=250 on
these machines: every 4 ms) or when the thread blocks. zerotrace works in batches (a ring
taken every 100 ms, the store written once a second), a few ms of CPU each beside a busy
server, and a server thread that lost its CPU to such a batch waits for it; its cgroup's light
weight (cpu_budget.py) decides how often zerotrace runs, not how long each run lasts. So the
loops that do zerotrace's work call :meth:`CpuSlices.point` between records; after each
`slice_us` of this thread's CPU time it sleeps `pause_s` (a real block, so the kernel runs
whatever waits for the CPU; a yield would not: the cgroup's entity, not the thread, competes
with the server's threads). While zerotrace falls behind, the pauses stop (`steer`).

Measured (bench.busy_llm --pieces-too, 2026-12-05, 2-core machine, 150 requests a round):
over HTTP (2 rounds) the added p99 TTFT was +0.04 ms with 0.5 ms pieces against +4.49 ms in
whole batches, but that rests on one whole-batch round; over HTTPS (6 rounds) +4.9 ms with
pieces against +2.8 ms without, and throughput loss 5.6-7.6 % against 2.7-4.7 %. Each pause
costs ~30 µs of CPU on a saturated node (the sleep's syscall and switches) and the work after
it runs with cold caches: zerotrace's own CPU rose from 0.8-1.0 s to 1.0-1.3 s a round. On a
saturated node what zerotrace costs the server is mostly its CPU time, whatever its shape.

Pure logic over injected clocks (:class:`CpuSlices` takes the thread clock and the sleep).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_PAUSE_S", "DEFAULT_SLICE_US", "MEASURED_SLICE_US", "CpuSlices", "no_pause"]

# Off (see above); 500 (well under the 4 ms tick) is what was measured.
DEFAULT_SLICE_US: Final = 0
MEASURED_SLICE_US: Final = 500
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
        active = self.enabled and keeping_up
        if active and not self.active:
            self._since = self._thread_ns()  # a slice starts now, not at the last pause
        self.active = active

    def point(self) -> None:
        """Called between pieces of work: pauses once a slice of this thread's CPU time has
        gone since the last pause (waits in between do not count). Nothing while off."""
        if not self.active:
            return
        now = self._thread_ns()
        if now - self._since < self._slice_ns:
            return
        self._sleep(self._pause_s)
        self.pauses += 1
        self._since = now
