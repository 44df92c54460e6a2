"""A producer that keeps messages on local disk while the broker is away, and sends them, in
order, when it is back: a collector loses nothing it accepted to an outage of Kafka.

Policy (time injected; the Kafka producer and the spool file are the I/O):
- While the broker acknowledges, messages go straight to it.
- The broker counts as away when messages are outstanding and none was acknowledged for
  `stall_s`, or when the producer's own queue is full. From then on new messages go to the
  spool, never blocking the caller (the collector must keep draining its ring buffers).
- Order is kept: while the spool holds anything, new messages are appended behind it; the
  spool is sent only once the producer has nothing outstanding (older messages go first),
  one batch at a time, and a batch leaves the spool only when every message of it was
  acknowledged. A batch that fails is sent again later: messages acknowledged in it may
  then reach the topic twice (the correlator's records carry deterministic ids, so the store
  keeps one; a replayed raw event is read twice).
- A message the producer gives up on (its delivery timed out) is spooled too, behind what
  is there: the only case where order can change.
- Loss only when the spool is full (`max_bytes`): counted in `failed`, with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from zerotrace.clock import Clock
from zerotrace.errors import Backpressure
from zerotrace.spool_file import Spooled, SpoolFile

Done = Callable[[str | None], None]
"""Called once per message with None (acknowledged) or the reason it failed."""


class TrackedProducer(Protocol):
    """What the spooling producer needs from the broker's producer (bus_kafka.KafkaProducer)."""

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None: ...

    def produce_tracked(self, topic: str, key: bytes | None, value: bytes, done: Done) -> None:
        """Like produce, and `done` is called instead of counting a failure."""
        ...

    def serve(self) -> None:
        """Run the delivery callbacks that are due, without waiting."""
        ...

    def flush(self, timeout_s: float) -> int: ...

    def outstanding(self) -> int:
        """Messages queued or in flight, not yet acknowledged or failed."""
        ...

    @property
    def delivered(self) -> int: ...

    @property
    def failed(self) -> int: ...

    def close(self) -> None: ...


class SpoolingProducer:
    def __init__(
        self,
        inner: TrackedProducer,
        spool: SpoolFile,
        clock: Clock,
        *,
        stall_s: float = 5.0,
        retry_s: float = 2.0,
        batch: int = 2000,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._inner = inner
        self._sleep = sleep
        self._spool = spool
        self._clock = clock
        self._stall_ns = int(stall_s * 1e9)
        self._retry_ns = int(retry_s * 1e9)
        self._batch = batch
        self._seen_delivered = inner.delivered
        self._progress_ns = clock.now_ns()
        self._next_try_ns = 0
        self._in_flight = False  # a batch of the spool is on its way
        self._generation = 0
        self._lost = 0
        self.spooled_total = 0
        """Messages that went to the spool since start (an outage's size, for reports)."""
        self.last_error: str | None = None

    # -- the producer port ------------------------------------------------------------

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        if self._spool.pending or self._stalled():
            self._inner.serve()  # outcomes of the spool's batch in flight
            self._step()
            self._keep(topic, key, value)
            return
        try:
            self._inner.produce_tracked(topic, key, value, self._direct_done(topic, key, value))
        except Backpressure:
            self._keep(topic, key, value)

    def flush(self, timeout_s: float) -> int:
        """Wait for the broker and send the spool, up to `timeout_s`; returns what is still
        not acknowledged (in the producer or in the spool, which keeps it on disk)."""
        deadline = self._clock.now_ns() + int(timeout_s * 1e9)
        while True:
            wait_s = min(1.0, max(0.0, (deadline - self._clock.now_ns()) / 1e9))
            pending = self._inner.flush(wait_s)
            self._step()
            left = pending + self._spool.pending
            if left == 0 or self._clock.now_ns() >= deadline:
                return left
            if pending == 0 and not self._in_flight:
                self._sleep(min(wait_s, 0.1))  # the spool waits for its next try

    @property
    def failed(self) -> int:
        return self._inner.failed + self._lost

    @property
    def spooled(self) -> int:
        """Messages on disk, not sent yet."""
        return self._spool.pending

    @property
    def spool_folder(self) -> str:
        return str(self._spool.folder)

    def close(self) -> None:
        self._inner.close()
        self._spool.close()

    # -- policy -----------------------------------------------------------------------

    def _stalled(self) -> bool:
        now = self._clock.now_ns()
        delivered = self._inner.delivered
        if delivered != self._seen_delivered or self._inner.outstanding() == 0:
            self._seen_delivered, self._progress_ns = delivered, now
        return now - self._progress_ns > self._stall_ns

    def _keep(self, topic: str, key: bytes | None, value: bytes) -> None:
        if self._spool.append(topic, key, value):
            self.spooled_total += 1
            return
        self._lost += 1
        self.last_error = (
            f"spool full ({self._spool.max_bytes} bytes in {self._spool.folder}): message lost"
        )

    def _direct_done(self, topic: str, key: bytes | None, value: bytes) -> Done:
        def done(error: str | None) -> None:
            if error is not None:  # the producer gave up on it: keep it on disk instead
                self.last_error = error
                self._keep(topic, key, value)

        return done

    def _step(self) -> None:
        """Start sending the spool's next batch when nothing else is on its way."""
        if self._in_flight or not self._spool.pending or self._inner.outstanding() > 0:
            return
        if self._clock.now_ns() < self._next_try_ns:
            return
        frames = self._spool.peek(self._batch)
        self._generation += 1
        generation, outcomes = self._generation, []

        def done(error: str | None) -> None:
            if generation != self._generation:
                return  # a batch given up on: its late outcomes change nothing
            outcomes.append(error)
            if len(outcomes) == len(frames):
                self._settle(frames, [o for o in outcomes if o is not None])

        self._in_flight = True
        for frame in frames:
            try:
                self._inner.produce_tracked(frame.topic, frame.key, frame.value, done)
            except Backpressure:
                self._generation += 1  # the rest waits for the next try
                self._settle(frames, ["the producer's queue is full"])
                return

    def _settle(self, frames: list[Spooled], failures: list[str]) -> None:
        self._in_flight = False
        if failures:
            self.last_error = failures[0]
            self._next_try_ns = self._clock.now_ns() + self._retry_ns
        else:
            self._spool.consume(frames)
