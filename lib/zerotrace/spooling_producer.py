"""A producer that keeps messages on local disk while the broker is away, and sends them, in
order, when it is back: a collector loses nothing it accepted to an outage of Kafka.

Policy (time injected; the Kafka producer and the spool file are the I/O):
- While the broker acknowledges, messages go straight to the producer.
- The broker counts as away when messages are outstanding and none was acknowledged for
  `stall_s` (delivery reports are served first, so a quiet spell is not mistaken for an
  outage), or when the producer's own queue is full. Then what the producer holds is purged
  into the spool (older than anything after it, so order holds), and new messages follow it
  there, never blocking the caller (the collector must keep draining its ring buffers).
- While the spool holds anything, new messages are appended behind it. It is sent oldest
  first, one batch at a time, once the producer holds nothing else; a batch leaves the spool
  only as far as its messages were acknowledged (or refused for good), so an outage during
  a batch loses and reorders nothing. When the batch in flight holds the whole spool, new
  messages go straight to the producer behind it (the producer keeps their order); the spool
  file is emptied once everything in it was acknowledged.
- What can change order or repeat: a batch whose later messages were acknowledged after an
  earlier one failed is sent again from the failure on (those arrive twice); a message sent
  straight on while the spool's last batch was in flight can overtake it if that batch then
  fails; messages in flight when purged may have been written by the broker (twice).
- A message refused for good (too large, not authorised, a fatal producer error) is counted
  in `failed` with the reason, so it cannot hold up the rest.
- flush() waits up to its timeout, then purges what the producer still holds into the spool:
  a collector stopped while Kafka is away keeps everything on disk for its next run.
- Loss only when the spool is full or the disk refuses a write (`max_bytes`, OSError): counted
  in `failed` and in `spool_full_dropped`, with the reason. What the spool holds already is
  kept and sent. `dropping` names the reason while such a spell lasts, so a shell can say one
  line when it starts and one when it ends: it ends once a message was kept (spooled or sent
  straight on) and none was dropped for `drop_quiet_s` (a nearly full disk still takes a
  small message now and then: that alone does not end it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from zerotrace.clock import Clock
from zerotrace.errors import Backpressure
from zerotrace.spool_file import Spooled, SpoolFile


@dataclass(frozen=True)
class DeliveryError:
    reason: str
    permanent: bool  # sending it again cannot help


Done = Callable[[DeliveryError | None], None]
"""Called once per message: None when acknowledged, else why it failed."""


class TrackedProducer(Protocol):
    """What the spooling producer needs from the broker's producer (bus_kafka.KafkaProducer)."""

    def produce_tracked(self, topic: str, key: bytes | None, value: bytes, done: Done) -> None:
        """Queue one message; `done` hears its outcome. May raise Backpressure."""
        ...

    def serve(self) -> None:
        """Run the delivery callbacks that are due, without waiting."""
        ...

    def flush(self, timeout_s: float) -> int: ...

    def purge(self) -> None:
        """Fail every message still held (their callbacks say so), without waiting."""
        ...

    def outstanding(self) -> int:
        """Messages queued or in flight, not yet acknowledged or failed."""
        ...

    @property
    def delivered(self) -> int: ...

    def close(self) -> None: ...


