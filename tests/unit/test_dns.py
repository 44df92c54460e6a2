"""dns.py: DNS spans of a UDP flow or a TCP connection, driven through the ProtocolParser
contract (protocol_span.py). The wire bytes come from test_dns_wire.py's builders, which lay
messages out as RFC 1035 section 4 does."""

from __future__ import annotations

import random
import struct
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_dns_wire import (
    AAAA,
    CNAME,
    HTTPS,
    PTR,
    SRV,
    TO_QUESTION,
    TXT,
    A,
    a_record,
    header,
    name,
    opt,
    query,
    response,
    rr,
    tcp,
)
from zerotrace import names
from zerotrace_correlator import dns_wire
from zerotrace_correlator.dns import (
    CAPPED_ANSWER_LISTS,
    CUT_MESSAGES,
    EVICTED_QUERIES,
    MALFORMED_RECORDS,
    MAX_MESSAGE_BYTES,
    MAX_PENDING_QUERIES,
    MISDIRECTED_MESSAGES,
    RETRANSMITTED_QUERIES,
    UNMATCHED_RESPONSES,
    DnsParser,
    Transport,
    recognise,
    transport_of,
)
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtocolParser, ProtoSpan

pytestmark = pytest.mark.unit

NOTIFY, UPDATE = 4, 5
NXDOMAIN, SERVFAIL, REFUSED, FORMERR = 3, 2, 5, 1
# Bound on what a parser may hold for partial TCP messages: both directions' length and kept
# bytes.
BUFFER_BOUND = 2 * (2 + MAX_MESSAGE_BYTES)


def exchange(transport: Transport, q: bytes, r: bytes) -> list[ProtoSpan]:
    """One query at 100-110 ns and its response at 200-250 ns."""
    parser = DnsParser(transport)
    wrap = tcp if transport == "tcp" else bytes
    spans = parser.feed(REQUEST, wrap(q), 100, 110)
    spans += parser.feed(RESPONSE, wrap(r), 200, 250)
    assert parser.error == "" and parser.pending_queries() == 0
    return spans


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_without_a_transport_the_first_query_tells_it(transport: Transport) -> None:
    """The correlator hands a flow over without knowing UDP from TCP (protocols.py): a query
    alone is a datagram, one behind its length is TCP; the spans are those of a parser told."""
    q = query(0x1234, "example.com", A)
    r = response(0x1234, "example.com", A, [a_record("192.0.2.1")])
    wrap = tcp if transport == "tcp" else bytes
    assert transport_of(wrap(q)) == transport
    told = DnsParser()
    spans = told.feed(REQUEST, wrap(q), 100, 110) + told.feed(RESPONSE, wrap(r), 200, 250)
    assert told.transport == transport
    assert spans == exchange(transport, q, r)


@given(st.integers(0, 0xFFFF), st.booleans())
def test_a_tcp_query_never_reads_as_a_datagram(qid: int, rd: bool) -> None:
    q = query(qid, "example.com", AAAA)
    q = q[:2] + bytes([q[2] | 0x01 if rd else q[2] & ~0x01]) + q[3:]
    assert transport_of(q) == "udp"
    assert transport_of(tcp(q)) == "tcp"
    assert transport_of(tcp(q)[:2]) == "tcp"  # the length came alone


def test_the_parser_keeps_the_protocol_parser_contract() -> None:
    parser: ProtocolParser = DnsParser("udp")
    assert parser.protocol == names.PROTOCOL_DNS == "dns"


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_an_a_lookup_is_one_span_with_its_answers(transport: Transport) -> None:
    q = query(0x1234, "example.com", A, edns=True)
    r = response(0x1234, "example.com", A, [a_record("192.0.2.1"), a_record("192.0.2.2")])
    prefix = 2 if transport == "tcp" else 0
    assert exchange(transport, q, r) == [
        ProtoSpan(
            protocol="dns",
            name="A example.com",
            start_ns=100,
            end_ns=250,
            status="ok",
            attributes={
                "network.transport": transport,
                "dns.question.name": "example.com",
                "zerotrace.dns.question.type": "A",
                "zerotrace.dns.response_code": "NOERROR",
                "zerotrace.dns.answer_count": 2,
                "zerotrace.dns.truncated": False,
                "dns.answers": "192.0.2.1,192.0.2.2",
            },
            request_bytes=len(q) + prefix,
            response_bytes=len(r) + prefix,
        )
    ]


