from __future__ import annotations

import json
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.http_wire import CHAT_PATH, LAST_CHUNK, SSE_HEAD, chat_delta, chunk, post, sock, sse
from zerotrace_correlator import http_counters as c
from zerotrace_correlator.conversation import (
    MAX_PENDING_REQUESTS,
    MAX_SOURCE_EVENT_IDS,
    Conversation,
    Exchange,
)
from zerotrace_correlator.http1 import MAX_HEADER_BYTES
from zerotrace_correlator.openai_stream import MAX_JSON_BODY_BYTES
from zerotrace_correlator.socket_call import call_of_record
from zerotrace_correlator.sse import MAX_EVENT_BYTES

GET = b"GET /health HTTP/1.1\r\nHost: h\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def conversation() -> tuple[Conversation, Counter[str]]:
    counters: Counter[str] = Counter()
    return Conversation("c1", counters), counters


def feed(conv: Conversation, *records: dict[str, object]) -> list[Exchange]:
    out: list[Exchange] = []
    for record in records:
        out += conv.feed(call_of_record(record))
    return out


def test_client_side_times_writes_at_start_and_reads_at_end() -> None:
    conv, _ = conversation()
    [ex] = feed(conv, sock("EGRESS", GET, 1_000), sock("INGRESS", OK, 2_000, duration=50))
    assert conv.observation_point == "CLIENT" and ex.requests_sent_locally
    assert (ex.start_ns, ex.request_end_ns) == (1_000, 1_000)
    assert ex.response is not None and ex.response.start_ns == 2_050
    assert ex.end_ns == 2_050 and ex.response_complete and ex.error is None
    assert ex.source_event_ids == ["c1/EGRESS/1000", "c1/INGRESS/2000"]


def test_server_side_reads_requests_and_writes_responses() -> None:
    conv, _ = conversation()
    [ex] = feed(conv, sock("INGRESS", GET, 1_000, duration=7), sock("EGRESS", OK, 2_000))
    assert conv.observation_point == "SERVER" and not ex.requests_sent_locally
    assert (ex.start_ns, ex.end_ns) == (1_007, 2_000)


def test_packets_are_network_observations_with_one_time() -> None:
    conv, _ = conversation()
    [ex] = feed(
        conv, sock("EGRESS", GET, 10, source="PACKET"), sock("INGRESS", OK, 20, source="PACKET")
    )
    assert conv.observation_point == "NETWORK" and (ex.start_ns, ex.end_ns) == (10, 20)


def test_keep_alive_and_pipelining_pair_fifo() -> None:
    conv, counters = conversation()
    requests = GET + b"HEAD /big HTTP/1.1\r\n\r\n" + post("/echo", b"abc")
    responses = (
        OK
        + b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n"  # HEAD: no body follows
        + b"HTTP/1.1 100 Continue\r\n\r\n"
        + b"HTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\nabc"
    )
    out = feed(conv, sock("EGRESS", requests, 1), sock("INGRESS", responses[:50], 2))
    out += feed(conv, sock("INGRESS", responses[50:], 3))
    assert [(e.index, e.request.method, e.response and e.response.status) for e in out] == [
        (0, "GET", 200),
        (1, "HEAD", 200),
        (2, "POST", 201),
    ]
    assert [e.response_body_bytes for e in out] == [2, 0, 3]
    assert counters[c.EXCHANGES] == 3 and conv.gave_up is None
    # A later request on the same connection continues the numbering.
    [later] = feed(conv, sock("EGRESS", GET, 10), sock("INGRESS", OK, 11))
    assert later.index == 3


def test_other_protocols_are_given_up_cleanly() -> None:
    conv, counters = conversation()
    memcached = sock("EGRESS", b"get session:42\r\n", 1)
    assert feed(conv, memcached, sock("INGRESS", b"END\r\n", 2)) == []
    assert conv.gave_up == "not HTTP/1.x" and conv.handover is None
    assert counters[c.CONNS_NOT_HTTP] == 1 and counters[c.RECORDS_IGNORED] == 1


def test_a_protocol_the_correlator_knows_is_handed_over() -> None:
    """Redis's first bytes: the connection goes to its parser (proto_conversation.py)."""
    conv, counters = conversation()
    assert feed(conv, sock("EGRESS", b"*1\r\n$4\r\nPING\r\n", 1)) == []
    assert conv.handover is not None and conv.handover.name == "redis"
    assert conv.gave_up == "redis connection"
    assert counters[c.CONNS_HANDED_OVER] == 1 and counters[c.CONNS_NOT_HTTP] == 0


