"""Trace assembly's steps (zerotrace_correlator/trace_step.py) over Avro messages: the exchange
step links across processes and passes every span on keyed by process; the process step links
inside it; both hold the offsets of the spans they still hold, and dead-letter what is not a
span. Also: the correlator keys derived.span by exchange (pipeline.span_key)."""

from __future__ import annotations

from typing import Any

import pytest

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.step import Output
from zerotrace_correlator.pipeline import span_key
from zerotrace_correlator.trace_step import ExchangeTraceStep, ProcessTraceStep, process_key

pytestmark = pytest.mark.unit
MS = 1_000_000


def span(
    span_id: str,
    side: str,
    pid: int,
    tid: int,
    start_ms: int,
    end_ms: int,
    seq: int | None,
    server_port: int = 8000,
    client_port: int = 0,
) -> dict[str, Any]:
    attrs = {
        names.ATTR_CLIENT_ADDRESS: "10.0.0.1",
        names.ATTR_CLIENT_PORT: str(client_port or 40000 + pid),
        names.ATTR_SERVER_ADDRESS: "10.0.0.2",
        names.ATTR_SERVER_PORT: str(server_port),
    }
    if seq is not None:
        attrs[names.ATTR_TCP_REQUEST_SEQ] = str(seq)
    return {
        "span_id": span_id,
        "trace_id": span_id * 2,
        "parent_span_id": None,
        "node_id": "n1",
        "pid": pid,
        "tid": tid,
        "process_name": "python3",
        "container_id": None,
        "service": f"svc{pid}",
        "kind": f"http.{side}",
        "name": "GET /",
        "start_ns": start_ms * MS,
        "end_ns": end_ms * MS,
        "status": "OK",
        "attributes": attrs,
        "source_event_ids": [],
    }


@pytest.fixture
def codec() -> AvroCodec:
    return AvroCodec(load_schema_dir(), InMemorySchemaRegistry())


def message(codec: AvroCodec, topic: str, offset: int, datum: dict[str, Any]) -> Message:
    value = codec.encode(names.DERIVED_SPAN.record, datum)
    return Message(topic, 0, offset, span_key(datum), value, 0)


def test_a_request_across_two_processes_and_its_calls_come_out_as_links(codec: AvroCodec) -> None:
    gateway_in = span("a" * 16, "server", 1, 11, 0, 100, seq=5)
    gateway_out = span("b" * 16, "client", 1, 11, 10, 90, seq=77, server_port=9000)
    upstream_in = span("c" * 16, "server", 2, 21, 12, 88, 77, server_port=9000, client_port=40001)
    exchange, process = ExchangeTraceStep(codec), ProcessTraceStep(codec)
    passed: list[Output] = []
    edges: list[Output] = []
    for offset, datum in enumerate([gateway_out, upstream_in, gateway_in]):
        for out in exchange.process(message(codec, names.DERIVED_SPAN.name, offset, datum)):
            (passed if out.topic == names.DERIVED_SPAN_BY_PROCESS.name else edges).append(out)
    assert [p.key for p in passed] == [b"n1:1", b"n1:2", b"n1:1"]
    for offset, out in enumerate(passed):
        edges += process.process(Message(out.topic, 0, offset, out.key, out.value, 0))
    assert {e.topic for e in edges} == {names.DERIVED_TRACE.name}
    got = sorted(
        (d["parent_span_id"], d["child_span_id"], d["rule"])
        for d in (codec.decode(e.value)[1] for e in edges)
    )
    assert got == [
        ("a" * 16, "b" * 16, names.TRACE_RULE_SAME_THREAD),
        ("b" * 16, "c" * 16, names.TRACE_RULE_TCP_SEQ),
    ]
    assert [e.key for e in edges] == [d.encode() for d in ("c" * 16, "b" * 16)]  # keyed by child
    assert exchange.held() == {(names.DERIVED_SPAN.name, 0): 0}
    assert exchange.counters()["trace.links"] == 1
    assert process.counters()["trace.links"] == 1


def test_spans_are_keyed_by_exchange_and_process(codec: AvroCodec) -> None:
    s = span("d" * 16, "client", 3, 3, 0, 1, seq=None)
    assert span_key(s) == b"10.0.0.1:40003>10.0.0.2:8000"
    assert span_key({**s, "attributes": {}}) == b"d" * 16
    assert process_key(s) == b"n1:3"


def test_what_is_not_a_span_is_a_dead_letter(codec: AvroCodec) -> None:
    step = ExchangeTraceStep(codec)
    out = step.process(Message(names.DERIVED_SPAN.name, 0, 0, None, b"\x00garbage", 0))
    assert [o.topic for o in out] == [names.DEAD_LETTER.name]
    assert step.counters()["dead_letters"] == 1