@pytest.mark.parametrize(
    ("qtype", "qname", "answers", "type_name", "listed"),
    [
        (AAAA, "v6.example", [rr(TO_QUESTION, AAAA, bytes(15) + b"\1")], "AAAA", "::1"),
        (
            CNAME,
            "www.example",
            [rr(TO_QUESTION, CNAME, b"\3cdn\3net\0")],
            "CNAME",
            "cdn.net",
        ),
        (
            A,
            "alias.example",
            [
                rr(TO_QUESTION, CNAME, b"\4real" + TO_QUESTION),
                a_record("198.51.100.7", b"\xc0\x2b"),
            ],
            "A",
            "real.alias.example,198.51.100.7",
        ),
        (PTR, "1.2.0.192.in-addr.arpa", [rr(TO_QUESTION, PTR, name("host.example"))], "PTR", ""),
        (
            SRV,
            "_grpc._tcp.svc.cluster.local",
            [rr(TO_QUESTION, SRV, struct.pack("!HHH", 0, 5, 50051) + name("pod.local"))],
            "SRV",
            "",
        ),
        (TXT, "example.com", [rr(TO_QUESTION, TXT, b"\x0bv=spf1 -all")], "TXT", ""),
        (HTTPS, "example.com", [rr(TO_QUESTION, HTTPS, b"\0\1\0")], "HTTPS", ""),
        (65280, "private.example", [], "TYPE65280", ""),
    ],
)
def test_every_question_type_is_named_and_its_answers_counted(
    qtype: int, qname: str, answers: list[bytes], type_name: str, listed: str
) -> None:
    (span,) = exchange("udp", query(7, qname, qtype), response(7, qname, qtype, answers))
    assert span.name == f"{type_name} {qname}" and span.status == "ok"
    assert span.attributes["zerotrace.dns.question.type"] == type_name
    assert span.attributes["zerotrace.dns.answer_count"] == len(answers)
    assert span.attributes.get("dns.answers", "") == listed


def test_the_cname_pointer_in_the_parametrized_case_points_at_the_cname_target() -> None:
    # The A record's owner above is a pointer to offset 0x2b: the CNAME's rdata, "real...".
    wire = response(7, "alias.example", A, [rr(TO_QUESTION, CNAME, b"\4real" + TO_QUESTION)])
    assert wire[0x2B : 0x2B + 5] == b"\4real"


@pytest.mark.parametrize(
    ("rcode", "error_type"),
    [(NXDOMAIN, "NXDOMAIN"), (SERVFAIL, "SERVFAIL"), (REFUSED, "REFUSED"), (12, "RCODE12")],
)
@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_an_error_response_gives_an_error_span(
    transport: Transport, rcode: int, error_type: str
) -> None:
    (span,) = exchange(
        transport, query(9, "nope.example"), response(9, "nope.example", rcode=rcode)
    )
    assert (span.status, span.error_type) == ("error", error_type)
    assert span.attributes["zerotrace.dns.response_code"] == error_type


def test_an_extended_response_code_from_edns_is_the_error() -> None:
    r = response(9, "a.example", additional=[opt(ext_rcode=1)])  # BADVERS: 16
    (span,) = exchange("udp", query(9, "a.example", edns=True), r)
    assert (span.status, span.error_type) == ("error", "BADVERS")


def test_a_truncated_udp_answer_is_flagged() -> None:
    (span,) = exchange(
        "udp", query(3, "big.example", TXT), response(3, "big.example", TXT, tc=True)
    )
    assert span.attributes["zerotrace.dns.truncated"] is True and span.status == "ok"


def test_a_response_without_its_question_pairs_by_id() -> None:
    (span,) = exchange("udp", query(4, "odd.example"), response(4, None, rcode=FORMERR))
    assert (span.name, span.error_type) == ("A odd.example", "FORMERR")


def test_notify_and_update_are_named_by_their_opcode() -> None:
    for opcode, label in ((NOTIFY, "NOTIFY"), (UPDATE, "UPDATE")):
        q = query(5, "zone.example", 6, opcode=opcode)
        (span,) = exchange("udp", q, response(5, "zone.example", 6, opcode=opcode))
        assert span.name == f"{label} zone.example"


