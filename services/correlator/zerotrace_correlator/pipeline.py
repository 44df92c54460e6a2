"""The correlator's step: one raw message in, derived messages (or a dead letter) out.

Pure apart from the codec's registry look-ups; both shells call it: the faust agent
(distributed) and the in-process loop of `zerotrace run` (embedded), and `zerotrace analyze`.
Connection state (HTTP conversations) lives in the step, in memory: a restarted worker starts
with empty conversations and reports the exchanges it saw only in part as aborted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.clock import Clock
from zerotrace.codec import AvroCodec
from zerotrace.deadletter import dead_letter
from zerotrace.errors import PoisonInput
from zerotrace_correlator.fileio_spans import file_open_span
from zerotrace_correlator.http_llm_step import HttpLlmCorrelator

CONSUMER = names.GROUP_CORRELATOR
INPUT_TOPICS = (names.RAW_FILEIO.name, names.RAW_SOCKET.name, names.RAW_CONN.name)
# Idle connections are looked for at most this often, in event time.
ADVANCE_EVERY_NS = 1_000_000_000
# When no events come, time still has to move (a last CLOSE must take effect): `tick` moves
# event time up to the clock minus this lag, longer than a record takes through the bus.
TICK_LAG_NS = 5_000_000_000


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
        self.http = HttpLlmCorrelator()
        self.counters = StepCounters()
        self._event_time_ns = 0
        self._advanced_at_ns = 0

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

    def process_record(self, record: str, datum: Mapping[str, Any]) -> list[Output]:
        """A decoded raw record (from a pcap, say): the same logic without the bytes."""
        outputs = self._derive_record(record, datum, record)
        self.counters.produced += len(outputs)
        return outputs

    def tick(self) -> list[Output]:
        """Called by the shell about once a second: lets time pass on a quiet input."""
        now = self._clock.now_ns() - TICK_LAG_NS
        if now <= self._event_time_ns:
            return []
        self._event_time_ns = now
        self._advanced_at_ns = now
        return self._encode(self.http.advance(now))

    def flush(self) -> list[Output]:
        """End of input: report every exchange still in flight (as aborted)."""
        return self._encode(self.http.flush())

    def _derive(self, message: Message) -> list[Output]:
        record, datum = self._codec.decode(message.value)
        return self._derive_record(record, datum, message.topic)

    def _derive_record(self, record: str, datum: Mapping[str, Any], where: str) -> list[Output]:
        if record == names.RAW_FILEIO.record:
            span = file_open_span(datum)
            value = self._codec.encode(names.DERIVED_SPAN.record, span)
            return [Output(names.DERIVED_SPAN.name, span["trace_id"].encode(), value)]
        if record == names.RAW_SOCKET.record:
            derived = self.http.feed_socket(datum)
            derived += self._advance(int(datum["end_ns"]))
        elif record == names.RAW_CONN.record:
            derived = self.http.feed_conn(datum)
            derived += self._advance(int(datum["ts_ns"]))
        else:
            raise PoisonInput(f"{where} carries {record}, which the correlator does not take")
        return self._encode(derived)

    def _advance(self, event_ns: int) -> list[tuple[str, dict[str, Any]]]:
        self._event_time_ns = max(self._event_time_ns, event_ns)
        if self._event_time_ns - self._advanced_at_ns < ADVANCE_EVERY_NS:
            return []
        self._advanced_at_ns = self._event_time_ns
        return self.http.advance(self._event_time_ns)

    def _encode(self, derived: list[tuple[str, dict[str, Any]]]) -> list[Output]:
        out = []
        for record, datum in derived:
            if record == names.DERIVED_SPAN.record:
                topic, key = names.DERIVED_SPAN.name, str(datum["trace_id"])
            elif record == names.DERIVED_LLM.record:
                topic, key = names.DERIVED_LLM.name, str(datum["service"])
            else:
                raise AssertionError(f"the correlator made an unknown record {record}")
            out.append(Output(topic, key.encode(), self._codec.encode(record, datum)))
        return out
