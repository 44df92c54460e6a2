"""The correlator's step: one raw message in, derived messages (or a dead letter) out.

A Step (zerotrace/step.py). Pure apart from the codec's registry look-ups: no clock is read
(time comes from records and from `tick(now_ns)`; a dead letter is stamped with its message's
own time). The shells call it alike: the faust shell (distributed), the embedded runner of
`zerotrace run`, and `zerotrace analyze` (records of a capture, `process_record`).
Connection state (HTTP conversations) lives in the step, in memory; `held()` tells the shell
where the records of the exchanges in flight start, so a restarted worker rebuilds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec
from zerotrace.deadletter import dead_letter
from zerotrace.errors import PoisonInput
from zerotrace.step import Held, Output, StepCounters
from zerotrace_correlator.fileio_spans import file_open_span
from zerotrace_correlator.http_llm_step import HttpLlmCorrelator
from zerotrace_correlator.socket_call import calls_of_batch
from zerotrace_correlator.span_timings import NO_DIRS, FileDirs
from zerotrace_correlator.trace_assembly import exchange_key

CONSUMER = names.GROUP_CORRELATOR
INPUT_TOPICS = (names.RAW_FILEIO.name, names.RAW_SOCKET.name, names.RAW_CONN.name)
# Idle connections are looked for at most this often, in event time.
ADVANCE_EVERY_NS = 1_000_000_000
# Event time is a watermark: the oldest of the latest times of the input partitions, so a
# partition that lags behind the others (a backlog) holds time back and its connections are
# not closed before their last records are read. A partition this far behind the newest is
# taken as idle, not lagging, and stops holding time back.
IDLE_PARTITION_NS = 30_000_000_000
# When no events come, time still has to move (a last CLOSE must take effect): once the input
# has been quiet this long by the clock, `tick` moves event time up to the clock minus this
# lag. Only on a quiet input: a worker that lags behind a backlog must not jump ahead of it.
TICK_LAG_NS = 5_000_000_000
# A connection busy (an exchange in flight) since this long before event time is not held
# back for a restart: see HttpLlmCorrelator.held.
HOLD_LIMIT_NS = 600_000_000_000


def span_key(span: Mapping[str, Any]) -> bytes:
    """derived.span's key: the span's exchange, so its client's and its server's span meet on
    one partition for trace assembly (trace_step.py); its own id when it has none."""
    return (exchange_key(span) or str(span["span_id"])).encode()


class CorrelatorStep:
    group = CONSUMER
    input_topics = INPUT_TOPICS

    def __init__(self, codec: AvroCodec, file_dirs: FileDirs = NO_DIRS) -> None:
        """file_dirs: the KV-cache and model directories whose file I/O spans tag."""
        self._codec = codec
        self.http = HttpLlmCorrelator(file_dirs=file_dirs)
        self.step_counters = StepCounters()
        self._event_time_ns = 0
        self._advanced_at_ns = 0
        self._last_input_ns = 0  # the tick time by which the last record had been taken
        self._consumed_at_tick = 0
        self._partition_ns: dict[tuple[str, int], int] = {}

    def process(self, message: Message) -> list[Output]:
        self.step_counters.consumed += 1
        try:
            outputs = self._derive(message)
        except PoisonInput as exc:
            self.step_counters.dead_letters += 1
            topic, key, value = dead_letter(
                self._codec, message, CONSUMER, exc.reason, message.timestamp_ms * 1_000_000
            )
            return [Output(topic, key, value)]
        self.step_counters.produced += len(outputs)
        return outputs

    def process_record(self, record: str, datum: Mapping[str, Any]) -> list[Output]:
        """A decoded raw record (from a pcap, say): the same logic without the bytes."""
        outputs = self._derive_record(record, datum, record)
        self.step_counters.produced += len(outputs)
        return outputs

    def tick(self, now_ns: int) -> list[Output]:
        """Called by the shell about once a second with the clock: lets time pass on a quiet
        input (no record taken since the previous tick, for TICK_LAG_NS)."""
        self.http.holds.took(None)
        if self.step_counters.consumed != self._consumed_at_tick:
            self._consumed_at_tick = self.step_counters.consumed
            self._last_input_ns = now_ns
        if now_ns - self._last_input_ns < TICK_LAG_NS:
            return []  # records are still coming: their own times move event time
        now = now_ns - TICK_LAG_NS
        if now <= self._event_time_ns:
            return []
        self._event_time_ns = now
        self._advanced_at_ns = now
        return self._encode(self.http.advance(now))

    def flush(self, now_ns: int = 0, reason: str = "end of input") -> list[Output]:
        """End of input: report every exchange still in flight, incomplete, with `reason`."""
        self.http.holds.took(None)
        return self._encode(self.http.flush(reason))

    def held(self) -> Held:
        return self.http.holds.held(since_ns=self._event_time_ns - HOLD_LIMIT_NS)

    def counters(self) -> dict[str, int]:
        return {**self.step_counters.as_dict(), **self.http.counters}

    def _derive(self, message: Message) -> list[Output]:
        record, datum = self._codec.decode(message.value)
        source = (message.topic, message.partition)
        self.http.holds.took((source, message.offset))
        return self._derive_record(record, datum, message.topic, source)

    def _derive_record(
        self,
        record: str,
        datum: Mapping[str, Any],
        where: str,
        source: tuple[str, int] = ("record", 0),
    ) -> list[Output]:
        if record == names.RAW_FILEIO.record:
            if self.http.timings.on_file(datum):
                return []  # a read or write: put on the span its thread serves, not one itself
            span = file_open_span(datum)
            value = self._codec.encode(names.DERIVED_SPAN.record, span)
            return [Output(names.DERIVED_SPAN.name, span_key(span), value)]
        if record == names.SOCKET_BATCH_RECORD:
            # One connection's calls: time moves once, after them (as for one call), so a
            # grace or timeout that falls inside the batch cannot split the connection.
            calls = calls_of_batch(datum)
            derived = self.http.feed_calls(str(datum["conn_id"]), calls)
            last_ns = max((call.end_ns for call in calls), default=0)
            derived += self._advance(last_ns, source)
        elif record == names.RAW_SOCKET.record:
            derived = self.http.feed_socket(datum)
            derived += self._advance(int(datum["end_ns"]), source)
        elif record == names.RAW_CONN.record:
            derived = self.http.feed_conn(datum)
            derived += self._advance(int(datum["ts_ns"]), source)
        else:
            raise PoisonInput(f"{where} carries {record}, which the correlator does not take")
        return self._encode(derived)

    def _advance(self, event_ns: int, source: tuple[str, int]) -> list[tuple[str, dict[str, Any]]]:
        self._partition_ns[source] = max(self._partition_ns.get(source, 0), event_ns)
        newest = max(self._partition_ns.values())
        watermark = min(t for t in self._partition_ns.values() if newest - t < IDLE_PARTITION_NS)
        self._event_time_ns = max(self._event_time_ns, watermark)
        if self._event_time_ns - self._advanced_at_ns < ADVANCE_EVERY_NS:
            return []
        self._advanced_at_ns = self._event_time_ns
        return self.http.advance(self._event_time_ns)

    def _encode(self, derived: list[tuple[str, dict[str, Any]]]) -> list[Output]:
        out = []
        for record, datum in derived:
            if record == names.DERIVED_SPAN.record:
                topic, key = names.DERIVED_SPAN.name, span_key(datum)
                self.http.timings.on_span(datum)
            elif record == names.DERIVED_LLM.record:
                topic, key = names.DERIVED_LLM.name, str(datum["service"]).encode()
            else:
                raise AssertionError(f"the correlator made an unknown record {record}")
            out.append(Output(topic, key, self._codec.encode(record, datum)))
        return out
