"""Finished HTTP exchanges as derived.span and derived.llm records: deterministic ids, field
mapping, the OpenTelemetry failure rules, model fallbacks, and a round trip through Avro."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_correlator import exchange_records as er
from zerotrace_correlator.conversation import CLIENT, NETWORK, SERVER, Exchange
from zerotrace_correlator.http1 import MessageHead
from zerotrace_correlator.llm_metrics import ContentTimeline
from zerotrace_correlator.openai_stream import LlmOutcome, LlmRequestInfo

pytestmark = pytest.mark.unit

SPAN, LLM = names.DERIVED_SPAN.record, names.DERIVED_LLM.record
CODEC = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
ORIGIN = {
    "event_id": "c1/EGRESS/1000",
    "node_id": "n1",
    "pid": 10,
    "tid": 11,
    "process_name": "python3",
    "container_id": "abc123",
    "local_addr": "10.0.0.1",
    "local_port": 40000,
    "remote_addr": "10.0.0.2",
    "remote_port": 8000,
}


def request(
    method: str = "POST", target: str = "/v1/chat/completions", start: int = 1_000
) -> MessageHead:
    return MessageHead(True, method, target, 0, "", "1.1", (), start, start + 100)


def response(status: int = 200, start: int = 5_000) -> MessageHead:
    headers = (("content-type", "text/event-stream"),)
    return MessageHead(False, "", "", status, "OK", "1.1", headers, start, start + 10)


def exchange(**over: Any) -> Exchange:
    fields: dict[str, Any] = {
        "conn_id": "c1",
        "index": 0,
        "start_rank": 0,
        "observation_point": CLIENT,
        "request": request(),
        "origin": ORIGIN,
        "requests_sent_locally": True,
        "endpoint": None,
        "request_end_ns": 1_200,
        "request_body_bytes": 42,
        "source_event_ids": ["e1", "e2"],
        "source_events": 7,
    }
    return Exchange(**(fields | over))


def outcome(content_at: tuple[int, ...] = (), **over: Any) -> LlmOutcome:
    timeline = ContentTimeline()
    for t in content_at:
        timeline.add(t)
    fields: dict[str, Any] = {
        "stream": True,
        "timeline": timeline,
        "input_tokens": None,
        "output_tokens": None,
        "cached_tokens": None,
        "finish_reason": None,
        "model": None,
        "done": False,
        "error": None,
        "failed": False,
    }
    return LlmOutcome(**(fields | over))


def info(model: str | None = "llama-3-8b", stream: bool | None = True) -> LlmRequestInfo:
    return LlmRequestInfo(model=model, stream=stream, include_usage=True, max_tokens=32)


def chat(**over: Any) -> Exchange:
    """A finished streamed chat: 3 content events, usage 12 in / 4 out, [DONE] seen."""
    llm = outcome(
        (10_000, 30_000, 60_000),
        input_tokens=12,
        output_tokens=4,
        cached_tokens=8,
        finish_reason="stop",
        model="llama-3-8b-instruct",
        done=True,
    )
    fields: dict[str, Any] = {
        "endpoint": "chat.completions",
        "request_info": info(),
        "response": response(200, 5_000),
        "response_end_ns": 70_000,
        "response_body_bytes": 900,
        "request_complete": True,
        "response_complete": True,
        "llm": llm,
    }
    return exchange(**(fields | over))


def round_trip(record: str, datum: Mapping[str, Any]) -> dict[str, Any]:
    name, back = CODEC.decode(CODEC.encode(record, datum))
    assert name == record
    return back


# Ids.


def test_ids_depend_only_on_connection_start_and_rank() -> None:
    a, b = er.http_span(chat()), er.http_span(chat())
    assert a == b  # a replay of the same events: the same records
    assert len(a["span_id"]) == 16 and len(a["trace_id"]) == 32
    assert int(a["span_id"], 16) >= 0 and int(a["trace_id"], 16) >= 0
    # What happened in the exchange does not move its id; where and when it was does.
    assert er.http_span(chat(response=response(500)))["span_id"] == a["span_id"]
    assert er.http_span(exchange(origin=ORIGIN | {"pid": 99}))["span_id"] == a["span_id"]
    # A replay that starts mid-connection counts exchanges from there: same ids all the same.
    assert er.http_span(chat(index=5)) == a
    others = [
        chat(conn_id="c2"),
        chat(start_rank=1),  # pipelined: a second request that started in the same record
        chat(request=request(start=1_001)),
    ]
    ids = {er.http_span(ex)["span_id"] for ex in others} | {a["span_id"]}
    traces = {er.http_span(ex)["trace_id"] for ex in others} | {a["trace_id"]}
    assert len(ids) == len(traces) == 4
    assert er.exchange_span_id(chat()) == a["span_id"]


def test_the_llm_record_carries_its_spans_id() -> None:
    ex = chat()
    llm = er.llm_request(ex)
    assert llm is not None
    assert llm["request_id"] == llm["span_id"] == er.http_span(ex)["span_id"]


# Spans.


def test_a_plain_http_exchange_maps_field_by_field() -> None:
    ex = exchange(
        request=request("GET", "/health?verbose=1&x=2"),
        response=response(204, 3_000),
        response_end_ns=3_500,
        response_body_bytes=0,
    )
    span = er.http_span(ex)
    assert span == {
        "span_id": er.exchange_span_id(ex),
        "trace_id": span["trace_id"],
        "parent_span_id": None,
        "node_id": "n1",
        "pid": 10,
        "tid": 11,
        "process_name": "python3",
        "container_id": "abc123",
        "service": "python3",
        "kind": names.SPAN_KIND_HTTP_CLIENT,
        "name": "GET /health",
        "start_ns": 1_000,
        "end_ns": 3_500,
        "status": "OK",
        "attributes": {
            names.ATTR_HTTP_METHOD: "GET",
            names.ATTR_URL_PATH: "/health",
            names.ATTR_SERVER_ADDRESS: "10.0.0.2",
            names.ATTR_SERVER_PORT: "8000",
            names.ATTR_CLIENT_ADDRESS: "10.0.0.1",
            names.ATTR_CLIENT_PORT: "40000",
            names.ATTR_PROCESS_PID: "10",
            names.ATTR_THREAD_ID: "11",
            names.ATTR_PROCESS_NAME: "python3",
            names.ATTR_NETWORK_PROTOCOL_VERSION: "1.1",
            names.ATTR_HTTP_REQUEST_BODY_SIZE: "42",
            names.ATTR_OBSERVATION_POINT: CLIENT,
            names.ATTR_SOURCE_EVENTS: "7",
            names.ATTR_HTTP_STATUS: "204",
            names.ATTR_HTTP_RESPONSE_BODY_SIZE: "0",
            # request bytes 1,000-1,200, response bytes 3,000-3,500 (span_timings.py)
            names.ATTR_REQUEST_SEND_DURATION: "200",
            names.ATTR_SERVER_DURATION: "1800",
            names.ATTR_RESPONSE_TRANSFER_DURATION: "500",
        },
        "source_event_ids": ["e1", "e2"],
    }
    assert round_trip(SPAN, span) == span
    assert er.llm_request(ex) is None  # not an OpenAI endpoint: a span only


def test_a_request_without_response_ends_at_its_last_byte() -> None:
    span = er.http_span(exchange(request_end_ns=1_900))
    assert span["end_ns"] == 1_900 and span["status"] == "OK"
    assert names.ATTR_HTTP_STATUS not in span["attributes"]
    assert names.ATTR_HTTP_RESPONSE_BODY_SIZE not in span["attributes"]
    assert round_trip(SPAN, span) == span


@pytest.mark.parametrize(
    ("point", "sent_locally", "kind", "client", "server"),
    [
        (CLIENT, True, names.SPAN_KIND_HTTP_CLIENT, "10.0.0.1", "10.0.0.2"),
        (SERVER, False, names.SPAN_KIND_HTTP_SERVER, "10.0.0.2", "10.0.0.1"),
        # A capture sees both ends and files its spans as client spans.
        (NETWORK, True, names.SPAN_KIND_HTTP_CLIENT, "10.0.0.1", "10.0.0.2"),
        (NETWORK, False, names.SPAN_KIND_HTTP_CLIENT, "10.0.0.2", "10.0.0.1"),
    ],
)
def test_kind_and_ends_follow_where_the_exchange_was_seen(
    point: str, sent_locally: bool, kind: str, client: str, server: str
) -> None:
    span = er.http_span(exchange(observation_point=point, requests_sent_locally=sent_locally))
    attrs = span["attributes"]
    assert span["kind"] == kind and attrs[names.ATTR_OBSERVATION_POINT] == point
    assert (attrs[names.ATTR_CLIENT_ADDRESS], attrs[names.ATTR_SERVER_ADDRESS]) == (client, server)
    ports = {"10.0.0.1": "40000", "10.0.0.2": "8000"}
    assert attrs[names.ATTR_CLIENT_PORT] == ports[client]
    assert attrs[names.ATTR_SERVER_PORT] == ports[server]


@pytest.mark.parametrize(
    ("point", "status", "failed"),
    [
        (CLIENT, 399, False),
        (CLIENT, 400, True),  # OpenTelemetry: a 4xx fails the client's span...
        (NETWORK, 404, True),
        (SERVER, 404, False),  # ...not the server's, which answered correctly
        (SERVER, 499, False),
        (SERVER, 500, True),
        (CLIENT, 503, True),
    ],
)
def test_status_codes_fail_spans_as_opentelemetry_says(
    point: str, status: int, failed: bool
) -> None:
    span = er.http_span(exchange(observation_point=point, response=response(status)))
    attrs = span["attributes"]
    assert span["status"] == ("ERROR" if failed else "OK")
    assert attrs[names.ATTR_HTTP_STATUS] == str(status)
    assert attrs.get(names.ATTR_ERROR_TYPE) == (str(status) if failed else None)


def test_a_capture_gap_is_marked_but_is_not_a_failure() -> None:
    span = er.http_span(exchange(gap=True, response=response(200)))
    assert span["attributes"][names.ATTR_CAPTURE_GAP] == "true"
    assert span["status"] == "OK" and names.ATTR_ERROR_TYPE not in span["attributes"]
    assert names.ATTR_CAPTURE_GAP not in er.http_span(exchange())["attributes"]


def test_a_framing_error_fails_the_span_with_its_kind_and_message() -> None:
    message = "incomplete: the connection closed in the response body"
    span = er.http_span(exchange(response=response(200), error=message))
    assert span["status"] == "ERROR"
    assert span["attributes"][names.ATTR_ERROR_TYPE] == "incomplete"
    assert span["attributes"][names.ATTR_ERROR_MESSAGE] == message


def test_a_stream_that_reached_its_end_forgives_the_framing() -> None:
    # An SDK stops reading at [DONE] and may leave the chunked terminator unread.
    ex = chat(error="incomplete: connection closed before the last chunk")
    span, llm = er.http_span(ex), er.llm_request(ex)
    assert span["status"] == "OK"
    assert names.ATTR_ERROR_TYPE not in span["attributes"]
    assert names.ATTR_ERROR_MESSAGE not in span["attributes"]
    assert llm is not None and llm["error"] is None
    # Without [DONE] the same framing error stands.
    cut = chat(error="incomplete: connection closed", llm=outcome((10_000,), done=False))
    assert er.http_span(cut)["status"] == "ERROR"
    cut_llm = er.llm_request(cut)
    assert cut_llm is not None and cut_llm["error"] == "incomplete: connection closed"


def test_the_streams_own_error_comes_before_the_framings() -> None:
    llm = outcome((10_000,), error="server_error: overloaded", failed=True)
    ex = chat(llm=llm, error="incomplete: closed")
    span = er.http_span(ex)
    assert span["status"] == "ERROR"
    assert span["attributes"][names.ATTR_ERROR_TYPE] == "server_error"
    assert span["attributes"][names.ATTR_ERROR_MESSAGE] == "server_error: overloaded"
    record = er.llm_request(ex)
    assert record is not None and record["error"] == "server_error: overloaded"


def test_the_status_names_the_error_type_when_both_fail() -> None:
    llm = outcome(error="rate_limit_exceeded: slow down", failed=True)
    span = er.http_span(chat(response=response(429), llm=llm))
    assert span["attributes"][names.ATTR_ERROR_TYPE] == "429"
    assert span["attributes"][names.ATTR_ERROR_MESSAGE] == "rate_limit_exceeded: slow down"


def test_a_failed_stream_under_a_200_fails_the_span() -> None:
    span = er.http_span(chat(llm=outcome((10_000,), failed=True, done=True)))
    assert span["status"] == "ERROR"


def test_gen_ai_attributes_on_an_llm_span() -> None:
    span = er.http_span(chat())
    attrs = span["attributes"]
    assert attrs[names.ATTR_GEN_AI_OPERATION] == "chat.completions"
    assert attrs[names.ATTR_GEN_AI_REQUEST_MODEL] == "llama-3-8b"
    assert attrs[names.ATTR_GEN_AI_RESPONSE_MODEL] == "llama-3-8b-instruct"
    assert attrs[names.ATTR_GEN_AI_INPUT_TOKENS] == "12"
    assert attrs[names.ATTR_GEN_AI_OUTPUT_TOKENS] == "4"
    assert attrs[names.ATTR_GEN_AI_FINISH_REASONS] == "stop"
    assert round_trip(SPAN, span) == span
    # What is not known is left out rather than written empty.
    bare = er.http_span(chat(request_info=info(model=None), llm=None))["attributes"]
    assert bare[names.ATTR_GEN_AI_OPERATION] == "chat.completions"
    for key in (
        names.ATTR_GEN_AI_REQUEST_MODEL,
        names.ATTR_GEN_AI_RESPONSE_MODEL,
        names.ATTR_GEN_AI_INPUT_TOKENS,
        names.ATTR_GEN_AI_OUTPUT_TOKENS,
        names.ATTR_GEN_AI_FINISH_REASONS,
    ):
        assert key not in bare


# LLM records.


def test_a_streamed_chat_maps_field_by_field() -> None:
    record = er.llm_request(chat())
    assert record is not None
    assert record == {
        "request_id": record["span_id"],
        "span_id": er.exchange_span_id(chat()),
        "node_id": "n1",
        "service": "python3",
        "observation_point": CLIENT,
        "model": "llama-3-8b",  # what was asked for, before what answered
        "endpoint": "chat.completions",
        "stream": True,
        "start_ns": 1_000,
        "end_ns": 70_000,
        "ttft_ns": 9_000,  # first content at 10 us, the request's first byte at 1 us
        "tpot_ns": 50_000 // 3,  # 50 us of decode over 4 - 1 tokens
        "input_tokens": 12,
        "output_tokens": 4,
        "output_tokens_estimated": False,
        "finish_reason": "stop",
        "error": None,
        "cached_tokens": 8,
        "itl_p50_ns": 20_000,
        "itl_p99_ns": 30_000,
        "itl_max_ns": 30_000,
        "tokens_per_s": pytest.approx(3 / 50e-6),
        "status_code": 200,
        "path": "/v1/chat/completions",
        "pid": 10,
        "first_byte_ns": 4_000,
        "content_events": 3,
    }
    assert round_trip(LLM, record) == record


@pytest.mark.parametrize(
    ("asked", "answered", "model"),
    [
        ("m-asked", "m-answered", "m-asked"),
        (None, "m-answered", "m-answered"),
        ("", "m-answered", "m-answered"),  # an empty name names nothing
        (None, None, er.UNKNOWN_MODEL),
    ],
)
def test_the_model_falls_back_from_request_to_response_to_unknown(
    asked: str | None, answered: str | None, model: str
) -> None:
    record = er.llm_request(chat(request_info=info(model=asked), llm=outcome(model=answered)))
    assert record is not None and record["model"] == model


def test_an_unparsed_request_body_still_makes_a_record() -> None:
    record = er.llm_request(chat(request_info=None, llm=None))
    assert record is not None
    assert record["model"] == er.UNKNOWN_MODEL and record["stream"] is False


def test_a_request_with_no_response_has_no_timings() -> None:
    ex = exchange(endpoint="completions", request_info=info(stream=True), error="aborted: reset")
    record = er.llm_request(ex)
    assert record is not None
    assert record["stream"] is True  # as the request asked, nothing else says otherwise
    assert record["status_code"] is None and record["first_byte_ns"] is None
    assert record["ttft_ns"] is None and record["tpot_ns"] is None
    assert record["tokens_per_s"] is None and record["itl_max_ns"] is None
    assert record["input_tokens"] is None and record["cached_tokens"] is None
    assert record["output_tokens"] == 0 and record["output_tokens_estimated"] is True
    assert record["content_events"] == 0 and record["end_ns"] == 1_200
    assert record["error"] == "aborted: reset" and record["finish_reason"] is None
    assert round_trip(LLM, record) == record


def test_the_response_says_whether_it_streamed() -> None:
    record = er.llm_request(chat(request_info=info(stream=True), llm=outcome(stream=False)))
    assert record is not None and record["stream"] is False


def test_without_usage_output_tokens_are_estimated_from_content_events() -> None:
    record = er.llm_request(chat(llm=outcome((10_000, 20_000, 40_000, 80_000))))
    assert record is not None
    assert record["output_tokens"] == 4 and record["output_tokens_estimated"] is True
    assert record["tpot_ns"] == 70_000 // 3


def test_a_capture_has_no_pid_of_its_own_and_the_path_drops_its_query() -> None:
    ex = chat(observation_point=NETWORK, request=request(target="/v1/chat/completions?a=b"))
    record = er.llm_request(ex)
    assert record is not None
    assert record["pid"] is None and record["observation_point"] == NETWORK
    assert record["path"] == "/v1/chat/completions"
    assert round_trip(LLM, record) == record
    server = er.llm_request(chat(observation_point=SERVER))
    assert server is not None and server["pid"] == 10


# Any exchange.

texts = st.text(st.characters(codec="utf-8"), max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    conn_id=texts,
    rank=st.integers(0, 10_000),
    start=st.integers(0, 2**62),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    path=st.text(st.characters(codec="ascii", exclude_characters="?"), max_size=20),
    query=st.none() | st.text(st.characters(codec="ascii"), max_size=10),
    status=st.none() | st.integers(100, 599),
    point=st.sampled_from([CLIENT, SERVER, NETWORK]),
    sent_locally=st.booleans(),
    endpoint=st.none() | st.sampled_from(["chat.completions", "completions", "responses"]),
    model=st.none() | texts,
    error=st.none() | texts,
    gap=st.booleans(),
)
def test_any_exchange_makes_records_that_survive_avro(
    conn_id: str,
    rank: int,
    start: int,
    method: str,
    path: str,
    query: str | None,
    status: int | None,
    point: str,
    sent_locally: bool,
    endpoint: str | None,
    model: str | None,
    error: str | None,
    gap: bool,
) -> None:
    target = path if query is None else f"{path}?{query}"
    ex = exchange(
        conn_id=conn_id,
        start_rank=rank,
        observation_point=point,
        request=request(method, target, start),
        requests_sent_locally=sent_locally,
        endpoint=endpoint,
        request_end_ns=start + 100,
        request_info=None if endpoint is None else info(model=model),
        response=None if status is None else response(status, start + 50),
        response_end_ns=None if status is None else start + 80,
        error=error,
        gap=gap,
    )
    span = er.http_span(ex)
    assert round_trip(SPAN, span) == span
    assert span["name"] == f"{method} {path}" and span["attributes"][names.ATTR_URL_PATH] == path
    assert span["span_id"] == er.exchange_span_id(ex) == er.http_span(ex)["span_id"]
    assert (span["status"] == "ERROR") == (
        error is not None or (status is not None and status >= (500 if point == SERVER else 400))
    )
    record = er.llm_request(ex)
    assert (record is None) == (endpoint is None)
    if record is not None:
        assert round_trip(LLM, record) == record
        assert record["span_id"] == span["span_id"] and record["path"] == path
        assert record["model"] == (model or er.UNKNOWN_MODEL)