def test_queries_in_flight_on_one_udp_flow_pair_by_id_and_question() -> None:
    parser = DnsParser("udp")
    # A stub asks A and AAAA at once; a resolver may even reuse the id (musl does).
    assert parser.feed(REQUEST, query(1, "a.example", A), 10, 11) == []
    assert parser.feed(REQUEST, query(1, "a.example", AAAA), 12, 13) == []
    assert parser.feed(REQUEST, query(2, "b.example", A), 14, 15) == []
    # Answered out of order, the question echoed in another case (DNS 0x20).
    spans = parser.feed(RESPONSE, response(2, "B.EXAMPLE", A), 20, 21)
    spans += parser.feed(RESPONSE, response(1, "a.example", AAAA), 22, 23)
    spans += parser.feed(RESPONSE, response(1, "a.example", A), 24, 25)
    assert [(s.name, s.start_ns, s.end_ns) for s in spans] == [
        ("A b.example", 14, 21),
        ("AAAA a.example", 12, 23),
        ("A a.example", 10, 25),
    ]
    assert parser.counters == {}


def test_a_retry_keeps_the_first_send_as_the_start() -> None:
    parser = DnsParser("udp")
    parser.feed(REQUEST, query(8, "slow.example"), 10, 11)
    parser.feed(REQUEST, query(8, "slow.example"), 5_000, 5_001)
    (span,) = parser.feed(RESPONSE, response(8, "slow.example"), 6_000, 6_001)
    assert (span.start_ns, span.end_ns) == (10, 6_001)
    assert parser.counters == {RETRANSMITTED_QUERIES: 1}
    assert parser.close(7_000) == []


def test_responses_nobody_waits_for_and_messages_on_the_wrong_side_are_counted() -> None:
    parser = DnsParser("udp")
    assert parser.feed(RESPONSE, response(1, "late.example"), 1, 2) == []
    assert parser.feed(REQUEST, response(2, "x.example"), 3, 4) == []
    assert parser.feed(RESPONSE, query(3, "x.example"), 5, 6) == []
    parser.feed(REQUEST, query(4, "q.example"), 7, 8)
    assert parser.feed(RESPONSE, response(4, "other.example"), 9, 10) == []  # a spoof
    assert parser.counters == {UNMATCHED_RESPONSES: 2, MISDIRECTED_MESSAGES: 2}
    assert parser.error == "" and parser.pending_queries() == 1


def test_close_gives_the_waiting_queries_as_incomplete() -> None:
    parser = DnsParser("tcp")
    parser.feed(REQUEST, tcp(query(1, "a.example"), query(2, "b.example", AAAA)), 10, 11)
    parser.feed(RESPONSE, tcp(response(2, "b.example", AAAA))[:5], 12, 13)  # a partial answer
    spans = parser.close(99)
    assert [(s.name, s.status, s.start_ns, s.end_ns) for s in spans] == [
        ("A a.example", "incomplete", 10, 99),
        ("AAAA b.example", "incomplete", 10, 99),
    ]
    assert spans[0].attributes == {
        "network.transport": "tcp",
        "dns.question.name": "a.example",
        "zerotrace.dns.question.type": "A",
    }
    assert parser.close(100) == [] and parser.buffered_bytes() == 0


def test_the_oldest_query_goes_out_incomplete_past_the_pending_limit() -> None:
    parser = DnsParser("udp")
    for i in range(MAX_PENDING_QUERIES):
        assert parser.feed(REQUEST, query(i, f"h{i}.example"), i, i) == []
    (evicted,) = parser.feed(REQUEST, query(60_000, "new.example"), 1_000, 1_000)
    assert (evicted.name, evicted.status, evicted.end_ns) == ("A h0.example", "incomplete", 1_000)
    assert parser.pending_queries() == MAX_PENDING_QUERIES
    assert parser.counters == {EVICTED_QUERIES: 1}
    assert parser.feed(RESPONSE, response(0, "h0.example"), 2_000, 2_000) == []


_LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=20)
_EXCHANGE = st.tuples(
    st.lists(_LABEL, min_size=1, max_size=4).map(".".join),
    st.sampled_from([A, AAAA, CNAME, TXT, HTTPS, 65280]),
    st.sampled_from([0, 0, NXDOMAIN, SERVFAIL, REFUSED]),
    st.lists(st.integers(0, 2**32 - 1), max_size=20),  # A records' addresses
    st.booleans(),  # the response echoes the name upper-cased
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_EXCHANGE, min_size=1, max_size=6),
    st.randoms(use_true_random=False),
    st.sampled_from(["udp", "tcp"]),
    st.lists(st.integers(0, 5_000), max_size=10),
)
def test_generated_exchanges_come_out_as_they_were_built(
    exchanges: list[tuple[str, int, int, list[int], bool]],
    rng: random.Random,
    transport: Transport,
    cuts: list[int],
) -> None:
    queries = [query(i, qname, qtype) for i, (qname, qtype, *_) in enumerate(exchanges)]
    order = rng.sample(range(len(exchanges)), len(exchanges))  # answered in any order
    responses, expected = [], []
    for i in order:
        qname, qtype, rcode, addresses, shout = exchanges[i]
        answers = [rr(TO_QUESTION, A, struct.pack("!I", a)) for a in addresses]
        echoed = qname.upper() if shout else qname
        responses.append(response(i, echoed, qtype, answers, rcode=rcode))
        listed = ",".join(".".join(map(str, struct.pack("!I", a))) for a in addresses[:16])
        expected.append(
            (f"{dns_wire.type_name(qtype)} {qname}", "ok" if rcode == 0 else "error",
             len(addresses), listed)
        )  # fmt: skip
    parser = DnsParser(transport)
    spans: list[ProtoSpan] = []
    if transport == "udp":
        for q in queries:
            spans += parser.feed(REQUEST, q, 1, 2)
        for r in responses:
            spans += parser.feed(RESPONSE, r, 3, 4)
    else:
        for side, wire in ((REQUEST, tcp(*queries)), (RESPONSE, tcp(*responses))):
            bounds = sorted({0, len(wire), *(c % len(wire) for c in cuts)})
            for a, b in pairwise(bounds):
                spans += parser.feed(side, wire[a:b], 1, 2)
    got = [
        (s.name, s.status, s.attributes["zerotrace.dns.answer_count"],
         s.attributes.get("dns.answers", ""))
        for s in spans
    ]  # fmt: skip
    assert got == expected
    assert parser.error == "" and parser.pending_queries() == 0


# --- TCP framing ---------------------------------------------------------------------------

PIPELINE_QUERIES = tcp(
    query(0x10, "a.example", A), query(0x11, "b.example", AAAA), query(0x12, "gone.example")
)
PIPELINE_RESPONSES = tcp(
    response(0x11, "b.example", AAAA, [rr(TO_QUESTION, AAAA, bytes(15) + b"\2")]),
    response(0x10, "a.example", A, [a_record("192.0.2.9")]),
    response(0x12, "gone.example", rcode=NXDOMAIN),
)


def run(parser: DnsParser, request_cuts: list[int], response_cuts: list[int]) -> list[ProtoSpan]:
    """Feeds the pipelined stream cut at the given offsets, every piece at one time per side:
    spans must not depend on where the cuts fall."""
    spans: list[ProtoSpan] = []
    for wire, cuts, side, times in (
        (PIPELINE_QUERIES, request_cuts, REQUEST, (100, 110)),
        (PIPELINE_RESPONSES, response_cuts, RESPONSE, (200, 210)),
    ):
        bounds = sorted({0, len(wire), *(c % len(wire) for c in cuts)})
        for a, b in pairwise(bounds):
            spans += parser.feed(side, wire[a:b], *times)
            assert parser.buffered_bytes() <= BUFFER_BOUND
    return spans


def test_pipelined_messages_in_one_feed_each_give_a_span() -> None:
    parser = DnsParser("tcp")
    spans = run(parser, [], [])
    assert [(s.name, s.status, s.attributes.get("dns.answers")) for s in spans] == [
        ("AAAA b.example", "ok", "::2"),
        ("A a.example", "ok", "192.0.2.9"),
        ("A gone.example", "error", None),
    ]
    assert parser.counters == {} and parser.buffered_bytes() == 0


def test_a_stream_fed_byte_by_byte_gives_the_same_spans() -> None:
    whole = run(DnsParser("tcp"), [], [])
    assert run(DnsParser("tcp"), list(range(600)), list(range(600))) == whole


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10_000), max_size=12), st.lists(st.integers(0, 10_000), max_size=12))
def test_any_split_of_the_streams_gives_the_same_spans(
    request_cuts: list[int], response_cuts: list[int]
) -> None:
    assert run(DnsParser("tcp"), request_cuts, response_cuts) == run(DnsParser("tcp"), [], [])


