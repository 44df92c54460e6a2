"""kafka_wire.py: Kafka spans of one connection. The bytes are the builders of
test_kafka_wire_messages.py (the broker's schemas, checked there against aiokafka's encoder):
a producer's and a consumer's conversation, pipelined and split anywhere, error responses,
and hostile input, which ends in a reason or in counted skips, never in an exception, with
the parser's buffers under their documented limits all along."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_kafka_wire_messages import (
    API_VERSIONS,
    FETCH,
    METADATA,
    NOT_LEADER,
    OFFSET_OUT_OF_RANGE,
    ORDERS_ID,
    PRODUCE,
    UNKNOWN_TOPIC,
    batch,
    fetch_request,
    fetch_response,
    i16,
    i32,
    metadata_request,
    metadata_response,
    produce_request,
    produce_response,
    real_batch,
    request,
    response,
    string,
    uvarint,
)
from zerotrace import names
from zerotrace_correlator import kafka_wire
from zerotrace_correlator import kafka_wire_messages as msg
from zerotrace_correlator.kafka_wire import KafkaWireParser, recognise
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtoSpan, Side

pytestmark = pytest.mark.unit

SASL_HANDSHAKE = 17
BUFFER_LIMIT = 2 * msg.MAX_STRING_BYTES  # both directions, one field each at most
Wire = list[tuple[Side, bytes]]


def api_versions_request(corr: int, client_id: str = "producer-1") -> bytes:
    # ApiVersions v3: client software name and version, compact strings, then tags.
    return request(API_VERSIONS, 3, corr, client_id, b"\x08rdkafka\x062.6.0\x00")


def api_versions_response(corr: int) -> bytes:
    # ApiVersions answers with response header v0 even when flexible: a body we step over.
    body = i16(0) + uvarint(2) + i16(0) + i16(3) + i16(13) + b"\x00" + i32(0) + b"\x00"
    return response(corr, body, flex=False)


def answered(i: int) -> tuple[bytes, bytes]:
    req, resp = exchanges()[i]
    assert resp is not None
    return req, resp


def exchanges() -> list[tuple[bytes, bytes | None]]:
    """A client's conversation with a broker: (request, response or None)."""
    three = real_batch([b"a", b"b", b"c"])
    orders = [(0, "orders", ORDERS_ID, [(0, 0), (0, 1)])]
    return [
        (api_versions_request(0), api_versions_response(0)),
        (
            request(METADATA, 12, 1, "producer-1", metadata_request(12, ["orders"])),
            response(1, metadata_response(12, orders), flex=True),
        ),
        (
            request(PRODUCE, 9, 2, "producer-1", produce_request(9, [("orders", [(1, three)])])),
            response(2, produce_response(9, [("orders", [(1, 0, 42)])]), flex=True),
        ),
        (
            request(PRODUCE, 13, 3, "producer-1", produce_request(13, [(ORDERS_ID, [(0, three)])])),
            response(3, produce_response(13, [(ORDERS_ID, [(0, NOT_LEADER, -1)])]), flex=True),
        ),
        (
            request(FETCH, 13, 4, "consumer-1", fetch_request(13, [(ORDERS_ID, [0])])),
            response(4, fetch_response(13, [(ORDERS_ID, [(0, 0, three + three)])]), flex=True),
        ),
        (
            request(FETCH, 11, 5, "consumer-1", fetch_request(11, [("orders", [0, 1])])),
            response(
                5,
                fetch_response(11, [("orders", [(0, OFFSET_OUT_OF_RANGE, None), (1, 0, None)])]),
                flex=False,
            ),
        ),
        (
            request(PRODUCE, 9, 6, "producer-1", produce_request(9, [("logs", [(2, three)])], 0)),
            None,
        ),
    ]


def one_by_one() -> Wire:
    wire: Wire = []
    for req, resp in exchanges():
        wire.append((REQUEST, req))
        if resp is not None:
            wire.append((RESPONSE, resp))
    return wire


def pipelined() -> Wire:
    requests = b"".join(req for req, _ in exchanges())
    responses = b"".join(resp for _, resp in exchanges() if resp is not None)
    return [(REQUEST, requests), (RESPONSE, responses)]


