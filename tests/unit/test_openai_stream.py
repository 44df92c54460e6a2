from __future__ import annotations

import json

from tests.unit.http_wire import chat_delta, sse, usage
from zerotrace_collector.redaction import StreamRedactor
from zerotrace_correlator.openai_stream import (
    MAX_ERROR_CHARS,
    MAX_JSON_BODY_BYTES,
    MAX_STREAM_ERRORS,
    LlmOutcome,
    LlmRequestInfo,
    ResponseAnalyzer,
    parse_request_body,
)

SSE = "text/event-stream"


def test_request_body_full_and_cut_short() -> None:
    body = {
        "messages": [{"role": "user", "content": 'say "model": "x"'}],
        "model": "llama-3",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 64,
    }
    data = json.dumps(body).encode()
    assert parse_request_body(data) == LlmRequestInfo("llama-3", True, True, 64)
    # A cut body still gives the model and stream flag when they came before the cut.
    cut = json.dumps({"model": 'm\\"q', "stream": False, "messages": ["x" * 100]}).encode()[:60]
    assert parse_request_body(cut) == LlmRequestInfo('m\\"q', False, None, None)
    assert parse_request_body(b"") == LlmRequestInfo(None, None, None, None)


def stream(endpoint: str, events: list[tuple[bytes, int]], complete: bool = True) -> LlmOutcome:
    analyzer = ResponseAnalyzer(endpoint, 200, f"{SSE}; charset=utf-8")
    for data, t in events:
        analyzer.feed(data, t)
    return analyzer.finish(events[-1][1] if events else 0, complete, None)


def test_chat_stream_role_only_chunk_is_not_content() -> None:
    out = stream(
        "chat.completions",
        [
            (sse(chat_delta(role="assistant", content="")), 10),
            (sse(chat_delta("Hel")), 20),
            (sse(chat_delta(reasoning_content="hmm")), 30),
            (sse(chat_delta(tool_calls=[{"index": 0, "function": {"arguments": "{"}}])), 40),
            (sse(chat_delta(None, finish="stop")), 50),
            (sse({"choices": [], "usage": usage(11, 4, cached=8)}), 60),
            (b"data: [DONE]\n\n", 70),
        ],
    )
    assert (out.timeline.first_ns, out.timeline.last_ns, out.timeline.count) == (20, 40, 3)
    assert (out.input_tokens, out.output_tokens, out.cached_tokens) == (11, 4, 8)
    assert out.finish_reason == "stop" and out.done and out.stream
    assert out.model == "served-model" and out.error is None and not out.failed


def test_usage_in_every_chunk_last_wins() -> None:
    events = [
        (sse({**chat_delta("a"), "usage": usage(5, 1)}), 10),
        (sse({**chat_delta("b"), "usage": usage(5, 2)}), 20),
        (sse({**chat_delta("c", finish="length"), "usage": usage(5, 3)}), 30),
        (b"data: [DONE]\n\n", 40),
    ]
    out = stream("chat.completions", events)
    assert (out.input_tokens, out.output_tokens, out.timeline.count) == (5, 3, 3)
    assert out.finish_reason == "length"


def test_completions_stream_counts_text() -> None:
    def chunk(text: str) -> bytes:
        return sse({"choices": [{"text": text, "index": 0, "finish_reason": None}]})

    out = stream(
        "completions", [(chunk(""), 1), (chunk("x"), 2), (chunk("y"), 3), (b"data: [DONE]\n\n", 4)]
    )
    assert out.timeline.count == 2 and out.output_tokens is None and out.error is None


def test_responses_stream() -> None:
    def ev(kind: str, **fields: object) -> bytes:
        return sse({"type": kind, **fields}, event=kind)

    out = stream(
        "responses",
        [
            (ev("response.created", response={"model": "gpt-x", "status": "in_progress"}), 1),
            (ev("response.output_text.delta", delta=""), 2),
            (ev("response.output_text.delta", delta="Hi"), 3),
            (ev("response.output_text.delta", delta="!"), 4),
            (ev("response.output_text.done", text="Hi!"), 5),
            (
                ev(
                    "response.completed",
                    response={
                        "model": "gpt-x",
                        "status": "completed",
                        "usage": {
                            "input_tokens": 9,
                            "output_tokens": 2,
                            "input_tokens_details": {"cached_tokens": 4},
                        },
                    },
                ),
                6,
            ),
        ],
    )
    assert (out.timeline.first_ns, out.timeline.last_ns) == (3, 4)
    assert (out.input_tokens, out.output_tokens, out.cached_tokens) == (9, 2, 4)
    assert out.finish_reason == "completed" and out.done and out.model == "gpt-x"
    assert out.error is None


def test_responses_failed_and_error_events() -> None:
    failed = {
        "type": "response.failed",
        "response": {"status": "failed", "error": {"message": "overloaded"}},
    }
    out = stream("responses", [(sse(failed), 1)])
    assert out.error == "stream error: overloaded" and out.failed and out.done
    out = stream("responses", [(sse({"type": "error", "message": "bad"}), 1)])
    assert out.error == "stream error: bad"


def test_server_error_mid_stream() -> None:
    out = stream(
        "chat.completions",
        [
            (sse(chat_delta("a")), 1),
            (sse({"error": {"message": "CUDA out of memory", "code": 500}}), 2),
            (b"data: [DONE]\n\n", 3),
        ],
    )
    assert out.error == "stream error: CUDA out of memory" and out.failed
    assert out.timeline.count == 1