class SpoolingProducer:
    def __init__(
        self,
        inner: TrackedProducer,
        spool: SpoolFile,
        clock: Clock,
        *,
        stall_s: float = 5.0,
        batch: int = 2000,
        drop_quiet_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._inner = inner
        self._spool = spool
        self._clock = clock
        self._sleep = sleep
        self._stall_ns = int(stall_s * 1e9)
        self._batch = batch
        self._seen_delivered = inner.delivered
        self._progress_ns = clock.now_ns()
        self._batch_frames: list[Spooled] | None = None  # the spool's batch on its way
        self._generation = 0
        self._lost = 0
        self.spooled_total = 0
        """Messages that went to the spool since start (an outage's size, for reports)."""
        self.last_error: str | None = None
        self.spool_full_dropped = 0
        """Messages lost because the spool could not keep them (full, or its disk)."""
        self.dropping: str | None = None
        """Why messages are being dropped, while a spell of drops lasts; else None."""
        self._drop_quiet_ns = int(drop_quiet_s * 1e9)
        self._last_drop_ns = 0
        self._kept_since_drop = False

    # -- the producer port ------------------------------------------------------------

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.tick()
        if self._must_spool():
            self._keep(topic, key, value)
            return
        try:
            self._inner.produce_tracked(topic, key, value, self._outcome(topic, key, value))
            self._kept_since_drop = True
        except Backpressure:
            self._purge()
            self._keep(topic, key, value)

    def tick(self) -> None:
        """Serve delivery reports, notice an outage, send the spool on: every produce does
        this, and an idle caller should now and then (a spool left by an earlier run is
        sent even when nothing new comes)."""
        self._inner.serve()
        if self._stalled() and self._inner.outstanding() > self._batch_outstanding():
            self._purge()  # the broker is away: what the producer holds goes first, in order
        self._send_batch()
        if (
            self.dropping is not None
            and self._kept_since_drop
            and self._clock.now_ns() - self._last_drop_ns > self._drop_quiet_ns
        ):
            self.dropping = None

    def flush(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for the broker to take everything, the spool included; then
        purge what the producer still holds into the spool. Returns the messages not
        acknowledged, all of them then on disk (`spooled`) unless counted lost."""
        deadline = self._clock.now_ns() + int(timeout_s * 1e9)
        while True:
            remaining_s = max(0.0, (deadline - self._clock.now_ns()) / 1e9)
            held = self._inner.flush(min(1.0, remaining_s))
            self._send_batch()
            if held + self._spool.pending == 0:
                return 0
            if self._clock.now_ns() >= deadline:
                break
            if held == 0 and self._batch_frames is None:
                self._sleep(min(remaining_s, 0.1))  # the spool waits for the broker
        self._purge()
        return self._spool.pending

    @property
    def failed(self) -> int:
        return self._lost

    @property
    def spooled(self) -> int:
        """Messages on disk, not acknowledged yet."""
        return self._spool.pending

    def counters(self) -> dict[str, int]:
        """Its losses, for the collector's counters."""
        return {"spool_full_dropped": self.spool_full_dropped}

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

    def _batch_outstanding(self) -> int:
        return 0 if self._batch_frames is None else len(self._batch_frames)

    def _must_spool(self) -> bool:
        """Whether a new message must queue behind the spool rather than go straight on."""
        if self._stalled():
            return True
        if not self._spool.pending:
            return False
        # Straight on only behind a batch that holds all the spool has.
        return self._batch_frames is None or len(self._batch_frames) != self._spool.pending

    def _purge(self) -> None:
        """Fail what the producer holds; the callbacks keep each message on disk."""
        if self._inner.outstanding():
            self._inner.purge()
            self._inner.serve()

    def _keep(self, topic: str, key: bytes | None, value: bytes) -> None:
        error = self._spool.append(topic, key, value)
        if error is None:
            self.spooled_total += 1
            self._kept_since_drop = True
            return
        self._lost += 1
        self.spool_full_dropped += 1
        self.last_error = f"message lost: {error}"
        self._last_drop_ns = self._clock.now_ns()
        if self.dropping is None:
            self.dropping, self._kept_since_drop = error, False

    def _outcome(self, topic: str, key: bytes | None, value: bytes) -> Done:
        """The callback of a message sent straight on."""

        def done(error: DeliveryError | None) -> None:
            if error is None:
                return
            self.last_error = error.reason
            if error.permanent:
                self._lost += 1
            else:
                self._keep(topic, key, value)  # kept on disk, to be sent again

        return done

    def _send_batch(self) -> None:
        """Send the spool's oldest messages when nothing else is on its way."""
        if self._batch_frames is not None or not self._spool.pending:
            return
        if self._inner.outstanding() > 0:
            return  # older messages first
        frames = self._spool.peek(self._batch)
        if not frames:
            return
        self._generation += 1
        generation = self._generation
        outcomes: list[DeliveryError | bool | None] = [False] * len(frames)  # False: no word yet
        self._batch_frames = frames

        def done_at(i: int) -> Done:
            def done(error: DeliveryError | None) -> None:
                if generation == self._generation:
                    outcomes[i] = error
                    if all(o is not False for o in outcomes):
                        self._settle(frames, outcomes)

            return done

        for i, frame in enumerate(frames):
            try:
                self._inner.produce_tracked(frame.topic, frame.key, frame.value, done_at(i))
            except Backpressure:
                for j in range(i, len(frames)):
                    outcomes[j] = DeliveryError("the producer's queue is full", permanent=False)
                self._settle(frames, outcomes)
                return

    def _settle(self, frames: list[Spooled], outcomes: list[DeliveryError | bool | None]) -> None:
        """The batch is answered: consume it as far as each message is done for good."""
        self._generation += 1  # late callbacks of this batch change nothing now
        self._batch_frames = None
        done = 0
        for outcome in outcomes:
            if isinstance(outcome, DeliveryError):
                self.last_error = outcome.reason
                if not outcome.permanent:
                    break
                self._lost += 1
            done += 1
        self._spool.consume(frames[:done])