def run(wire: Wire, parser: KafkaWireParser | None = None) -> list[ProtoSpan]:
    parser = parser or KafkaWireParser()
    spans: list[ProtoSpan] = []
    for side, data in wire:
        spans += parser.feed(side, data, 0, 0)
        assert parser.buffered_bytes() <= BUFFER_LIMIT
    return spans


def common(api_key: int, name: str, operation: str, version: int, client: str) -> dict[str, object]:
    return {
        names.ATTR_MESSAGING_SYSTEM: "kafka",
        names.ATTR_MESSAGING_OPERATION_NAME: operation,
        names.ATTR_KAFKA_API_KEY: api_key,
        names.ATTR_KAFKA_API_NAME: name,
        names.ATTR_KAFKA_API_VERSION: version,
        names.ATTR_MESSAGING_CLIENT_ID: client,
    }


# --- every message kind -----------------------------------------------------------------------


def test_a_conversation_gives_one_span_per_request() -> None:
    spans = run(one_by_one())
    assert [(s.name, s.status, s.error_type) for s in spans] == [
        ("api_versions", "ok", ""),
        ("metadata orders", "ok", ""),
        ("send orders", "ok", ""),
        ("send orders", "error", "NOT_LEADER_OR_FOLLOWER"),
        ("receive orders", "ok", ""),
        ("receive orders", "error", "OFFSET_OUT_OF_RANGE"),
        ("send logs", "ok", ""),  # acks=0: no response comes, the request is the span
    ]
    assert all(s.protocol == "kafka" for s in spans)
    api, meta, produce, by_id, fetch, fetch_error, no_acks = (dict(s.attributes) for s in spans)
    assert api == common(18, "ApiVersions", "api_versions", 3, "producer-1")
    assert meta == {
        **common(3, "Metadata", "metadata", 12, "producer-1"),
        names.ATTR_MESSAGING_DESTINATION: "orders",
    }
    assert produce == {
        **common(0, "Produce", "send", 9, "producer-1"),
        names.ATTR_MESSAGING_OPERATION_TYPE: "send",
        names.ATTR_MESSAGING_DESTINATION: "orders",
        names.ATTR_MESSAGING_PARTITION: "1",
        names.ATTR_KAFKA_OFFSET: 42,
        names.ATTR_MESSAGING_BATCH_COUNT: 3,
    }
    # v13 names the topic by id; the Metadata response on this connection mapped it.
    assert by_id[names.ATTR_MESSAGING_DESTINATION] == "orders"
    assert by_id[names.ATTR_KAFKA_TOPIC_ID] == ORDERS_ID
    assert by_id[names.ATTR_ERROR_TYPE] == "NOT_LEADER_OR_FOLLOWER"
    assert names.ATTR_KAFKA_OFFSET not in by_id
    assert fetch == {
        **common(1, "Fetch", "receive", 13, "consumer-1"),
        names.ATTR_MESSAGING_OPERATION_TYPE: "receive",
        names.ATTR_MESSAGING_DESTINATION: "orders",
        names.ATTR_KAFKA_TOPIC_ID: ORDERS_ID,
        names.ATTR_MESSAGING_PARTITION: "0",
        names.ATTR_MESSAGING_BATCH_COUNT: 6,
    }
    assert names.ATTR_MESSAGING_PARTITION not in fetch_error  # two partitions
    assert fetch_error[names.ATTR_MESSAGING_BATCH_COUNT] == 0
    assert no_acks[names.ATTR_MESSAGING_DESTINATION] == "logs"
    assert [s.request_bytes for s in spans] == [len(req) for req, _ in exchanges()]
    assert [s.response_bytes for s in spans] == [len(r or b"") for _, r in exchanges()]


