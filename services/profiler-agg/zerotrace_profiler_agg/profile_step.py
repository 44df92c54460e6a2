"""profiler-agg's step: one raw message in, derived.profile messages (or a dead letter) out.

Both shells call it with one instance: the faust worker (distributed) and the in-process loop of
`zerotrace run` (embedded). Apart from the codec's registry look-ups it is pure: no clock is
read (a dead letter is stamped with its message's own time), so the same messages in the same
order give byte-identical output messages in both shells.

Call `process` for each message of INPUT_TOPICS, `tick(now_ns)` about once a second with the
clock, and `flush()` once at the end of input; produce what each returns, in order. None of
them blocks; only the codec raises (ValueError: a bug, not input).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec
from zerotrace.deadletter import dead_letter
from zerotrace.errors import PoisonInput
from zerotrace.step import Output, StepCounters
from zerotrace_profiler_agg.profile_fold import ProfileFold
from zerotrace_profiler_agg.settings import MS, ProfilerAggSettings

CONSUMER = names.GROUP_PROFILER_AGG
INPUT_TOPICS = (names.RAW_STACK.name, names.RAW_GPU.name)


class ProfileStep:
    def __init__(self, codec: AvroCodec, settings: ProfilerAggSettings | None = None) -> None:
        self._codec = codec
        self.fold = ProfileFold(settings)
        self.counters = StepCounters()

    def process(self, message: Message) -> list[Output]:
        self.counters.consumed += 1
        try:
            record, datum = self._codec.decode(message.value)
            return self.process_record(
                record, datum, message.topic, (message.topic, message.partition)
            )
        except PoisonInput as exc:
            self.counters.dead_letters += 1
            topic, key, value = dead_letter(
                self._codec, message, CONSUMER, exc.reason, message.timestamp_ms * MS
            )
            return [Output(topic, key, value)]

    def process_record(
        self,
        record: str,
        datum: Mapping[str, Any],
        where: str = "a record",
        source: tuple[str, int] = ("record", 0),
    ) -> list[Output]:
        """A decoded raw record: the same logic without the bytes (replays, tests).
        source: (topic, partition) it was read from."""
        if record == names.RAW_STACK.record:
            return self._encode(self.fold.add_stack(datum, source))
        if record == names.RAW_GPU.record:
            return self._encode(self.fold.add_gpu(datum, source))
        raise PoisonInput(f"{where} carries {record}, which profiler-agg does not take")

    def tick(self, now_ns: int) -> list[Output]:
        return self._encode(self.fold.tick(now_ns))

    def flush(self) -> list[Output]:
        return self._encode(self.fold.flush())

    def _encode(self, windows: list[dict[str, Any]]) -> list[Output]:
        self.counters.produced += len(windows)
        topic = names.DERIVED_PROFILE
        return [
            Output(topic.name, str(w["service"]).encode(), self._codec.encode(topic.record, w))
            for w in windows
        ]
