"""Injected time. Logic receives a Clock (or timestamps from events) and never reads the wall
clock itself, so windows, timeouts and replays are deterministic and tests need no sleeps."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ns(self) -> int:
        """Nanoseconds since the Unix epoch."""
        ...


class SystemClock:
    """The real clock; only shells (CLI, services) construct it."""

    def now_ns(self) -> int:
        return time.time_ns()


class ManualClock:
    """A clock that moves only when told to: for tests and replays."""

    def __init__(self, start_ns: int = 0) -> None:
        self._now_ns = start_ns

    def now_ns(self) -> int:
        return self._now_ns

    def advance(self, delta_ns: int) -> None:
        self._now_ns += delta_ns