@pytest.mark.parametrize(
    ("api", "v"), [(PRODUCE, 3), (PRODUCE, 8), (FETCH, 4), (FETCH, 15), (FETCH, 17)]
)
def test_other_versions(api: int, v: int) -> None:
    t = ORDERS_ID if api == FETCH and v >= 13 else "t"
    if api == PRODUCE:
        wire = [
            (REQUEST, request(api, v, 9, "p", produce_request(v, [(t, [(0, batch(4))])]))),
            (RESPONSE, response(9, produce_response(v, [(t, [(0, 0, 7)])]), v >= 9)),
        ]
    else:
        wire = [
            (REQUEST, request(api, v, 9, "c", fetch_request(v, [(t, [0])]))),
            (RESPONSE, response(9, fetch_response(v, [(t, [(0, 0, batch(4))])]), v >= 12)),
        ]
    (span,) = run(wire)
    assert span.status == "ok"
    assert span.attributes[names.ATTR_MESSAGING_DESTINATION] == t
    assert span.attributes[names.ATTR_MESSAGING_BATCH_COUNT] == 4


def test_topic_ids_not_mapped_stay_hex() -> None:
    wire = [
        (REQUEST, request(FETCH, 13, 1, "c", fetch_request(13, [(ORDERS_ID, [0])]))),
        (RESPONSE, response(1, fetch_response(13, [(ORDERS_ID, [(0, 100, None)])]), True)),
    ]
    (span,) = run(wire)
    assert span.name == f"receive {ORDERS_ID}"
    assert span.error_type == "UNKNOWN_TOPIC_ID"


def test_several_topics_and_errors() -> None:
    topics = [("a", [(0, None)]), ("b", [(0, None)])]
    wire = [
        (REQUEST, request(PRODUCE, 9, 1, "p", produce_request(9, topics))),
        (
            RESPONSE,
            response(
                1, produce_response(9, [("a", [(0, NOT_LEADER, -1)]), ("b", [(0, 3, -1)])]), True
            ),
        ),
    ]
    (span,) = run(wire)
    assert span.name == "send"
    assert span.attributes[names.ATTR_KAFKA_TOPICS] == "a,b"
    assert names.ATTR_MESSAGING_DESTINATION not in span.attributes
    assert (
        span.attributes[names.ATTR_KAFKA_ERRORS]
        == "NOT_LEADER_OR_FOLLOWER,UNKNOWN_TOPIC_OR_PARTITION"
    )
    assert (span.status, span.error_type) == ("error", "NOT_LEADER_OR_FOLLOWER")


def test_metadata_errors_and_a_request_for_all_topics() -> None:
    wire = [
        (REQUEST, request(METADATA, 1, 1, None, metadata_request(1, None))),
        (
            RESPONSE,
            response(1, metadata_response(1, [(UNKNOWN_TOPIC, "gone", ORDERS_ID, [])]), False),
        ),
    ]
    (span,) = run(wire)
    assert span.name == "metadata"
    assert (span.status, span.error_type) == ("error", "UNKNOWN_TOPIC_OR_PARTITION")
    assert names.ATTR_MESSAGING_CLIENT_ID not in span.attributes


def test_fetch_session_error_at_the_top() -> None:
    wire = [
        (REQUEST, request(FETCH, 12, 1, "c", fetch_request(12, []))),
        (RESPONSE, response(1, fetch_response(12, [], error=70), True)),
    ]
    (span,) = run(wire)
    assert (span.name, span.error_type) == ("receive", "FETCH_SESSION_ID_NOT_FOUND")


def test_times_are_the_first_request_byte_and_the_last_response_byte() -> None:
    req, resp = answered(2)
    parser = KafkaWireParser()
    assert parser.feed(REQUEST, req[:3], 100, 110) == []
    assert parser.feed(REQUEST, req[3:], 200, 210) == []
    assert parser.feed(RESPONSE, resp[:-1], 300, 310) == []
    (span,) = parser.feed(RESPONSE, resp[-1:], 400, 410)
    assert (span.start_ns, span.end_ns) == (100, 410)


# --- pipelining and splits ----------------------------------------------------------------------


def same(a: list[ProtoSpan], b: list[ProtoSpan]) -> bool:
    """The same spans; pipelined, the acks=0 Produce comes out before the responses."""
    return sorted(a, key=repr) == sorted(b, key=repr)


