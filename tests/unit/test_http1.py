from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator.http1 import (
    MAX_CHUNK_LINE_BYTES,
    MAX_HEADER_BYTES,
    BodyGap,
    BodyPiece,
    Event,
    Http1Parser,
    MessageEnd,
    MessageHead,
    Verdict,
    sniff,
)

CHUNKED_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
    b"5;name=value\r\nhello\r\n"
    b"1\r\n \r\n"
    b"A\r\n0123456789\r\n"
    b"0\r\nX-Checksum: abc\r\n\r\n"
)
CHUNKED_BODY = b"hello 0123456789"


def body(events: list[Event]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, BodyPiece))


def kinds(events: list[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_request_with_content_length_and_case_insensitive_headers() -> None:
    parser = Http1Parser(is_request=True)
    events = parser.feed(b"POST /v1/x?q=1 HTTP/1.1\r\nCONTENT-length: 4\r\nX-A:  b \r\n\r\n", 100)
    events += parser.feed(b"abcd", 200)
    head, piece, end = events
    assert isinstance(head, MessageHead) and isinstance(end, MessageEnd)
    assert (head.method, head.target, head.version) == ("POST", "/v1/x?q=1", "1.1")
    assert head.header("content-length") == "4" and head.header("x-a") == "b"
    assert (head.start_ns, head.end_ns) == (100, 100)
    assert piece == BodyPiece(b"abcd", 200)
    assert end == MessageEnd(200, complete=True)
    assert not parser.in_message and parser.error is None


def test_pipelined_requests_in_one_read_and_keep_alive() -> None:
    parser = Http1Parser(is_request=True)
    wire = (
        b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
        b"POST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"
        b"\r\nGET /c HTTP/1.0\r\n\r\n"  # a stray CRLF between messages is tolerated
    )
    events = parser.feed(wire, 7)
    heads = [e for e in events if isinstance(e, MessageHead)]
    assert [h.target for h in heads] == ["/a", "/b", "/c"]
    assert heads[2].version == "1.0"
    assert kinds(events).count("MessageEnd") == 3
    assert body(events) == b"hi"


def test_responses_follow_their_requests_methods_fifo() -> None:
    parser = Http1Parser(is_request=False)
    for method in ("HEAD", "GET", "GET", "GET", "POST"):
        parser.expect_response_to(method)
    wire = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"  # HEAD: no body despite the length
        b"HTTP/1.1 204 No Content\r\n\r\n"
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
        b"HTTP/1.1 100 Continue\r\n\r\n"  # interim: answers nothing
        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    )
    events = parser.feed(wire, 1)
    statuses = [e.status for e in events if isinstance(e, MessageHead)]
    assert statuses == [200, 204, 304, 200, 100, 201]
    assert kinds(events).count("MessageEnd") == 6
    assert body(events) == b"abcok"
    assert parser.error is None


def test_chunked_with_extensions_and_trailers() -> None:
    parser = Http1Parser(is_request=False)
    events = parser.feed(CHUNKED_RESPONSE + b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz", 5)
    assert body(events) == CHUNKED_BODY + b"z"
    assert kinds(events).count("MessageEnd") == 2
    assert parser.error is None


def test_chunked_split_at_every_offset_gives_the_same_events() -> None:
    for cut in range(1, len(CHUNKED_RESPONSE)):
        parser = Http1Parser(is_request=False)
        events = parser.feed(CHUNKED_RESPONSE[:cut], 1) + parser.feed(CHUNKED_RESPONSE[cut:], 2)
        assert body(events) == CHUNKED_BODY, cut
        head = events[0]
        assert isinstance(head, MessageHead) and head.start_ns == 1
        assert events[-1] == MessageEnd(2, complete=True), cut
        assert parser.buffered_bytes() == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=8),
    st.lists(st.integers(1, 400), max_size=20),
)
def test_any_split_into_reads_gives_the_same_message_and_times(
    chunks: list[bytes], cuts: list[int]
) -> None:
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    wire += b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    bounds = sorted({0, len(wire), *(c for c in cuts if c < len(wire))})
    parser = Http1Parser(is_request=False)
    events: list[Event] = []
    # A byte's time is 10 * its offset; a read is timed by its last byte (when it returned).
    for a, b in pairwise(bounds):
        new = parser.feed(wire[a:b], 10 * (b - 1))
        # Every piece and end is timed by the read that carried it.
        assert all(e.time_ns == 10 * (b - 1) for e in new if isinstance(e, BodyPiece | MessageEnd))
        events += new
    assert body(events) == b"".join(chunks)
    head, end = events[0], events[-1]
    first_read_end = bounds[1] - 1
    head_end = wire.index(b"\r\n\r\n") + 3
    head_read_end = min(b for b in bounds if b > head_end) - 1
    assert isinstance(head, MessageHead)
    assert (head.start_ns, head.end_ns) == (10 * first_read_end, 10 * head_read_end)
    assert end == MessageEnd(10 * (len(wire) - 1), complete=True)
    assert parser.buffered_bytes() == 0


def test_body_until_close_ends_complete_at_its_last_byte() -> None:
    parser = Http1Parser(is_request=False)
    events = parser.feed(b"HTTP/1.0 200 OK\r\n\r\npart one,", 10)
    events += parser.feed(b" part two", 20)
    events += parser.close()
    assert body(events) == b"part one, part two"
    assert events[-1] == MessageEnd(20, complete=True)


def test_close_mid_message_is_incomplete_with_the_reason() -> None:
    parser = Http1Parser(is_request=False)
    events = parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 10)
    events += parser.close("idle timeout")
    assert events[-1] == MessageEnd(10, complete=False, reason="idle timeout")


