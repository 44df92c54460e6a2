"""Trace assembly's two steps (zerotrace/step.py): spans in, TraceEdge records out.

`ExchangeTraceStep` reads derived.span (keyed by exchange), links the client's and the
server's span of each exchange, and passes every span on to derived.span.by-process keyed by
node and process; `ProcessTraceStep` reads that and links inside each process. Embedded, both
run in the one process after the correlator; distributed, `zerotrace traces` runs them as
faust workers, scaled by partition like the others. See trace_assembly.py for the rules.

A step holds the input offsets of the spans its links still hold (waiting for the other end,
up to HOLD_NS of event time), so a worker that restarts reads them again and finds the links
they were waiting for; links have deterministic ids, so the ones written twice replace
themselves. (A restart does not bring back what was let go: a thread found multiplexed before
the held spans is taken for a plain one until it is found so again.)
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
from zerotrace_correlator.trace_assembly import (
    ExchangeLinks,
    ProcessLinks,
    SpanView,
    view,
)


def process_key(span: Mapping[str, Any]) -> bytes:
    return f"{span.get('node_id', '')}:{span.get('pid', 0)}".encode()


class _TraceStep:
    group = ""
    input_topics: tuple[str, ...] = ()

    def __init__(self, codec: AvroCodec, links: ExchangeLinks | ProcessLinks) -> None:
        self._codec = codec
        self.links = links
        self.step_counters = StepCounters()
        # span id -> (input partition, offset, span) of each span the links hold, for `held`
        self._offsets: dict[str, tuple[tuple[str, int], int, SpanView]] = {}

    def process(self, message: Message) -> list[Output]:
        self.step_counters.consumed += 1
        try:
            record, span = self._codec.decode(message.value)
            if record != names.DERIVED_SPAN.record:
                raise PoisonInput(f"{message.topic} carries {record}, not spans")
            v = view(span)
        except PoisonInput as exc:
            return self._dead_letter(message, exc.reason)
        except (KeyError, TypeError, ValueError) as exc:  # a span with a field out of shape
            return self._dead_letter(message, f"a span assembly cannot read: {exc!r}")
        out = self.passed_on(message, span)
        if v is not None:
            out += [self._edge(e) for e in self.links.add(v)]
            self._hold(message, v)
        self.step_counters.produced += len(out)
        return out

    def _dead_letter(self, message: Message, reason: str) -> list[Output]:
        self.step_counters.dead_letters += 1
        topic, key, value = dead_letter(
            self._codec, message, self.group, reason, message.timestamp_ms * 1_000_000
        )
        return [Output(topic, key, value)]

    def passed_on(self, message: Message, span: Mapping[str, Any]) -> list[Output]:
        return []

    def tick(self, now_ns: int) -> list[Output]:
        """Spans older than HOLD_NS of event time are let go."""
        self.links.expire()
        for span_id in [k for k, (_, _, v) in self._offsets.items() if not self._holds(v)]:
            del self._offsets[span_id]
        return []

    def flush(self, now_ns: int = 0, reason: str = "end of input") -> list[Output]:
        return []  # a link is written when found; nothing waits to be reported

    def held(self) -> Held:
        lowest: dict[tuple[str, int], int] = {}
        for where, offset, _ in self._offsets.values():
            if offset < lowest.get(where, offset + 1):
                lowest[where] = offset
        return lowest

    def counters(self) -> dict[str, int]:
        return {
            **self.step_counters.as_dict(),
            **self.links.counters,
            "trace.spans.held": self.links.held_spans(),
        }

    def _holds(self, v: SpanView) -> bool:
        links = self.links
        if isinstance(links, ExchangeLinks):
            return links.holds(v.span_id, v.exchange)
        return links.holds(v)

    def _hold(self, message: Message, v: SpanView) -> None:
        """Remembers where a span the links now hold was read (the first time it was)."""
        if not self._holds(v):
            self._offsets.pop(v.span_id, None)
            return
        where = (message.topic, message.partition)
        known = self._offsets.get(v.span_id)
        offset = message.offset if known is None else min(known[1], message.offset)
        self._offsets[v.span_id] = (where, offset, v)

    def _edge(self, record: dict[str, Any]) -> Output:
        value = self._codec.encode(names.DERIVED_TRACE.record, record)
        return Output(names.DERIVED_TRACE.name, str(record["child_span_id"]).encode(), value)


class ExchangeTraceStep(_TraceStep):
    """Across processes and hosts: client span -> server span of one exchange."""

    group = names.GROUP_TRACE_EXCHANGE
    input_topics = (names.DERIVED_SPAN.name,)

    def __init__(self, codec: AvroCodec) -> None:
        super().__init__(codec, ExchangeLinks())

    def passed_on(self, message: Message, span: Mapping[str, Any]) -> list[Output]:
        return [Output(names.DERIVED_SPAN_BY_PROCESS.name, process_key(span), message.value)]


class ProcessTraceStep(_TraceStep):
    """Inside a process: same thread, propagated ids."""

    group = names.GROUP_TRACE_PROCESS
    input_topics = (names.DERIVED_SPAN_BY_PROCESS.name,)

    def __init__(self, codec: AvroCodec) -> None:
        super().__init__(codec, ProcessLinks())