def test_pipelined_requests_pair_by_correlation_id() -> None:
    spans = run(pipelined())
    assert spans[0].name == "send logs"
    assert same(spans, run(one_by_one()))


def test_a_response_split_byte_by_byte() -> None:
    req, resp = answered(4)
    whole = run([(REQUEST, req), (RESPONSE, resp)])
    by_byte = run([(REQUEST, req), *((RESPONSE, resp[i : i + 1]) for i in range(len(resp)))])
    assert by_byte == whole and len(whole) == 1


def split(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, 10_000), max_size=40), pipeline=st.booleans())
def test_any_split_gives_the_same_spans(cuts: list[int], pipeline: bool) -> None:
    wire = pipelined() if pipeline else one_by_one()
    pieces: Wire = []
    for i, (side, data) in enumerate(wire):
        pieces += [(side, piece) for piece in split(data, cuts[i:])]
    assert same(run(pieces), run(one_by_one()))


# --- hostile, truncated, corrupted --------------------------------------------------------------


def test_a_negative_size_stops_the_parser() -> None:
    parser = KafkaWireParser()
    assert parser.feed(REQUEST, b"\xff\xff\xff\xfe" + b"x" * 50, 0, 0) == []
    assert parser.error == "frame of -2 bytes cannot hold a Kafka request header"
    assert parser.feed(REQUEST, exchanges()[0][0], 0, 0) == []  # terminal
    assert parser.buffered_bytes() == 0


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (i32(3) + b"abc", "frame of 3 bytes cannot hold a Kafka request header"),
        (i32(10) + i16(-3) + i16(0) + i32(0) + i16(-1), "not a Kafka request header (api key -3"),
        (i32(10) + i16(3) + i16(99) + i32(0) + i16(-1), "not a Kafka request header"),
        (i32(12) + i16(3) + i16(1) + i32(0) + i16(9) + b"ab", "client id of 9 bytes"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a Kafka request header"),
    ],
)
def test_headers_that_are_not_kafka(data: bytes, reason: str) -> None:
    parser = KafkaWireParser()
    parser.feed(REQUEST, data, 0, 0)
    assert parser.error.startswith(reason)


def test_an_oversized_frame_is_stepped_over_and_still_a_span() -> None:
    parser = KafkaWireParser()
    size = kafka_wire.MAX_FRAME_BYTES + 10
    head = i32(size) + i16(PRODUCE) + i16(9) + i32(1) + string("p", False)
    parser.feed(REQUEST, head, 0, 0)
    chunk = bytes(1 << 20)
    left = size - (len(head) - 4)
    while left:
        parser.feed(REQUEST, chunk[: min(left, len(chunk))], 0, 0)
        left -= min(left, len(chunk))
        assert parser.buffered_bytes() <= BUFFER_LIMIT
    assert parser.counters == {kafka_wire.OVERSIZED_FRAMES: 1}
    (span,) = parser.feed(RESPONSE, response(1, produce_response(9, []), True), 0, 0)
    assert (span.name, span.status, span.request_bytes) == ("send", "ok", size + 4)
    assert run(one_by_one(), parser)[-1].name == "send logs"  # the framing held


def test_a_body_that_does_not_decode_is_stepped_over() -> None:
    bad = request(PRODUCE, 9, 1, "p", uvarint(0) + i16(1) + i32(0) + uvarint(1 << 20) + b"zz")
    parser = KafkaWireParser()
    spans = run([(REQUEST, bad), (RESPONSE, response(1, produce_response(9, []), True))], parser)
    assert [(s.name, s.status) for s in spans] == [("send", "ok")]
    assert parser.counters == {kafka_wire.MALFORMED_BODIES: 1}
    assert len(run(one_by_one(), parser)) == 7  # the connection reads on


def test_a_body_shorter_than_its_frame_counts_the_tail() -> None:
    req = request(METADATA, 1, 1, "c", metadata_request(1, ["t"]) + b"extra")
    parser = KafkaWireParser()
    run([(REQUEST, req)], parser)
    assert parser.counters == {kafka_wire.UNREAD_TAILS: 1}


