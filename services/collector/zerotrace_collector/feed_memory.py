"""In-memory feed: the twin of an eBPF feed, for the embedded mode and unit tests.

Records are scripted (`push`) instead of read from a ring buffer, and losses are told
(`lose`) instead of counted by the kernel; everything else keeps a probe feed's contract:
- `poll` before `attach` or after `close` raises RuntimeError, as a probe's poll does;
- `poll(timeout_ms)` returns at once when records are waiting, otherwise waits up to
  timeout_ms for a `push` (0: never waits; -1: waits until a push or a close), then hands
  over every waiting record: a poll drains the buffer, as a ring-buffer poll does;
- `counters()` stays readable after `close`; records not polled by then are discarded, as a
  detached probe's ring buffer is;
- `attach` raises ProbeUnavailable with the one line it was given, for shells that must say
  why a probe cannot run.

Thread-safe: a source thread may push while the collector loop polls.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from zerotrace_collector.errors import ProbeUnavailable
from zerotrace_collector.feeds import RawRecord


class InMemoryFeed:
    def __init__(
        self,
        name: str = "memory",
        records: Iterable[RawRecord] = (),
        follows: bool = False,
        unavailable: str | None = None,
    ) -> None:
        """follows: the source keeps only the followed processes itself (see Feed.follows).
        unavailable: the reason `attach` gives, for a probe that cannot run here."""
        self.name = name
        self.follows = follows
        self._unavailable = unavailable
        self._pending: list[RawRecord] = list(records)
        self._counters: dict[str, int] = {"lost": 0}
        self._cond = threading.Condition()
        self.attached = False
        self.closed = False
        # The timeout of every poll, in order: what a test checks the loop's waits with.
        self.polls: list[int] = []

    def push(self, *records: RawRecord) -> None:
        """Records for the next poll. Raises RuntimeError after close: nothing reads them."""
        with self._cond:
            if self.closed:
                raise RuntimeError(f"feed {self.name!r}: push() after close()")
            self._pending.extend(records)
            self._cond.notify_all()

    def lose(self, count: int = 1, what: str = "lost") -> None:
        """Count records the source lost (a full ring buffer, a malformed event)."""
        if count < 0:
            raise ValueError("a loss count cannot be negative")
        with self._cond:
            self._counters[what] = self._counters.get(what, 0) + count

    @property
    def waiting(self) -> int:
        """Records pushed and not polled yet."""
        with self._cond:
            return len(self._pending)

    def attach(self) -> None:
        if self._unavailable is not None:
            raise ProbeUnavailable(self._unavailable)
        with self._cond:
            if self.closed:
                raise RuntimeError(f"feed {self.name!r}: attach() after close()")
            self.attached = True

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        with self._cond:
            if not self.attached or self.closed:
                raise RuntimeError(f"feed {self.name!r}: poll() before attach() or after close()")
            self.polls.append(timeout_ms)
            if not self._pending and timeout_ms != 0:
                timeout_s = None if timeout_ms < 0 else timeout_ms / 1000
                self._cond.wait_for(lambda: bool(self._pending) or self.closed, timeout_s)
            if self.closed:  # closed while waiting: the buffer went with it
                return []
            out, self._pending = self._pending, []
            return out

    def counters(self) -> dict[str, int]:
        with self._cond:
            return dict(self._counters)

    def close(self) -> None:
        """Idempotent; wakes a poll that is waiting."""
        with self._cond:
            self.closed = True
            self.attached = False
            self._pending = []
            self._cond.notify_all()
