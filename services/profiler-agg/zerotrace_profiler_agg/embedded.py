"""profiler-agg embedded: the same ProfileStep driven from the in-process loop of `zerotrace run`.

A thin shell over the bus port: take what the raw topics hold, hand each message to the step,
produce what it returns, then commit (side effects first). The caller owns the loop and the
clock: it calls `run_once(now_ns)` on every turn and `finish()` once at the end of input.
"""

from __future__ import annotations

from zerotrace.bus import Bus, Consumer, Producer
from zerotrace.codec import AvroCodec
from zerotrace.step import Output
from zerotrace_profiler_agg.profile_step import CONSUMER, INPUT_TOPICS, ProfileStep
from zerotrace_profiler_agg.settings import ProfilerAggSettings

TICK_EVERY_NS = 1_000_000_000  # as the faust worker's timer


class EmbeddedProfileAgg:
    def __init__(
        self, bus: Bus, codec: AvroCodec, settings: ProfilerAggSettings | None = None
    ) -> None:
        self.step = ProfileStep(codec, settings)
        self._in: Consumer = bus.consumer(CONSUMER)
        self._in.subscribe(INPUT_TOPICS)
        self._out: Producer = bus.producer()
        self._ticked_ns: int | None = None

    def run_once(self, now_ns: int, limit: int = 1000) -> int:
        """Fold what is waiting (at most `limit` messages; never blocks) and let time pass once
        a second by `now_ns`; returns how many messages were taken."""
        taken = 0
        while taken < limit and (message := self._in.poll(0)) is not None:
            taken += 1
            self._send(self.step.process(message))
            self._in.commit(message)
        if self._ticked_ns is None or now_ns - self._ticked_ns >= TICK_EVERY_NS:
            self._ticked_ns = now_ns
            self._send(self.step.tick(now_ns))
        return taken

    def finish(self) -> None:
        """End of input: fold what is left, then emit every open window and due snapshot."""
        while (message := self._in.poll(0)) is not None:
            self._send(self.step.process(message))
            self._in.commit(message)
        self._send(self.step.flush())

    def counters(self) -> dict[str, int]:
        """For the end-of-run summary: the step's counts and the fold's (late, evicted, ...)."""
        c = self.step.counters
        return {
            "consumed": c.consumed,
            "produced": c.produced,
            "dead_letters": c.dead_letters,
            **self.step.fold.counters(),
        }

    def _send(self, outputs: list[Output]) -> None:
        for out in outputs:
            self._out.produce(out.topic, out.key, out.value)