def test_responses_nobody_asked_for() -> None:
    parser = KafkaWireParser()
    assert run([(RESPONSE, response(77, b"x" * 10, False))], parser) == []
    assert parser.counters == {kafka_wire.UNMATCHED_RESPONSES: 1}
    parser.feed(RESPONSE, i32(kafka_wire.MAX_FRAME_BYTES + 1) + i32(5), 0, 0)
    assert parser.error.startswith("response of")


def test_a_lying_partition_count_is_refused_at_once() -> None:
    body = i32(0) + i32(0) + i32(1) + i16(0) + string("t", False) + i32(0x7FFFFFF0)
    req = request(METADATA, 1, 1, "c", metadata_request(1, ["t"]))
    parser = KafkaWireParser()
    (span,) = run([(REQUEST, req), (RESPONSE, response(1, body, False))], parser)
    assert span.status == "ok"
    assert parser.counters == {kafka_wire.MALFORMED_BODIES: 1}


def test_a_large_metadata_response_decodes_within_the_limits() -> None:
    parts = [(0, p) for p in range(5000)]
    req = request(METADATA, 12, 1, "c", metadata_request(12, ["big"]))
    resp = response(1, metadata_response(12, [(0, "big", ORDERS_ID, parts)]), True)
    parser = KafkaWireParser()
    (span,) = run(
        [(REQUEST, req), *((RESPONSE, resp[i : i + 1000]) for i in range(0, len(resp), 1000))],
        parser,
    )
    assert span.status == "ok" and parser.counters == {}


def test_pending_requests_are_capped() -> None:
    parser = KafkaWireParser()
    extra = 5
    wire = [
        (REQUEST, request(METADATA, 1, c, "c", metadata_request(1, ["t"])))
        for c in range(kafka_wire.MAX_PENDING + extra)
    ]
    spans = run(wire, parser)
    assert [s.status for s in spans] == ["incomplete"] * extra
    assert parser.pending_requests() == kafka_wire.MAX_PENDING
    assert parser.counters == {kafka_wire.EVICTED_REQUESTS: extra}


def test_a_reused_correlation_id_ends_the_older_request() -> None:
    req = request(METADATA, 1, 4, "c", metadata_request(1, ["t"]))
    parser = KafkaWireParser()
    (old,) = run([(REQUEST, req), (REQUEST, req)], parser)
    assert old.status == "incomplete" and parser.pending_requests() == 1


def test_legacy_sasl_stops_after_the_handshake() -> None:
    handshake = request(SASL_HANDSHAKE, 0, 1, "c", string("PLAIN", False))
    parser = KafkaWireParser()
    (span,) = run([(REQUEST, handshake), (RESPONSE, response(1, i16(0) + i32(0), False))], parser)
    assert span.name == "sasl_handshake"
    assert parser.error == "SaslHandshake v0: raw SASL tokens follow, not Kafka framing"


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.tuples(st.booleans(), st.binary(max_size=600)), max_size=12),
    prefix=st.booleans(),
)
def test_garbage_never_raises_and_never_grows(
    chunks: list[tuple[bool, bytes]], prefix: bool
) -> None:
    parser = KafkaWireParser()
    if prefix:  # garbage after a valid start: requests waiting, a frame half read
        run(pipelined()[:1], parser)
    for is_request, data in chunks:
        parser.feed(REQUEST if is_request else RESPONSE, data, 0, 0)
        assert parser.buffered_bytes() <= BUFFER_LIMIT
        assert parser.pending_requests() <= kafka_wire.MAX_PENDING
    for span in parser.close(1):
        assert span.status == "incomplete"


@settings(max_examples=200, deadline=None)
@given(index=st.integers(0, 10_000), byte=st.integers(0, 255), pipeline=st.booleans())
def test_one_corrupted_byte_never_raises(index: int, byte: int, pipeline: bool) -> None:
    wire = pipelined() if pipeline else one_by_one()
    side, data = wire[index % len(wire)]
    at = index % len(data)
    wire[index % len(wire)] = (side, data[:at] + bytes([byte]) + data[at + 1 :])
    parser = KafkaWireParser()
    run(wire, parser)
    parser.close(0)


