"""Connections of other protocols through the correlator (proto_conversation.py, protocols.py,
proto_records.py): the first bytes pick the parser, every later call goes to it, and each
request/response pair comes out as one derived.span the Avro schema takes, with the client's
or the server's view, deterministic ids, and what was still waiting at the close as an error."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.http_wire import close, sock
from tests.unit.test_dns_wire import a_record, query, response, tcp
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_correlator import http_counters as c
from zerotrace_correlator import protocols
from zerotrace_correlator.http_llm_step import CLOSE_GRACE_NS, HttpLlmCorrelator
from zerotrace_correlator.proto_conversation import ProtoConversation, ProtoExchange
from zerotrace_correlator.proto_records import proto_span
from zerotrace_correlator.protocol_span import ProtoSpan

pytestmark = pytest.mark.unit

SPAN = names.DERIVED_SPAN.record
GET = b"*2\r\n$3\r\nGET\r\n$7\r\nuser:42\r\n"
SET = b"*3\r\n$3\r\nSET\r\n$7\r\nuser:42\r\n$5\r\nalice\r\n"


def spans(
    *records: dict[str, Any], correlator: HttpLlmCorrelator | None = None
) -> list[dict[str, Any]]:
    correlator = correlator or HttpLlmCorrelator()
    out = []
    for record in records:
        out += correlator.feed_conn(record) if "kind" in record else correlator.feed_socket(record)
    return [datum for record, datum in out if record == SPAN]


def test_redis_commands_seen_at_the_client_are_client_spans_with_db_attributes() -> None:
    found = spans(
        sock("EGRESS", GET + SET, 1_000),  # pipelined
        sock("INGRESS", b"$5\r\nalice\r\n+OK\r\n", 5_000),
    )
    assert [(s["name"], s["kind"], s["status"]) for s in found] == [
        ("GET", "redis.client", "OK"),
        ("SET", "redis.client", "OK"),
    ]
    get = found[0]
    assert (get["start_ns"], get["end_ns"]) == (1_000, 5_005)  # write start, read end
    attrs = get["attributes"]
    assert attrs[names.ATTR_DB_SYSTEM_NAME] == "redis"
    assert attrs[names.ATTR_DB_QUERY_TEXT] == "GET ?"  # arguments are not kept by default
    assert attrs[names.ATTR_OBSERVATION_POINT] == "CLIENT"
    assert (attrs[names.ATTR_PROCESS_PID], attrs[names.ATTR_PROCESS_NAME]) == ("10", "python3")
    assert found[0]["span_id"] != found[1]["span_id"]  # same start: told apart by rank


def test_the_server_side_is_a_server_span_and_ids_are_the_same_every_time() -> None:
    records = (sock("INGRESS", GET, 1_000), sock("EGRESS", b"$-1\r\n", 2_000))
    [first] = spans(*records)
    [again] = spans(*records)
    assert (
        first["kind"] == "redis.server"
        and first["attributes"]["zerotrace.observation_point"] == "SERVER"
    )
    assert first == again


def test_an_error_reply_fails_the_span_and_a_command_never_answered_comes_at_the_close() -> None:
    correlator = HttpLlmCorrelator()
    failed = spans(
        sock("EGRESS", GET, 1_000),
        sock("INGRESS", b"-WRONGTYPE Operation against a key\r\n", 2_000),
        sock("EGRESS", SET, 3_000),
        close(4_000),
        correlator=correlator,
    )
    assert [(s["status"], s["attributes"].get(names.ATTR_ERROR_TYPE)) for s in failed] == [
        ("ERROR", "WRONGTYPE")
    ]
    [waiting] = [d for r, d in correlator.advance(4_000 + CLOSE_GRACE_NS) if r == SPAN]
    assert (waiting["name"], waiting["status"]) == ("SET", "ERROR")
    assert waiting["attributes"][names.ATTR_ERROR_TYPE] == "incomplete"
    assert correlator.counters[c.CONNS_HANDED_OVER] == 1 and correlator.counters[c.PROTO_SPANS] == 2


def test_dns_over_tcp_is_recognised_and_paired() -> None:
    ask = tcp(query(7, "api.example.com"))
    answer = tcp(response(7, "api.example.com", answers=[a_record("10.0.0.7")]))
    [span] = spans(sock("EGRESS", ask, 1_000), sock("INGRESS", answer, 9_000))
    assert (span["name"], span["kind"], span["status"]) == ("A api.example.com", "dns.client", "OK")
    assert span["attributes"]["dns.question.name"] == "api.example.com"


def test_a_parser_that_stops_ends_the_connection_quietly() -> None:
    correlator = HttpLlmCorrelator()
    spans(
        sock("EGRESS", GET, 1_000),
        sock("INGRESS", b"\x00garbage\r\n", 2_000),
        correlator=correlator,
    )
    conv = correlator.conversation("c1")
    assert isinstance(conv, ProtoConversation) and conv.gave_up
    assert correlator.counters[c.PROTO_PARSE_ERRORS] == 1
    assert spans(sock("EGRESS", GET, 3_000), correlator=correlator) == []


def test_every_span_encodes() -> None:
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    for span in spans(sock("EGRESS", GET, 1), sock("INGRESS", b"$1\r\nx\r\n", 2)):
        codec.encode(SPAN, span)


def test_the_registry_recognises_each_protocol_and_not_http() -> None:
    assert protocols.recognise(GET) is not None
    assert protocols.recognise(b"GET / HTTP/1.1\r\n") is None
    assert protocols.recognise(b"") is None
    assert protocols.recognise(b"\x16\x03\x01\x02\x00") is None
    names_seen = {e.name for e in protocols.PROTOCOLS}
    assert len(names_seen) == len(protocols.PROTOCOLS)


def test_a_network_capture_is_filed_as_the_client_side_with_the_peers_swapped_right() -> None:
    span = ProtoSpan("redis", "GET", 1, 2, "ok", {"db.system.name": "redis", "flag": True})
    origin = {
        "local_addr": "10.0.0.1",
        "local_port": 6379,
        "remote_addr": "10.0.0.2",
        "remote_port": 40000,
        "pid": 0,
        "node_id": "n",
    }
    record = proto_span(ProtoExchange("c", span, 0, "NETWORK", origin, False))
    attrs = record["attributes"]
    assert record["kind"] == "redis.client" and attrs["flag"] == "true"
    assert (attrs[names.ATTR_SERVER_ADDRESS], attrs[names.ATTR_SERVER_PORT]) == ("10.0.0.1", "6379")
    assert attrs[names.ATTR_CLIENT_ADDRESS] == "10.0.0.2"
