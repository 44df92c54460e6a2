from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.http_wire import close, post, sock
from tests.unit.llm_api_wire import T0, arrived, run, streamed, whole
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace_correlator import http_counters as c
from zerotrace_correlator.anthropic_stream import AnthropicReader
from zerotrace_correlator.http_llm_step import CLOSE_GRACE_NS, HttpLlmCorrelator
from zerotrace_correlator.openai_stream import MAX_JSON_BODY_BYTES, MAX_STREAM_ERRORS

pytestmark = pytest.mark.unit

PATH = "/v1/messages"
MODEL = "claude-sonnet-4-20250514"
REQUEST = {
    "model": MODEL,
    "max_tokens": 1024,
    "stream": True,
    "messages": [{"role": "user", "content": "Hello"}],
}


def ev(kind: str, **fields: Any) -> bytes:
    """One event as the Messages API writes it: the name twice, in `event:` and `type`."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


def text(value: str, kind: str = "text_delta", field: str = "text") -> bytes:
    return ev("content_block_delta", index=0, delta={"type": kind, field: value})


START = ev(
    "message_start",
    message={
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 1, "cache_read_input_tokens": 5},
    },
)
STREAM = [
    START,  # 0
    ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),  # 1
    ev("ping"),  # 2
    text("Hello"),  # 3: the first content
    text(" world", "thinking_delta", "thinking"),  # 4
    text('{"city": "Paris"}', "input_json_delta", "partial_json"),  # 5
    ev("content_block_stop", index=0),  # 6
    ev(
        "message_delta",
        delta={"stop_reason": "end_turn", "stop_sequence": None},
        usage={"output_tokens": 15},
    ),  # 7
    ev("message_stop"),  # 8
]


def test_stream_metrics_exact(codec: AvroCodec) -> None:
    span, llm = run(streamed(PATH, REQUEST, "text/event-stream", STREAM), codec)
    assert llm["endpoint"] == "messages" and llm["model"] == MODEL and llm["stream"]
    assert llm["ttft_ns"] == arrived(3) - T0
    assert llm["tpot_ns"] == (arrived(5) - arrived(3)) // 14  # 15 tokens by usage
    assert llm["content_events"] == 3  # ping, block start/stop and the message events are not
    assert (llm["output_tokens"], llm["output_tokens_estimated"]) == (15, False)
    assert (llm["input_tokens"], llm["cached_tokens"]) == (30, 5)  # uncached 25 + 5 read
    assert llm["finish_reason"] == "end_turn" and llm["error"] is None
    attrs = span["attributes"]
    assert attrs[names.ATTR_GEN_AI_OPERATION] == names.GEN_AI_OPERATION_CHAT
    assert attrs[names.ATTR_GEN_AI_PROVIDER] == names.GEN_AI_PROVIDER_ANTHROPIC
    assert attrs[names.ATTR_GEN_AI_RESPONSE_MODEL] == MODEL and span["status"] == "OK"


def test_non_stream_message(codec: AvroCodec) -> None:
    body = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "Hi!"}],
        "stop_reason": "max_tokens",
        "usage": {"input_tokens": 10, "output_tokens": 3, "cache_creation_input_tokens": 2},
    }
    _, llm = run(whole(PATH, {**REQUEST, "stream": False}, body), codec)
    assert not llm["stream"] and llm["content_events"] == 1
    assert llm["ttft_ns"] == 90_005 and llm["tpot_ns"] is None
    assert (llm["input_tokens"], llm["output_tokens"], llm["cached_tokens"]) == (12, 3, None)
    assert llm["finish_reason"] == "max_tokens" and llm["error"] is None


def test_non_stream_message_as_the_collector_masks_it(codec: AvroCodec) -> None:
    """Without content capture the collector masks the strings of a `content` array keeping
    lengths, keys and kinds (zerotrace_collector/redaction.py; older collectors masked the keys
    too): the answer still counts, an empty text block still does not."""

    def message(content: str) -> bytes:
        return (
            b'{"id": "msg_3", "type": "message", "role": "assistant", "model": "m", '
            b'"content": [' + content.encode() + b'], "stop_reason": "max_tokens", '
            b'"usage": {"input_tokens": 7, "output_tokens": 8}}'
        )

    text = '{"****": "****", "****": "**********"}'  # {"type": "text", "text": "tok0 tok1 "}
    tool = '{"****": "********", "**": "*******", "****": "***", "*****": {"****": "*"}}'
    empty = '{"****": "****", "****": ""}'  # {"type": "text", "text": ""}
    request = post(PATH, {"model": "m", "max_tokens": 64, "messages": []})
    kept = '{"type": "text", "text": "**********"}'  # as the collector masks it now
    kept_empty = '{"type": "text", "text": ""}'
    cases = [(text, 1), (tool, 1), (f"{empty}, {text}", 1), (empty, 0), (kept, 1)]
    cases += [(kept_empty, 0), (f"{kept_empty}, {kept}", 1)]
    for content, events in cases:
        body = message(content)
        head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}"
        answer = head.encode() + b"\r\n\r\n" + body
        _, llm = run([sock("EGRESS", request, T0), sock("INGRESS", answer, T0 + 90_000)], codec)
        assert llm["content_events"] == events, content
        assert (llm["output_tokens"], llm["finish_reason"]) == (8, "max_tokens")
        assert llm["ttft_ns"] == (90_005 if events else None)


def test_error_event_mid_stream_ends_it(codec: AvroCodec) -> None:
    error = ev("error", error={"type": "overloaded_error", "message": "Overloaded"})
    span, llm = run(streamed(PATH, REQUEST, "text/event-stream", [START, text("a"), error]), codec)
    assert llm["error"] == "stream error: Overloaded" and llm["content_events"] == 1
    assert llm["output_tokens_estimated"] and span["status"] == "ERROR"


def test_http_error_body(codec: AvroCodec) -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    span, llm = run(whole(PATH, REQUEST, body, "529 Site Overloaded"), codec)
    assert llm["error"] == "http 529: Overloaded" and llm["status_code"] == 529
    assert llm["ttft_ns"] is None and span["attributes"][names.ATTR_ERROR_TYPE] == "529"


def test_stream_cut_by_close_gives_a_record_with_the_reason(codec: AvroCodec) -> None:
    records = streamed(PATH, REQUEST, "text/event-stream", STREAM[:5])[:-1]  # no last chunk
    _, llm = run([*records, close(T0 + 500_000)], codec, advance_to=T0 + 500_000 + CLOSE_GRACE_NS)
    assert llm["error"] == "stream aborted: connection closed"
    assert llm["ttft_ns"] == arrived(3) - T0
    # message_start's output_tokens (1) is a placeholder, not the count: estimated from events.
    assert (llm["output_tokens"], llm["output_tokens_estimated"]) == (2, True)


def test_stream_without_message_stop_says_so(codec: AvroCodec) -> None:
    _, llm = run(streamed(PATH, REQUEST, "text/event-stream", STREAM[:4]), codec)
    assert llm["error"] == "stream ended without a final event"


def test_huge_body_and_error_floods_are_bounded_and_counted(codec: AvroCodec) -> None:
    correlator = HttpLlmCorrelator()
    huge = {"type": "message", "content": [{"type": "text", "text": "x" * MAX_JSON_BODY_BYTES}]}
    _, llm = run(whole(PATH, {**REQUEST, "stream": False}, huge), codec, correlator)
    assert llm["content_events"] == 0 and llm["error"] is None
    assert correlator.counters[c.LIMIT_JSON_BODY_BYTES] == 1

    flood = [ev("error", error={"message": f"e{i}" + "!" * 1000}) for i in range(20)]
    _, llm = run(streamed(PATH, REQUEST, "text/event-stream", flood), codec, correlator)
    assert llm["error"].endswith("; 12 more server errors")
    assert len(llm["error"]) < (MAX_STREAM_ERRORS + 1) * 300
    assert correlator.counters[c.LIMIT_STREAM_ERRORS] == 12


def test_reader_ignores_noise_and_hostile_nesting() -> None:
    reader = AnthropicReader("messages", 200, "text/event-stream")
    reader.feed(b"data: " + b"[" * 100_000 + b"\n\n", 1)
    reader.feed(b": comment\n\ndata: not json\n\n" + text("ok"), 2)
    outcome = reader.finish(3, True, None)
    assert outcome.timeline.count == 1 and outcome.timeline.first_ns == 2
    assert reader.buffered_bytes() == 0


def test_request_without_stream_flag_is_not_streamed(codec: AvroCodec) -> None:
    body = {"type": "message", "model": MODEL, "content": [], "stop_reason": "end_turn"}
    records = whole(PATH, {"model": MODEL, "max_tokens": 5, "messages": []}, body)
    _, llm = run(records, codec)
    assert not llm["stream"] and llm["content_events"] == 0 and llm["ttft_ns"] is None