def test_a_message_split_across_feeds_runs_from_its_first_to_its_last_byte() -> None:
    parser = DnsParser("tcp")
    q = tcp(query(1, "t.example"))
    parser.feed(REQUEST, q[:1], 10, 11)
    parser.feed(REQUEST, q[1:], 20, 21)
    r = tcp(response(1, "t.example"))
    parser.feed(RESPONSE, r[:-1], 30, 31)
    (span,) = parser.feed(RESPONSE, r[-1:], 40, 41)
    assert (span.start_ns, span.end_ns) == (10, 41)


def test_a_message_longer_than_the_limit_is_cut_and_still_read() -> None:
    parser = DnsParser("tcp")
    answers = [a_record(f"10.0.{i // 250}.{i % 250}") for i in range(2_000)]  # 32 KiB
    r = tcp(response(6, "many.example", A, answers))
    assert len(r) > 4 * MAX_MESSAGE_BYTES
    parser.feed(REQUEST, tcp(query(6, "many.example")), 1, 2)
    spans: list[ProtoSpan] = []
    for at in range(0, len(r), 1_000):
        spans += parser.feed(RESPONSE, r[at : at + 1_000], 3, 4)
        assert parser.buffered_bytes() <= BUFFER_BOUND
    (span,) = spans
    assert span.attributes["zerotrace.dns.answer_count"] == 2_000
    assert span.response_bytes == len(r)
    assert parser.counters == {CUT_MESSAGES: 1, CAPPED_ANSWER_LISTS: 1}
    # The connection reads on after the cut message.
    parser.feed(REQUEST, tcp(query(7, "next.example")), 5, 6)
    assert [s.name for s in parser.feed(RESPONSE, tcp(response(7, "next.example")), 7, 8)] == [
        "A next.example"
    ]


def test_a_udp_datagram_longer_than_the_limit_is_read_from_its_start() -> None:
    answers = [a_record("10.0.0.1")] * 600
    (span,) = exchange("udp", query(6, "u.example"), response(6, "u.example", A, answers))
    assert span.attributes["zerotrace.dns.answer_count"] == 600


def test_a_record_that_does_not_read_keeps_the_span_and_is_counted() -> None:
    parser = DnsParser("udp")
    parser.feed(REQUEST, query(2, "x.example"), 1, 2)
    broken = response(2, "x.example", A, [a_record("192.0.2.1"), a_record("192.0.2.2")])[:-3]
    (span,) = parser.feed(RESPONSE, broken, 3, 4)
    assert span.attributes["dns.answers"] == "192.0.2.1"
    assert parser.counters == {MALFORMED_RECORDS: 1}


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transport", "wire", "reason"),
    [
        ("tcp", b"\0\5hello", "message shorter than a DNS header (5 bytes)"),
        ("tcp", tcp(b"GET / HTTP/1.1\r\n\r\n"), "malformed question: name runs past"),
        ("udp", b"\x16\x03\x01\x02\x00\x01", "message shorter than a DNS header (6 bytes)"),
        ("udp", header(1, 0) + b"\1a\xc0\x0c", "compression pointer not to an earlier name"),
        ("udp", header(1, 0, qd=0xFFFF) + b"\0\0\1\0\1", "malformed question"),
        ("tcp", tcp(header(1, 0) + b"\x3f" + b"a" * 300), "reserved label type"),
    ],
)
def test_bytes_that_are_not_dns_stop_the_parser_with_a_reason(
    transport: Transport, wire: bytes, reason: str
) -> None:
    parser = DnsParser(transport)
    wrap = tcp if transport == "tcp" else bytes
    parser.feed(REQUEST, wrap(query(1, "before.example")), 1, 2)
    assert parser.feed(REQUEST, wire, 3, 4) == []
    assert reason in parser.error and "\n" not in parser.error
    # Terminal: the answer to the query before the garbage gives nothing any more.
    assert parser.feed(RESPONSE, wrap(response(1, "before.example")), 5, 6) == []
    assert parser.buffered_bytes() == 0
    # What was asked before the garbage still comes out at the close.
    assert [s.status for s in parser.close(9)] == ["incomplete"]


def test_a_huge_declared_length_holds_only_the_limit() -> None:
    parser = DnsParser("tcp")
    parser.feed(REQUEST, b"\xff\xff" + query(1, "a.example"), 1, 2)
    for _ in range(70):
        parser.feed(REQUEST, b"\0" * 1_000, 3, 4)
        assert parser.buffered_bytes() <= BUFFER_BOUND


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=300)), max_size=10), st.booleans())
def test_random_bytes_never_raise_and_stay_bounded(
    pieces: list[tuple[bool, bytes]], over_tcp: bool
) -> None:
    parser = DnsParser("tcp" if over_tcp else "udp")
    for t, (is_request, data) in enumerate(pieces):
        parser.feed(REQUEST if is_request else RESPONSE, data, t, t)
        assert parser.buffered_bytes() <= BUFFER_BOUND
        assert parser.pending_queries() <= MAX_PENDING_QUERIES
    parser.close(len(pieces))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 400), st.binary(min_size=1, max_size=40))