def test_server_errors_kept_are_bounded_and_the_rest_counted() -> None:
    # A stream of error events without end (found by bench.fuzz: the list grew by each).
    analyzer = ResponseAnalyzer("chat.completions", 200, SSE)
    for t in range(1, 1_001):
        analyzer.feed(sse({"error": {"message": f"e{t}" + "x" * 1_000}}), t)
    out = analyzer.finish(1_001, True, None)
    assert analyzer.errors_dropped == 1_000 - MAX_STREAM_ERRORS
    assert out.error is not None
    kept = out.error.split("; ")
    assert len(kept) == MAX_STREAM_ERRORS + 2  # + the count + "stream ended without ..."
    assert kept[0] == "stream error: e1" + "x" * (MAX_ERROR_CHARS - 2)
    assert kept[MAX_STREAM_ERRORS] == f"{1_000 - MAX_STREAM_ERRORS} more server errors"
    assert out.failed


def test_aborted_stream_and_done_before_close() -> None:
    cut = stream(
        "chat.completions", [(sse(chat_delta("a")), 1), (b'data: {"cho', 2)], complete=False
    )
    assert cut.error == "stream aborted: connection closed" and not cut.failed
    assert cut.timeline.count == 1 and not cut.done
    done = stream(
        "chat.completions", [(sse(chat_delta("a")), 1), (b"data: [DONE]\n\n", 2)], complete=False
    )
    assert done.error is None
    no_final = stream("chat.completions", [(sse(chat_delta("a")), 1)])
    assert no_final.error == "stream ended without a final event"


def test_non_stream_bodies() -> None:
    body = {
        "model": "m",
        "choices": [
            {"message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}
        ],
        "usage": usage(3, 5),
    }
    analyzer = ResponseAnalyzer("chat.completions", 200, "application/json")
    data = json.dumps(body).encode()
    analyzer.feed(data[:10], 100)
    analyzer.feed(data[10:], 200)
    out = analyzer.finish(200, True, None)
    assert not out.stream and out.timeline.count == 1 and out.timeline.first_ns == 200
    assert (out.input_tokens, out.output_tokens, out.finish_reason) == (3, 5, "stop")

    responses = {
        "model": "m",
        "status": "completed",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi"}]}],
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    analyzer = ResponseAnalyzer("responses", 200, "application/json")
    analyzer.feed(json.dumps(responses).encode(), 7)
    out = analyzer.finish(7, True, None)
    assert out.timeline.count == 1 and out.output_tokens == 1 and out.finish_reason == "completed"


def test_responses_body_as_the_collector_masks_it() -> None:
    """Unless content is captured the collector masks the answer's text to the same length
    (redaction.py): it still counts, as it does in what older collectors wrote (keys masked
    too); an empty answer still does not."""

    def body(parts: str) -> bytes:
        return (
            b'{"model": "m", "status": "completed", "output": [{"type": "message", '
            b'"role": "assistant", "content": [' + parts.encode() + b"]}], "
            b'"usage": {"input_tokens": 1, "output_tokens": 2}}'
        )

    text = '{"type": "output_text", "text": "Hi there", "annotations": []}'
    empty = '{"type": "output_text", "text": "", "annotations": []}'
    old = '{"****": "***********", "****": "********", "***********": []}'
    old_empty = '{"****": "***********", "****": "", "***********": []}'
    cases = [(text, 1), (empty, 0), (old, 1), (old_empty, 0)]
    for parts, events in cases:
        masked = StreamRedactor().redact(body(parts))
        assert len(masked) == len(body(parts)) and b"Hi there" not in masked
        analyzer = ResponseAnalyzer("responses", 200, "application/json")
        analyzer.feed(masked, 7)
        out = analyzer.finish(7, True, None)
        assert out.timeline.count == events, parts
        assert out.timeline.first_ns == (7 if events else None)
        assert (out.output_tokens, out.finish_reason) == (2, "completed")


def test_http_error_body() -> None:
    analyzer = ResponseAnalyzer("chat.completions", 429, "application/json")
    analyzer.feed(b'{"error": {"message": "Rate limit reached", "type": "rate_limit"}}', 1)
    out = analyzer.finish(1, True, None)
    assert out.error == "http 429: Rate limit reached" and out.failed
    analyzer = ResponseAnalyzer("chat.completions", 502, "text/html")
    analyzer.feed(b"<html>bad gateway</html>", 1)
    assert analyzer.finish(1, True, None).error == "http 502"


def test_huge_body_is_kept_only_up_to_the_limit() -> None:
    analyzer = ResponseAnalyzer("chat.completions", 200, "application/json")
    for i in range(20):
        analyzer.feed(b"x" * 100_000, i)
        assert analyzer.buffered_bytes() <= MAX_JSON_BODY_BYTES
    assert analyzer.body_limit_hit
    out = analyzer.finish(20, True, None)
    assert out.timeline.count == 0 and out.error is None


def test_gap_in_a_stream_resyncs_and_reports_truncation() -> None:
    analyzer = ResponseAnalyzer("chat.completions", 200, SSE)
    analyzer.feed(sse(chat_delta("a")) + b'data: {"choi', 1)
    analyzer.gap()
    analyzer.feed(b'ces": []}\n\n' + sse(chat_delta("b")) + b"data: [DONE]\n\n", 2)
    out = analyzer.finish(2, True, None)
    assert out.timeline.count == 2 and out.error == "capture truncated" and not out.failed
