"""The correlator's step: one raw message in, derived messages (or a dead letter) out.

Pure apart from the codec's registry look-ups; both shells call it: the faust agent
(distributed) and the in-process loop of `zerotrace run` (embedded).
"""

from __future__ import annotations

from dataclasses import dataclass

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.clock import Clock
from zerotrace.codec import AvroCodec
from zerotrace.deadletter import dead_letter
from zerotrace.errors import PoisonInput
from zerotrace_correlator.fileio_spans import file_open_span

CONSUMER = names.GROUP_CORRELATOR
INPUT_TOPICS = (names.RAW_FILEIO.name,)


@dataclass(frozen=True)
class Output:
    topic: str
    key: bytes | None
    value: bytes


@dataclass
class StepCounters:
    consumed: int = 0
    produced: int = 0
    dead_letters: int = 0


class CorrelatorStep:
    def __init__(self, codec: AvroCodec, clock: Clock) -> None:
        self._codec = codec
        self._clock = clock
        self.counters = StepCounters()

    def process(self, message: Message) -> list[Output]:
        self.counters.consumed += 1
        try:
            outputs = self._derive(message)
        except PoisonInput as exc:
            self.counters.dead_letters += 1
            topic, key, value = dead_letter(
                self._codec, message, CONSUMER, exc.reason, self._clock.now_ns()
            )
            return [Output(topic, key, value)]
        self.counters.produced += len(outputs)
        return outputs

    def _derive(self, message: Message) -> list[Output]:
        record, datum = self._codec.decode(message.value)
        if record != names.RAW_FILEIO.record:
            raise PoisonInput(
                f"{message.topic} carries {record}, expected {names.RAW_FILEIO.record}"
            )
        span = file_open_span(datum)
        value = self._codec.encode(names.DERIVED_SPAN.record, span)
        return [Output(names.DERIVED_SPAN.name, span["trace_id"].encode(), value)]