def test_a_corrupted_pipeline_never_raises(at: int, noise: bytes) -> None:
    for wire in (PIPELINE_QUERIES, PIPELINE_RESPONSES):
        corrupted = bytearray(wire)
        at %= len(corrupted)
        corrupted[at : at + len(noise)] = noise
        parser = DnsParser("tcp")
        parser.feed(REQUEST, PIPELINE_QUERIES, 1, 2)
        spans = parser.feed(RESPONSE, bytes(corrupted), 3, 4)
        spans += parser.close(5)
        assert len(spans) <= 3 + 3  # never more spans than queries, with their answers


# --- recognise -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first",
    [
        query(0xABCD, "example.com"),
        query(0, ".", 2),  # a priming query for the root's NS
        query(1, "example.com", AAAA, edns=True),
        tcp(query(2, "example.com", HTTPS, edns=True)),
        query(3, "zone.example", 6, opcode=NOTIFY),
        query(4, "zone.example", 6, opcode=UPDATE),
    ],
)
def test_recognise_knows_every_kind_of_first_query(first: bytes) -> None:
    assert recognise(first)


def test_recognise_wants_the_whole_question() -> None:
    # A query is a few dozen bytes, sent in one call: its first record holds all of it.
    whole = query(2, "example.com")
    assert recognise(whole) and not recognise(whole[:-2])
    assert recognise(tcp(whole)) and not recognise(tcp(whole)[:20])


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"GET / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"\x16\x03\x01",
        b"\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03" + bytes(32) + b"\x00\x00\x02\x13\x01",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",  # HTTP/2 preface
        b"*1\r\n$4\r\nPING\r\n",  # Redis
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f",  # PostgreSQL SSLRequest
        b"\x00\x00\x00\x29\x00\x03\x00\x00user\x00app\x00database\x00app\x00\x00",  # startup
        b"\x20\x00\x00\x01\x85\xa6\xff\x01\x00\x00\x00\x01\x21" + bytes(23) + b"root\x00",  # MySQL
        b"\x00\x00\x00\x18\x00\x12\x00\x03\x00\x00\x00\x01\x00\x07client1\x00",  # Kafka ApiVersions
        response(1, "example.com"),  # a response is not a first request
        tcp(response(1, "example.com")),
        header(1, 0x0100, qd=1, an=1) + name("x.example") + b"\0\1\0\1",  # a QUERY with answers
        header(1, 0x0100) + name("x.example") + b"\0\1\0\x09",  # no such class
    ],
)
def test_recognise_refuses_other_protocols_and_non_queries(first: bytes) -> None:
    assert not recognise(first)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=1, exclude_categories=["Cs"]), max_size=200))
def test_recognise_never_takes_text(text: str) -> None:
    # A query's question count is \0\1: a text protocol's first line never has a NUL.
    assert not recognise(text.encode())


@pytest.mark.parametrize("qid", [0x1234, 0x7B22, 0x5B00, 0x2020])  # "{", "[" and spaces first
def test_dns_over_udp_goes_through_the_correlator_whatever_its_id(qid: int) -> None:
    """One datagram per call, as the socket probe and the packet path give UDP: the flow is
    handed to DNS even when the query's random id starts like a JSON body (conversation.py),
    and the span says udp."""
    from tests.unit.http_wire import sock
    from zerotrace_correlator.http_llm_step import HttpLlmCorrelator

    correlator = HttpLlmCorrelator()
    ask = query(qid, "api.example.com", A)
    answer = response(qid, "api.example.com", A, [a_record("10.0.0.7")])
    out = correlator.feed_socket(sock("EGRESS", ask, 1_000))
    out += correlator.feed_socket(sock("INGRESS", answer, 9_000))
    [span] = [datum for record, datum in out if record == names.DERIVED_SPAN.record]
    assert (span["name"], span["kind"], span["status"]) == ("A api.example.com", "dns.client", "OK")
    assert span["attributes"][names.ATTR_NETWORK_TRANSPORT] == "udp"