# --- close ---------------------------------------------------------------------------------


def test_close_gives_what_is_still_waiting_as_incomplete() -> None:
    (req1, _), (req2, resp2), (req3, _) = answered(1), answered(2), answered(3)
    parser = KafkaWireParser()
    parser.feed(REQUEST, req1 + req2, 10, 20)
    parser.feed(RESPONSE, resp2[:10], 30, 40)  # the response begins, then the connection ends
    parser.feed(REQUEST, req3[:40], 50, 60)  # a request cut short after its header
    spans = parser.close(1000)
    assert [(s.name, s.status, s.end_ns) for s in spans] == [
        ("metadata orders", "incomplete", 1000),
        ("send orders", "incomplete", 1000),
        ("send", "incomplete", 1000),
    ]
    assert all(s.error_type == "" for s in spans)
    assert parser.close(2000) == []


# --- recognise ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first",
    [
        api_versions_request(0),
        request(API_VERSIONS, 0, 0, "sarama", b""),
        request(METADATA, 1, 1, "kafka-python", metadata_request(1, ["t"])),
        request(METADATA, 12, 1, "producer-1", metadata_request(12, ["t"])),
        request(PRODUCE, 3, 1, "p", produce_request(3, [("t", [(0, batch(1))])])),
        request(PRODUCE, 9, 1, "p", produce_request(9, [("t", [(0, batch(1))])])),
        request(FETCH, 4, 1, "c", fetch_request(4, [("t", [0])])),
        request(FETCH, 13, 1, "c", fetch_request(13, [(ORDERS_ID, [0])])),
        request(SASL_HANDSHAKE, 1, 0, "c", string("SCRAM-SHA-512", False)),
        api_versions_request(0)[:16],  # the start of one: the header is enough
    ],
)
def test_recognise_first_requests(first: bytes) -> None:
    assert recognise(first)


# librdkafka 2.16's Metadata v13 for all topics, as it sent it: the compact null array is
# written in a 4-byte slot, so three stray bytes follow the body. Recognised, read, counted.
LIBRDKAFKA_ALL_TOPICS = bytes.fromhex(
    "0000001d0003000d00000004000b7a742d70726f64756365720000000000010000"
)


def test_librdkafka_all_topics_metadata() -> None:
    assert recognise(LIBRDKAFKA_ALL_TOPICS)
    parser = KafkaWireParser()
    parser.feed(REQUEST, LIBRDKAFKA_ALL_TOPICS, 0, 0)
    (span,) = parser.feed(RESPONSE, response(4, metadata_response(13, []), True), 0, 0)
    assert (span.name, span.status) == ("metadata", "ok")
    assert span.attributes[names.ATTR_MESSAGING_CLIENT_ID] == "zt-producer"
    assert parser.counters == {kafka_wire.UNREAD_TAILS: 1}


POSTGRES_STARTUP = i32(41) + i32(196608) + b"user\x00postgres\x00database\x00app\x00\x00"


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"GET / HTTP/1.1\r\n",
        b"\x16\x03\x01",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40),  # a TLS ClientHello
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"*1\r\n$4\r\nPING\r\n",  # Redis
        POSTGRES_STARTUP,
        i32(8) + i32(80877103),  # PostgreSQL SSLRequest
        b"\x00\x1d\xab\xcd\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01",
        b"\x00\x1d\xab\xcd\x01\x20\x00\x01\x00\x00\x00\x00\x00\x01\x07example\x03com\x00\x00\x01\x00\x01",
        b"SSH-2.0-OpenSSH_9.6\r\n",
        api_versions_request(0)[:13],  # too little to judge
        request(PRODUCE, 3, 1, "p", produce_request(3, [("t", [(0, None)])], acks=5)),
    ],
)
def test_recognise_refuses_other_protocols(first: bytes) -> None:
    assert not recognise(first)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_recognise_never_raises(data: bytes) -> None:
    recognise(data)
