from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.http_wire import (
    CHAT_PATH,
    LAST_CHUNK,
    SSE_HEAD,
    chat_delta,
    chunk,
    close,
    json_response,
    post,
    sock,
    sse,
    usage,
)
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace_collector.probes.socket import RESUME_AFTER_S
from zerotrace_correlator import http_counters as c
from zerotrace_correlator.http_llm_step import CLOSE_GRACE_NS, HttpLlmCorrelator, Output

SPAN, LLM = names.DERIVED_SPAN.record, names.DERIVED_LLM.record
REQUEST = {
    "model": "llama-3-8b",
    "messages": [{"role": "user", "content": "Say hi"}],
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_tokens": 32,
}
DONE = b"data: [DONE]\n\n"


def run(*records: dict[str, Any], correlator: HttpLlmCorrelator | None = None) -> list[Output]:
    correlator = HttpLlmCorrelator() if correlator is None else correlator
    out: list[Output] = []
    for record in records:
        out += correlator.feed_conn(record) if "kind" in record else correlator.feed_socket(record)
    return out


def by_kind(out: list[Output]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return [d for r, d in out if r == SPAN], [d for r, d in out if r == LLM]


def encodes(codec: AvroCodec, out: list[Output]) -> None:
    for record, datum in out:
        decoded = codec.decode(codec.encode(record, datum))
        assert decoded == (record, datum)


def chat_stream_records(t0: int = 1_000_000) -> list[dict[str, Any]]:
    """A vLLM-like stream: role-only chunk, three content chunks, finish, usage, [DONE]."""
    events = [
        sse(chat_delta(role="assistant", content="")),
        sse(chat_delta("Hi")),
        sse(chat_delta(" there")),
        sse(chat_delta("!")),
        sse(chat_delta(None, finish="stop")),
        sse({"choices": [], "usage": usage(12, 4, cached=8)}),
        DONE,
    ]
    out = [sock("EGRESS", post(CHAT_PATH, REQUEST), t0), sock("INGRESS", SSE_HEAD, t0 + 40_000)]
    for i, event in enumerate(events):
        # The gap grows from one token to the next: 10, 20, 30, ... us.
        out.append(sock("INGRESS", chunk(event), t0 + 50_000 + 10_000 * i * (i + 1) // 2))
    out.append(sock("INGRESS", LAST_CHUNK, t0 + 400_000))
    return out


def test_chat_stream_metrics_exact_to_the_ns(codec: AvroCodec) -> None:
    out = run(*chat_stream_records())
    [span], [llm] = by_kind(out)
    encodes(codec, out)
    # Reads end 5 ns after they start (the helper's duration); content at events 1, 2, 3.
    first, second, third = 1_060_005, 1_080_005, 1_110_005
    assert llm["ttft_ns"] == first - 1_000_000 == 60_005 and second - first == 20_000
    assert llm["tpot_ns"] == (third - first) // 3  # 4 tokens by usage
    assert (llm["itl_p50_ns"], llm["itl_p99_ns"], llm["itl_max_ns"]) == (20_000, 30_000, 30_000)
    assert llm["tokens_per_s"] == pytest.approx(3 / 50e-6)
    assert llm["first_byte_ns"] == 40_005 and llm["content_events"] == 3
    assert (llm["start_ns"], llm["end_ns"]) == (1_000_000, 1_400_005)
    assert llm["input_tokens"] == 12 and llm["output_tokens"] == 4
    assert llm["cached_tokens"] == 8 and not llm["output_tokens_estimated"]
    assert llm["finish_reason"] == "stop" and llm["error"] is None
    assert llm["model"] == "llama-3-8b" and llm["endpoint"] == "chat.completions"
    assert llm["stream"] and llm["status_code"] == 200 and llm["path"] == CHAT_PATH
    assert llm["observation_point"] == "CLIENT" and llm["pid"] == 10
    assert llm["request_id"] == llm["span_id"] == span["span_id"]

    assert span["kind"] == names.SPAN_KIND_HTTP_CLIENT and span["status"] == "OK"
    assert span["name"] == f"POST {CHAT_PATH}"
    assert (span["start_ns"], span["end_ns"]) == (1_000_000, 1_400_005)
    attrs = span["attributes"]
    assert attrs[names.ATTR_HTTP_STATUS] == "200"
    assert attrs[names.ATTR_GEN_AI_REQUEST_MODEL] == "llama-3-8b"
    assert attrs[names.ATTR_GEN_AI_OUTPUT_TOKENS] == "4"
    assert (
        attrs[names.ATTR_SERVER_ADDRESS] == "10.0.0.2" and attrs[names.ATTR_SERVER_PORT] == "8000"
    )
    assert len(span["source_event_ids"]) == 10


def test_ids_are_deterministic() -> None:
    a, b = run(*chat_stream_records()), run(*chat_stream_records())
    assert a == b
    other = run(*(dict(r, conn_id="c2") for r in chat_stream_records()))
    assert other[0][1]["span_id"] != a[0][1]["span_id"]


def test_usage_only_in_every_chunk_gives_the_same_counts() -> None:
    events = [
        sse({**chat_delta("a"), "usage": usage(3, 1)}),
        sse({**chat_delta("b"), "usage": usage(3, 2)}),
        sse({**chat_delta("c", finish="stop"), "usage": usage(3, 3)}),
        DONE,
    ]
    records = [sock("EGRESS", post(CHAT_PATH, REQUEST), 0), sock("INGRESS", SSE_HEAD, 10)]
    records += [sock("INGRESS", chunk(e), 100 * (i + 1)) for i, e in enumerate(events)]
    _, [llm] = by_kind(run(*records, sock("INGRESS", LAST_CHUNK, 1_000)))
    assert (llm["input_tokens"], llm["output_tokens"], llm["content_events"]) == (3, 3, 3)
    assert llm["tpot_ns"] == 100 and not llm["output_tokens_estimated"]


def test_without_usage_tokens_are_estimated_from_events(codec: AvroCodec) -> None:
    body = sse(chat_delta("a")) + sse(chat_delta("b")) + sse(chat_delta("c", finish="stop")) + DONE
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    out = run(
        sock("EGRESS", post(CHAT_PATH, {"model": "m", "stream": True}), 0),
        sock("INGRESS", head % len(body), 100),
        *(sock("INGRESS", body[i : i + 50], 200 + i) for i in range(0, len(body), 50)),
    )
    encodes(codec, out)
    _, [llm] = by_kind(out)
    assert llm["output_tokens"] == 3 and llm["output_tokens_estimated"]
    assert llm["input_tokens"] is None and llm["error"] is None


def test_non_stream_chat(codec: AvroCodec) -> None:
    body = {
        "model": "m",
        "choices": [
            {"message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}
        ],
        "usage": usage(5, 7),
    }
    wire = json_response(body)
    out = run(
        sock("EGRESS", post(CHAT_PATH, {"model": "m", "messages": []}), 1_000),
        sock("INGRESS", wire[:100], 5_000),
        sock("INGRESS", wire[100:], 9_000),
    )
    encodes(codec, out)
    _, [llm] = by_kind(out)
    assert not llm["stream"] and llm["content_events"] == 1
    assert llm["ttft_ns"] == 8_005 and llm["first_byte_ns"] == 4_005
    assert llm["tpot_ns"] is None and llm["tokens_per_s"] is None
    assert (llm["input_tokens"], llm["output_tokens"]) == (5, 7)


def test_responses_api_stream(codec: AvroCodec) -> None:
    def ev(kind: str, **fields: Any) -> bytes:
        return chunk(sse({"type": kind, **fields}, event=kind))

    final = {
        "status": "completed",
        "model": "gpt-x",
        "usage": {"input_tokens": 4, "output_tokens": 2},
    }
    out = run(
        sock("EGRESS", post("/v1/responses", {"model": "gpt-x", "input": "hi", "stream": True}), 0),
        sock("INGRESS", SSE_HEAD + ev("response.created", response={"status": "in_progress"}), 10),
        sock("INGRESS", ev("response.output_text.delta", delta="Hel"), 20),
        sock("INGRESS", ev("response.output_text.delta", delta="lo"), 50),
        sock("INGRESS", ev("response.completed", response=final) + LAST_CHUNK, 60),
    )
    encodes(codec, out)
    _, [llm] = by_kind(out)
    assert llm["endpoint"] == "responses" and llm["ttft_ns"] == 25 and llm["tpot_ns"] == 30
    assert (llm["input_tokens"], llm["output_tokens"], llm["finish_reason"]) == (4, 2, "completed")


def test_completions_through_a_gateway_prefix() -> None:
    body = (
        sse({"choices": [{"text": "x"}]})
        + sse({"choices": [{"text": "y", "finish_reason": "length"}]})
        + DONE
    )
    _, [llm] = by_kind(
        run(
            sock(
                "EGRESS",
                post("/gw/openai/v1/completions", {"model": "m", "prompt": "p", "stream": True}),
                0,
            ),
            sock("INGRESS", SSE_HEAD + chunk(body) + LAST_CHUNK, 10),
        )
    )
    assert llm["endpoint"] == "completions" and llm["path"] == "/gw/openai/v1/completions"
    assert llm["content_events"] == 2 and llm["finish_reason"] == "length"


def test_stream_cut_mid_way_by_close(codec: AvroCodec) -> None:
    records = chat_stream_records()[:4]  # request, head, role chunk, one content chunk
    correlator = HttpLlmCorrelator()
    out = run(*records, correlator=correlator)
    assert out == []
    out = run(close(2_000_000), correlator=correlator)
    assert out == []  # a close waits out the grace: late data of the connection may follow
    out = correlator.advance(2_000_000 + CLOSE_GRACE_NS)
    encodes(codec, out)
    [span], [llm] = by_kind(out)
    assert llm["error"] == "stream aborted: connection closed"
    assert llm["ttft_ns"] == 60_005 and llm["content_events"] == 1
    assert llm["end_ns"] == 1_060_005  # the last byte seen, not the close
    assert (
        span["status"] == "ERROR" and span["attributes"][names.ATTR_ERROR_TYPE] == "stream aborted"
    )
    assert correlator.counters[c.EXCHANGES_ABORTED] == 1 and correlator.connections == 0


def test_server_error_mid_stream_and_http_500(codec: AvroCodec) -> None:
    error = sse({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}})
    out = run(
        sock("EGRESS", post(CHAT_PATH, REQUEST), 0),
        sock("INGRESS", SSE_HEAD + chunk(sse(chat_delta("a"))), 10),
        sock("INGRESS", chunk(error) + chunk(DONE) + LAST_CHUNK, 20),
    )
    encodes(codec, out)
    [span], [llm] = by_kind(out)
    assert llm["error"] == "stream error: engine died" and llm["content_events"] == 1
    assert span["status"] == "ERROR"

    out = run(
        sock("EGRESS", post(CHAT_PATH, REQUEST), 0),
        sock(
            "INGRESS",
            json_response({"error": {"message": "boom"}}, "500 Internal Server Error"),
            10,
        ),
    )
    encodes(codec, out)
    [span], [llm] = by_kind(out)
    assert llm["error"] == "http 500: boom" and llm["status_code"] == 500 and not llm["stream"]
    assert span["attributes"][names.ATTR_ERROR_TYPE] == "500"


def test_server_errors_past_the_limit_are_counted(codec: AvroCodec) -> None:
    errors = b"".join(chunk(sse({"error": {"message": f"e{i}"}})) for i in range(20))
    correlator = HttpLlmCorrelator()
    out = run(
        sock("EGRESS", post(CHAT_PATH, REQUEST), 0),
        sock("INGRESS", SSE_HEAD + errors + chunk(DONE) + LAST_CHUNK, 10),
        correlator=correlator,
    )
    encodes(codec, out)
    _, [llm] = by_kind(out)
    assert llm["error"].endswith("stream error: e7; 12 more server errors")
    assert correlator.counters[c.LIMIT_STREAM_ERRORS] == 12


def test_data_read_after_its_close_still_counts(codec: AvroCodec) -> None:
    """raw.conn may be read ahead of raw.socket: the CLOSE comes in before the last chunk."""
    records = chat_stream_records()
    correlator = HttpLlmCorrelator()
    out = run(*records[:-1], close(records[-1]["end_ns"] + 10), records[-1], correlator=correlator)
    out += correlator.advance(records[-1]["end_ns"] + 10 + CLOSE_GRACE_NS)
    _, [llm] = by_kind(out)
    assert llm["error"] is None and correlator.connections == 0


def test_a_close_read_before_any_data_of_its_connection_still_ends_it(codec: AvroCodec) -> None:
    """A worker starting on a backlog may read raw.conn well ahead of raw.socket; a client
    that closes right after `data: [DONE]` (no last chunk) ends its exchange only so."""
    records = chat_stream_records()
    last = records[-1]
    cut = bytes(last["payload"]).removesuffix(LAST_CHUNK)
    assert len(cut) < len(last["payload"])
    without_last_chunk = {**last, "payload": cut, "bytes": len(cut)}
    correlator = HttpLlmCorrelator()
    closed_ns = last["end_ns"] + 10
    out = run(close(closed_ns), *records[:-1], without_last_chunk, correlator=correlator)
    assert out == []
    out = correlator.advance(closed_ns + CLOSE_GRACE_NS)
    encodes(codec, out)
    _, [llm] = by_kind(out)
    assert llm["content_events"] > 0 and correlator.connections == 0


def test_no_response_before_close(codec: AvroCodec) -> None:
    correlator = HttpLlmCorrelator()
    out = run(sock("EGRESS", post(CHAT_PATH, REQUEST), 0), close(50), correlator=correlator)
    out += correlator.flush()  # a pending close is carried out at flush
    encodes(codec, out)
    _, [llm] = by_kind(out)
    assert llm["error"] == "no response: connection closed" and llm["status_code"] is None
    assert llm["model"] == "llama-3-8b" and llm["stream"] and llm["ttft_ns"] is None


def test_server_side_observation(codec: AvroCodec) -> None:
    records = [
        sock("INGRESS", post(CHAT_PATH, REQUEST), 0, duration=100),
        sock("EGRESS", SSE_HEAD, 1_000),
        sock("EGRESS", chunk(sse(chat_delta("a"))), 2_000),
        sock("EGRESS", chunk(sse(chat_delta("b"))), 3_000),
        sock("EGRESS", chunk(DONE) + LAST_CHUNK, 4_000),
    ]
    out = run(*records)
    encodes(codec, out)
    [span], [llm] = by_kind(out)
    assert span["kind"] == names.SPAN_KIND_HTTP_SERVER
    assert span["attributes"][names.ATTR_CLIENT_ADDRESS] == "10.0.0.2"
    assert llm["observation_point"] == "SERVER"
    assert (llm["ttft_ns"], llm["tpot_ns"], llm["first_byte_ns"]) == (1_900, 1_000, 900)


def test_packet_capture_is_network(codec: AvroCodec) -> None:
    records = [
        sock("EGRESS", post(CHAT_PATH, REQUEST), 0, source="PACKET"),
        sock(
            "INGRESS",
            SSE_HEAD + chunk(sse(chat_delta("a"))) + chunk(DONE) + LAST_CHUNK,
            70,
            source="PACKET",
        ),
    ]
    out = run(*records)
    encodes(codec, out)
    _, [llm] = by_kind(out)
    assert llm["observation_point"] == "NETWORK" and llm["pid"] is None and llm["ttft_ns"] == 70


def test_truncated_capture_in_a_stream(codec: AvroCodec) -> None:
    events = [sse(chat_delta(t)) for t in ("a", "b", "c")]
    wire = chunk(b"".join(events))
    first_read = len(wire) - len(events[2]) - 2  # the chunk-size line and events a and b
    out = run(
        sock("EGRESS", post(CHAT_PATH, REQUEST), 0),
        sock("INGRESS", SSE_HEAD, 10),
        sock("INGRESS", wire[:60], 20, size=first_read),  # the probe kept 60 bytes of the read
        sock("INGRESS", wire[first_read:] + chunk(DONE) + LAST_CHUNK, 30),
    )
    encodes(codec, out)
    [span], [llm] = by_kind(out)
    # Chunk framing survived the gap; SSE resynced at the next event (c) and the stream ended.
    assert llm["error"] == "capture truncated" and llm["content_events"] == 1
    assert llm["ttft_ns"] == 35
    assert span["status"] == "OK" and span["attributes"]["zerotrace.capture.truncated"] == "true"

    # A gap across chunk framing loses sync: the stream is reported with what was known.
    out = run(
        sock("EGRESS", post(CHAT_PATH, REQUEST), 0),
        sock("INGRESS", SSE_HEAD + chunk(events[0]), 10),
        sock("INGRESS", wire[:60], 20, size=len(wire) + 100),
    )
    encodes(codec, out)
    [span], [llm] = by_kind(out)
    assert llm["error"] == "stream aborted: capture truncated" and llm["content_events"] == 1
    assert span["status"] == "ERROR"


def test_garbage_and_tls_connections_yield_nothing() -> None:
    correlator = HttpLlmCorrelator()
    out = run(
        sock(
            "EGRESS",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),
            0,
            conn="tls",
        ),
        sock("INGRESS", bytes(range(255, -1, -1)), 1, conn="tls"),
        sock("EGRESS", b"*1\r\n$4\r\nPING\r\n", 2, conn="redis"),
        close(3, conn="tls"),
        correlator=correlator,
    )
    assert out == [] and correlator.advance(3 + CLOSE_GRACE_NS) == []
    assert correlator.counters[c.CONNS_NOT_HTTP] == 1 and correlator.counters[c.CONNS_CLOSED] == 1
    # The Redis connection went to its own parser; its PING, never answered, waits.
    assert correlator.counters[c.CONNS_HANDED_OVER] == 1


def test_idle_timeout_and_eviction() -> None:
    correlator = HttpLlmCorrelator(max_connections=2, idle_timeout_ns=1_000)
    for conn, t in (("a", 0), ("b", 100)):
        run(sock("EGRESS", post(CHAT_PATH, REQUEST), t, conn=conn), correlator=correlator)
    assert correlator.advance(999) == []
    out = correlator.advance(1_000)
    assert [d["error"] for r, d in out if r == LLM] == ["no response: idle timeout"]
    assert correlator.connections == 1 and correlator.counters[c.CONNS_IDLE_TIMEOUT] == 1

    run(sock("EGRESS", post(CHAT_PATH, REQUEST), 200, conn="c"), correlator=correlator)
    out = run(sock("EGRESS", post(CHAT_PATH, REQUEST), 300, conn="d"), correlator=correlator)
    assert [d["error"] for r, d in out if r == LLM] == [
        "no response: evicted: connection table full"
    ]
    assert correlator.conversation("b") is None and correlator.counters[c.CONNS_EVICTED] == 1
    assert len(correlator.flush()) == 4  # span and LLM record of c and d


# -- any split of the wire into reads gives the same records, timed by their reads -----------

CONTENT = ["tok0", "tok1", "tok2", "tok3", "tok4"]
SSE_BODY = (
    sse(chat_delta(role="assistant", content=""))
    + b"".join(sse(chat_delta(t)) for t in CONTENT)
    + sse({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": usage(9, 5)})
    + DONE
)


def chunked(body: bytes, cuts: list[int]) -> tuple[bytes, list[int]]:
    """Chunked encoding of body cut at `cuts`; also the wire offset of every body byte."""
    wire = bytearray(SSE_HEAD)
    where: list[int] = []
    bounds = sorted({0, len(body), *(x % len(body) for x in cuts)})
    for a, b in pairwise(bounds):
        wire += b"%x\r\n" % (b - a)
        where += range(len(wire), len(wire) + b - a)
        wire += body[a:b] + b"\r\n"
    return bytes(wire + LAST_CHUNK), where


def byte_time(offset: int) -> int:
    return 1_000_000 + 1_000 * offset


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), max_size=12),
    st.lists(st.integers(1, 10_000), max_size=25),
    st.lists(st.integers(1, 10_000), max_size=4),
)
def test_any_split_gives_the_same_records_timed_by_their_reads(
    chunk_cuts: list[int], read_cuts: list[int], request_cuts: list[int]
) -> None:
    request = post(CHAT_PATH, REQUEST)
    wire, where = chunked(SSE_BODY, chunk_cuts)
    out: list[Output] = []
    correlator = HttpLlmCorrelator()
    req_bounds = sorted({0, len(request), *(x % len(request) for x in request_cuts)})
    for a, b in pairwise(req_bounds):  # writes: timed by their start, 1 ns per byte
        out += correlator.feed_socket(sock("EGRESS", request[a:b], 1_000 + a))
    bounds = sorted({0, len(wire), *(x % len(wire) for x in read_cuts)})
    for a, b in pairwise(
        bounds
    ):  # reads: byte i arrives at byte_time(i); a read ends with its last
        record = sock("INGRESS", wire[a:b], byte_time(a), duration=byte_time(b - 1) - byte_time(a))
        out += correlator.feed_socket(record)
    [span], [llm] = by_kind(out)

    def arrival(wire_offset: int) -> int:
        return byte_time(min(b for b in bounds if b > wire_offset) - 1)

    # Each content event completes with the second LF after its token.
    done_at = [SSE_BODY.index(b"\n\n", SSE_BODY.index(t.encode())) + 1 for t in CONTENT]
    times = [arrival(where[i]) for i in done_at]
    gaps = sorted(b - a for a, b in pairwise(times))
    assert llm["ttft_ns"] == times[0] - 1_000
    assert llm["tpot_ns"] == (times[-1] - times[0]) // 4
    assert (llm["itl_p50_ns"], llm["itl_max_ns"]) == (gaps[1], gaps[-1])
    assert llm["first_byte_ns"] == arrival(0) - 1_000
    assert llm["end_ns"] == span["end_ns"] == byte_time(len(wire) - 1)
    assert llm["start_ns"] == span["start_ns"] == 1_000
    expected = {"output_tokens": 5, "input_tokens": 9, "content_events": 5, "finish_reason": "stop"}
    assert {k: llm[k] for k in expected} == expected
    assert llm["error"] is None and llm["model"] == "llama-3-8b"
    assert span["span_id"] == llm["span_id"] == run_once_span_id()
    assert json.loads(request[request.index(b"\r\n\r\n") + 4 :]) == REQUEST


def run_once_span_id() -> str:
    records = [sock("EGRESS", post(CHAT_PATH, REQUEST), 1_000)]
    wire, _ = chunked(SSE_BODY, [])
    records.append(sock("INGRESS", wire, byte_time(0)))
    return str(run(*records)[0][1]["span_id"])


def test_a_shed_connection_keeps_its_whole_exchanges_and_drops_the_one_it_cut(
    codec: AvroCodec,
) -> None:
    """raw.conn SHED (the collector's budget was short): what came before is reported, the
    exchange in progress is dropped and counted as shed, not reported half nor as aborted."""
    correlator = HttpLlmCorrelator()
    whole = chat_stream_records(1_000_000)
    cut = chat_stream_records(2_000_000)[:4]  # the request and the first chunks, then nothing
    shed = {**close(2_200_000), "kind": "SHED"}
    out = run(*whole, *cut, shed, correlator=correlator)
    out += correlator.advance(2_200_000 + CLOSE_GRACE_NS)
    spans, llms = by_kind(out)
    assert [s["status"] for s in spans] == ["OK"] and len(llms) == 1
    assert spans[0]["start_ns"] == 1_000_000
    encodes(codec, [*out, (names.RAW_CONN.record, shed)])
    counts = correlator.counters
    assert (counts[c.CONNS_SHED], counts[c.EXCHANGES_SHED], counts[c.EXCHANGES_ABORTED]) == (
        1,
        1,
        0,
    )
    assert correlator.connections == 0 and not correlator.holds.held()


def test_a_shed_connection_taken_up_again_starts_over_at_its_next_request() -> None:
    """The collector takes a shed connection up again once it has caught up (socket.c
    "Shedding"), at least the SHED's grace later: those calls start a new conversation even
    before event time has passed the grace, which skips the rest of the exchange it joins in
    the middle and follows the next one; nothing is reported in part."""
    correlator = HttpLlmCorrelator()
    whole = chat_stream_records(1_000_000)
    cut = chat_stream_records(2_000_000)
    shed = {**close(2_200_000), "kind": "SHED"}
    shift = CLOSE_GRACE_NS + 1_000_000
    rest = [
        {**r, "start_ns": r["start_ns"] + shift, "end_ns": r["end_ns"] + shift} for r in cut[6:]
    ]
    after = chat_stream_records(2_000_000 + shift + 1_000_000)
    out = run(*whole, *cut[:4], shed, *rest, *after, correlator=correlator)
    out += correlator.flush()
    spans, llms = by_kind(out)
    assert [(s["status"], s["start_ns"]) for s in spans] == [
        ("OK", 1_000_000),
        ("OK", 2_000_000 + shift + 1_000_000),
    ]
    assert len(llms) == 2 and all(llm["error"] is None for llm in llms)
    counts = correlator.counters
    assert (counts[c.CONNS_SHED], counts[c.EXCHANGES_SHED], counts[c.EXCHANGES_ABORTED]) == (
        1,
        1,
        0,
    )
    assert counts[c.RECORDS_BEFORE_FIRST_REQUEST] == len(rest)


def test_the_collector_takes_a_shed_connection_up_again_only_after_the_shed_s_grace() -> None:
    """The test above holds only while the collector's resume age (socket.c ZT_RESUME_AFTER_NS,
    set from probes/socket.py) outlasts the SHED's grace here: resumed calls inside the
    grace would be taken for the rest of the exchange the SHED cut. Two services, one rule."""
    assert RESUME_AFTER_S * 1e9 > CLOSE_GRACE_NS


def test_ciphertext_read_before_the_tls_link_waits_for_the_plaintext() -> None:
    """A server feeding libssl from memory (uvicorn) reads the ClientHello with a syscall
    before the TLS uprobes link the connection: that record is skipped and counted, and the
    plaintext that follows (source TLS) is the conversation; a capture's ciphertext is not."""
    correlator = HttpLlmCorrelator()
    hello = sock("INGRESS", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 500_000)
    plain = [{**r, "source": "TLS"} for r in chat_stream_records()]
    out = run(hello, *plain, correlator=correlator)
    spans, llms = by_kind(out)
    assert len(spans) == 1 and len(llms) == 1 and llms[0]["ttft_ns"] is not None
    assert correlator.counters[c.RECORDS_TLS_BEFORE_LINK] == 1
    assert correlator.counters[c.CONNS_NOT_HTTP] == 0
    packet = HttpLlmCorrelator()
    run({**hello, "source": "PACKET"}, correlator=packet)
    assert packet.counters[c.CONNS_NOT_HTTP] == 1