def test_tls_records_of_syscalls_are_skipped_until_plaintext_comes() -> None:
    """Ciphertext the syscall probe saw before the TLS uprobes linked the connection: skipped
    and counted, never a verdict (the plaintext comes as TLS records of the connection)."""
    conv, counters = conversation()
    hello = sock("EGRESS", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 1)
    assert feed(conv, hello, sock("INGRESS", b"\x16\x03\x03\x00\x7a", 2)) == []
    assert conv.gave_up is None and counters[c.RECORDS_TLS_BEFORE_LINK] == 2
    [ex] = feed(conv, sock("EGRESS", GET, 3, source="TLS"), sock("INGRESS", OK, 4, source="TLS"))
    assert ex.index == 0 and conv.observation_point == "CLIENT"


def test_garbage_after_good_traffic_aborts_what_is_in_flight() -> None:
    conv, counters = conversation()
    out = feed(conv, sock("EGRESS", GET + GET, 1), sock("INGRESS", OK, 2))
    out += feed(conv, sock("INGRESS", b"\x00\x01binary", 3))
    assert [e.error for e in out] == [None, "not an HTTP response"]
    assert counters[c.PARSE_ERRORS] == 1 and counters[c.EXCHANGES_ABORTED] == 1


def test_joined_mid_connection_waits_for_a_request_line() -> None:
    conv, counters = conversation()
    assert feed(conv, sock("INGRESS", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", 1)) == []
    assert feed(conv, sock("INGRESS", b"defghi", 2)) == []  # body bytes of the unseen exchange
    [ex] = feed(conv, sock("EGRESS", GET, 3), sock("INGRESS", OK, 4))
    assert ex.index == 0 and conv.observation_point == "CLIENT"
    assert counters[c.RECORDS_BEFORE_FIRST_REQUEST] == 2


def test_response_without_request_gives_up() -> None:
    conv, counters = conversation()
    out = feed(conv, sock("EGRESS", GET, 1), sock("INGRESS", OK + OK, 2))
    assert len(out) == 1 and conv.gave_up == "response without a request"
    assert counters[c.UNPAIRED_RESPONSES] == 1


def test_truncated_capture_inside_a_known_body_keeps_the_exchange() -> None:
    conv, counters = conversation()
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 10000\r\n\r\n"
    [ex] = feed(
        conv,
        sock("EGRESS", GET, 1),
        sock("INGRESS", head + b"x" * 100, 2, size=len(head) + 10_000),
    )
    assert ex.response_complete and ex.gap and ex.error is None
    assert ex.response_body_bytes == 10_000
    assert counters[c.CAPTURE_TRUNCATED_RECORDS] == 1


def test_truncated_capture_across_chunk_framing_reports_capture_truncated() -> None:
    conv, _ = conversation()
    body = chunk(b"a" * 50) + chunk(b"b" * 50)
    [ex] = feed(
        conv,
        sock("EGRESS", post(CHAT_PATH, {"model": "m", "stream": True}), 1),
        sock("INGRESS", SSE_HEAD, 2),
        sock("INGRESS", body[:20], 3, size=len(body)),
    )
    assert ex.error == "capture truncated" and not ex.response_complete


def test_records_lost_inside_a_known_body_become_a_gap_by_tcp_seq() -> None:
    conv, counters = conversation()
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n"
    response = 5_000 + len(head)  # the response's first byte; the sequence wraps inside it
    [ex] = feed(
        conv,
        sock("EGRESS", GET, 1, seq=2**32 - 10),
        sock("EGRESS", b"", 2, seq=2**32 - 10, size=0),  # no bytes: ignored
        sock("INGRESS", head + b"a" * 100, 3, seq=2**32 - response),
        # The next 100 bytes were read but their event never arrived (a full ring buffer).
        sock("INGRESS", b"c" * 100, 5, seq=(2**32 - response + len(head) + 200) % 2**32),
    )
    assert ex.response_complete and ex.gap and ex.error is None
    assert ex.response_body_bytes == 300
    assert counters[c.BYTES_LOST_BY_TCP_SEQ] == 100
    # The request's sequence numbers wrapped past 2**32 without a loss.
    [again] = feed(
        conv,
        sock("EGRESS", GET, 6, seq=(2**32 - 10 + len(GET)) % 2**32),
        sock("INGRESS", OK, 7, seq=(2**32 - response + len(head) + 300) % 2**32),
    )
    assert again.response_complete and not again.gap
    assert counters[c.BYTES_LOST_BY_TCP_SEQ] == 100


def test_records_lost_across_chunk_framing_end_the_exchange_with_why() -> None:
    conv, counters = conversation()
    first, second = chunk(b"a" * 50), chunk(b"b" * 50)
    [ex] = feed(
        conv,
        sock("EGRESS", post(CHAT_PATH, {"model": "m", "stream": True}), 1, seq=1),
        sock("INGRESS", SSE_HEAD, 2, seq=1000),
        sock("INGRESS", second, 4, seq=1000 + len(SSE_HEAD) + len(first)),
    )
    lost = len(first)
    assert ex.error == (
        f"{lost} bytes not seen (events lost, or a call not traced such as sendfile)"
    )
    assert not ex.response_complete
    assert counters[c.BYTES_LOST_BY_TCP_SEQ] == lost


def test_a_record_of_bytes_already_seen_is_dropped_not_fed_twice() -> None:
    conv, counters = conversation()
    [ex] = feed(
        conv,
        sock("EGRESS", GET, 1, seq=500),
        sock("INGRESS", OK[:10], 2, seq=9000),  # a peek, say
        sock("INGRESS", OK[:10], 3, seq=9000),  # the same bytes read for real
        sock("INGRESS", OK[10:], 4, seq=9010),
    )
    assert ex.response_complete and not ex.gap and ex.response_body_bytes == 2
    assert counters[c.BYTES_LOST_BY_TCP_SEQ] == 0 and counters[c.RECORDS_REPEATED] == 1


def test_two_threads_on_one_socket_are_not_taken_for_a_loss() -> None:
    conv, counters = conversation()
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n"
    # Threads 1 and 2 both read copied_seq 100 at entry; the kernel gave 2 the later bytes,
    # and 2's call ended first. Sequence numbers are compared within one thread only.
    [ex] = feed(
        conv,
        sock("EGRESS", GET, 1, seq=1),
        sock("INGRESS", head, 2, seq=50, tid=1),
        sock("INGRESS", b"b" * 10, 3, seq=50 + len(head), tid=2),
        sock("INGRESS", b"a" * 10, 4, seq=50 + len(head), tid=1),
    )
    assert counters[c.BYTES_LOST_BY_TCP_SEQ] == 0 and ex.response_complete


def test_close_flushes_in_flight_and_ends_bodies_read_until_close() -> None:
    conv, _ = conversation()
    out = feed(
        conv, sock("EGRESS", GET + GET, 1), sock("INGRESS", b"HTTP/1.0 200 OK\r\n\r\npartial", 2)
    )
    out += conv.close("connection closed")
    assert [(e.response_complete, e.error) for e in out] == [
        (True, None),
        (False, "no response: connection closed"),
    ]
    assert out[0].end_ns == 7 and out[1].end_ns == 1  # last byte seen, not the close time


def test_close_mid_request_and_idle_reason() -> None:
    conv, _ = conversation()
    feed(conv, sock("EGRESS", post("/x", b"0123456789")[:-5], 1))
    [ex] = conv.close("idle timeout")
    assert ex.error == "idle timeout" and not ex.request_complete


def test_upgrade_ends_http() -> None:
    conv, counters = conversation()
    upgrade = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    [ex] = feed(
        conv,
        sock("EGRESS", upgrade, 1),
        sock("INGRESS", b"HTTP/1.1 101 Switching Protocols\r\n\r\n", 2),
    )
    assert ex.response is not None and ex.response.status == 101 and ex.error is None
    assert conv.gave_up == "protocol upgrade" and counters[c.UPGRADES] == 1
    assert feed(conv, sock("EGRESS", b"\x81\x85abcd", 3)) == []


def test_pipelining_limit() -> None:
    conv, counters = conversation()
    out = feed(conv, sock("EGRESS", GET * (MAX_PENDING_REQUESTS + 1), 1))
    assert len(out) == MAX_PENDING_REQUESTS
    assert conv.gave_up == "too many pipelined requests"
    assert counters[c.LIMIT_PENDING_REQUESTS] == 1


def test_source_event_ids_are_capped_and_counted() -> None:
    conv, counters = conversation()
    out = feed(
        conv,
        sock("EGRESS", GET, 0),
        sock("INGRESS", b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", 1),
        *(sock("INGRESS", b"x", 2 + i) for i in range(100)),
    )
    [ex] = out
    assert len(ex.source_event_ids) == MAX_SOURCE_EVENT_IDS and ex.source_events == 102
    assert counters[c.LIMIT_SOURCE_EVENT_IDS] == 102 - MAX_SOURCE_EVENT_IDS


MIB = 1024 * 1024
RECORD = 64 * 1024
FIFTY_MB = 50 * 1000 * 1000


def stream_through(
    conv: Conversation, head: bytes, body_record: bytes, total: int
) -> list[Exchange]:
    """Feeds `head` then `total` body bytes in 64 KiB records, checking the buffers each time."""
    out = feed(conv, sock("INGRESS", head, 10))
    sent, t = 0, 11
    peak = 0
    while sent < total:
        piece = body_record[: min(RECORD, total - sent)]
        out += conv.feed(call_of_record(sock("INGRESS", piece, t)))
        sent, t = sent + len(piece), t + 1
        peak = max(peak, conv.buffered_bytes())
        assert conv.buffered_bytes() <= conv.max_buffered_bytes()
    # One response in flight: at most one kept body (or SSE line and event) plus header buffers.
    assert peak <= 2 * MAX_HEADER_BYTES + max(MAX_JSON_BODY_BYTES, 2 * MAX_EVENT_BYTES)
    return out


def test_50_mb_download_streams_through_with_constant_memory() -> None:
    conv, _ = conversation()
    feed(conv, sock("EGRESS", b"GET /weights.bin HTTP/1.1\r\n\r\n", 1))
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % FIFTY_MB
    [ex] = stream_through(conv, head, b"\x00" * RECORD, FIFTY_MB)
    assert ex.response_complete and ex.response_body_bytes == FIFTY_MB
    assert conv.buffered_bytes() == 0


def test_50_mb_llm_bodies_keep_at_most_the_limit() -> None:
    conv, counters = conversation()
    feed(conv, sock("EGRESS", post(CHAT_PATH, {"model": "m"}), 1))
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % FIFTY_MB
    )
    [ex] = stream_through(conv, head, b" " * RECORD, FIFTY_MB)
    assert ex.llm is not None and ex.response_body_bytes == FIFTY_MB
    assert counters[c.LIMIT_JSON_BODY_BYTES] == 1

    # An event stream whose one `data:` line never ends: the SSE buffers stay capped too.
    conv, counters = conversation()
    feed(conv, sock("EGRESS", post(CHAT_PATH, {"model": "m", "stream": True}), 1))
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
        % FIFTY_MB
    )
    [ex] = stream_through(conv, head, b"data: " + b"y" * (RECORD - 6), FIFTY_MB)
    assert ex.llm is not None and ex.response_complete


def test_llm_exchange_carries_request_info_and_outcome() -> None:
    conv, _ = conversation()
    body = {"model": "m1", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    [ex] = feed(
        conv,
        sock("EGRESS", post(CHAT_PATH, json.dumps(body).encode()), 100),
        sock("INGRESS", SSE_HEAD + chunk(sse(chat_delta("x"))), 200),
        sock("INGRESS", chunk(b"data: [DONE]\n\n") + LAST_CHUNK, 300),
    )
    assert ex.endpoint == "chat.completions"
    assert ex.request_info is not None and ex.request_info.model == "m1"
    assert ex.llm is not None and ex.llm.timeline.first_ns == 205 and ex.llm.done


def test_oversized_headers_count_as_a_limit_hit() -> None:
    conv, counters = conversation()
    feed(conv, sock("EGRESS", GET, 1))
    huge = b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * MAX_HEADER_BYTES
    [ex] = feed(conv, sock("INGRESS", huge, 2))
    assert ex.error == "header section too large" and counters[c.LIMIT_HEADER_BYTES] == 1
    assert conv.buffered_bytes() <= conv.max_buffered_bytes()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["EGRESS", "INGRESS"]),
            st.one_of(
                st.binary(max_size=200),
                st.sampled_from([GET, OK, post(CHAT_PATH, {"model": "m"}), SSE_HEAD, LAST_CHUNK]),
            ),
            st.integers(0, 300),
        ),
        max_size=12,
    )
)
def test_any_records_never_raise(records: list[tuple[str, bytes, int]]) -> None:
    conv, _ = conversation()
    for i, (direction, payload, extra) in enumerate(records):
        conv.feed(
            call_of_record(sock(direction, payload, i, size=len(payload) + extra % 3 * extra))
        )
        assert conv.buffered_bytes() <= conv.max_buffered_bytes()
    conv.close("connection closed")


def test_a_server_times_a_request_from_when_it_arrived_not_from_its_read() -> None:
    """A busy server reads a request late (its event loop waited for a CPU): the probe's
    waited_ns moves the exchange's start back to the arrival, where the client's TTFT starts."""
    conv, _ = conversation()
    request = {**sock("INGRESS", GET, 50_000), "waited_ns": 30_000}  # read at 50 us
    [ex] = feed(conv, request, sock("EGRESS", OK, 90_000))
    assert conv.observation_point == "SERVER"
    assert ex.start_ns == request["start_ns"] - 30_000
    client, _ = conversation()
    [seen] = feed(
        client, sock("EGRESS", GET, 1_000), {**sock("INGRESS", OK, 9_000), "waited_ns": 5}
    )
    assert seen.start_ns == 1_000  # a client's own times are its truth: no wait applies