@pytest.mark.parametrize(
    ("is_request", "wire", "reason"),
    [
        (True, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "not an HTTP request"),
        (True, b"*1\r\n$4\r\nPING\r\n", "not an HTTP request"),
        (True, b"PING\r\n\r\n", "malformed request line"),
        (True, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "not HTTP/1.x (HTTP/2.0)"),
        (False, b"\x17\x03\x03\x00\x45garbage", "not an HTTP response"),
        (False, b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "invalid content-length"),
        (False, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", None),
        (False, b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n", "malformed header line"),
        (False, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", None),
        (False, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab", None),
    ],
)
def test_garbage_is_an_error_state_not_an_exception(
    is_request: bool, wire: bytes, reason: str | None
) -> None:
    parser = Http1Parser(is_request)
    parser.feed(wire, 1)
    assert parser.error is not None
    if reason is not None:
        assert parser.error == reason
    assert parser.feed(b"GET / HTTP/1.1\r\n\r\n", 2) == []  # terminal: nothing more comes out
    assert parser.buffered_bytes() == 0


def test_garbage_mid_body_ends_the_message_incomplete() -> None:
    parser = Http1Parser(is_request=False)
    events = parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY", 3)
    assert events[-1] == MessageEnd(3, complete=False, reason="chunk data not followed by CRLF")


def test_header_and_line_limits_bound_the_buffer() -> None:
    parser = Http1Parser(is_request=True)
    parser.feed(b"GET / HTTP/1.1\r\n", 1)
    for i in range(100):
        parser.feed(b"X-Filler: " + b"a" * 1000 + b"\r\n", i)
        assert parser.buffered_bytes() <= MAX_HEADER_BYTES
    assert parser.error == "header section too large"

    parser = Http1Parser(is_request=True)
    parser.feed(b"GET /" + b"a" * 9000, 1)
    assert parser.error == "start line too long"

    parser = Http1Parser(is_request=False)
    parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + b"e" * 5000, 1)
    assert parser.error == "chunk-size line too long"
    assert MAX_CHUNK_LINE_BYTES < 5000


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans())
def test_random_bytes_never_raise(wire: bytes, is_request: bool) -> None:
    parser = Http1Parser(is_request)
    parser.feed(wire, 1)
    parser.skip(3, 2)
    parser.close()
    assert parser.buffered_bytes() <= MAX_HEADER_BYTES


def test_gap_inside_a_known_body_keeps_framing() -> None:
    parser = Http1Parser(is_request=False)
    events = parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 1)
    events += parser.skip(5, 1)
    events += parser.feed(b"de", 2)
    events += parser.feed(b"HTTP/1.1 204 No Content\r\n\r\n", 3)
    assert BodyGap(5, 1) in events
    assert kinds(events).count("MessageEnd") == 2 and parser.error is None

    parser = Http1Parser(is_request=False)
    parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nab", 1)
    assert parser.skip(14, 1) == [BodyGap(14, 1)]
    events = parser.feed(b"\r\n0\r\n\r\n", 2)
    assert events == [MessageEnd(2, complete=True)]


def test_gap_across_framing_loses_sync() -> None:
    parser = Http1Parser(is_request=False)
    parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nab", 1)
    events = parser.skip(100, 5)
    assert events == [MessageEnd(5, complete=False, reason="capture truncated")]
    assert parser.error == "capture truncated"

    parser = Http1Parser(is_request=True)
    parser.feed(b"GET / HT", 1)
    parser.skip(10, 1)
    assert parser.error == "capture truncated"


def test_switching_protocols_and_connect_leave_http() -> None:
    parser = Http1Parser(is_request=False)
    parser.expect_response_to("GET")
    events = parser.feed(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05", 1
    )
    assert kinds(events) == ["MessageHead", "MessageEnd"] and parser.upgraded

    parser = Http1Parser(is_request=False)
    parser.expect_response_to("CONNECT")
    parser.feed(b"HTTP/1.1 200 Connection established\r\n\r\n\x16\x03\x01", 1)
    assert parser.upgraded and parser.error is None


@pytest.mark.parametrize(
    ("payload", "verdict"),
    [
        (b"POST /v1/chat/completions HTTP/1.1\r\n", Verdict.REQUEST),
        (b"GET", Verdict.REQUEST),
        (b"POST ", Verdict.REQUEST),
        (b"M-SEARCH * HTTP/1.1", Verdict.REQUEST),
        (b"HTTP/1.1 200 OK\r\n", Verdict.RESPONSE),
        (b"", Verdict.UNKNOWN),
        (b"\x16\x03\x01\x00", Verdict.TLS),  # a ClientHello
        (b"\x17\x03\x03\x00\x20", Verdict.TLS),  # application data
        (b"\x16\x02\x01", Verdict.OTHER),  # not a TLS version
        (b"\x18\x03\x01", Verdict.OTHER),
        (b"*3\r\n$3\r\nSET\r\n", Verdict.OTHER),
        (b"PING\r\n", Verdict.OTHER),
        (b"get / HTTP/1.1", Verdict.OTHER),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Verdict.OTHER),  # handed to http2.py
        (b":1000\r\n", Verdict.OTHER),  # a Redis integer reply
        # The rest of a message: joined mid-exchange (a replay from a held offset).
        (b"1a\r\ndata: {}\r\n", Verdict.BODY),
        (b"0\r\n\r\n", Verdict.BODY),
        (b"data: [DONE]\n\n", Verdict.BODY),
        (b'{"model": "m"}', Verdict.BODY),
    ],
)
def test_sniff(payload: bytes, verdict: Verdict) -> None:
    assert sniff(payload) is verdict
