from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.llm_api_wire import T0, arrived, run, streamed, whole
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace_correlator.gemini_stream import GeminiReader, JsonArraySplitter, parse_request

pytestmark = pytest.mark.unit

MODEL = "gemini-2.0-flash"
SSE_PATH = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
ARRAY_PATH = f"/v1beta/models/{MODEL}:streamGenerateContent"
REQUEST = {
    "contents": [{"role": "user", "parts": [{"text": "Write a story"}]}],
    "generationConfig": {"maxOutputTokens": 256},
}


def response(text: str | None, output: int, finish: str | None = None) -> dict[str, Any]:
    """One GenerateContentResponse chunk; usage is the running total."""
    candidate: dict[str, Any] = {"content": {"parts": [], "role": "model"}, "index": 0}
    if text is not None:
        candidate["content"]["parts"].append({"text": text})
    if finish:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": 8,
            "candidatesTokenCount": output,
            "totalTokenCount": 8 + output,
        },
        "modelVersion": MODEL + "-001",
    }


CHUNKS = [response("Once", 1), response(" upon a", 3), response(" time", 5, "STOP")]


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\r\n\r\n"  # Gemini ends events in CRLFs


def test_sse_stream_metrics_exact(codec: AvroCodec) -> None:
    span, llm = run(
        streamed(SSE_PATH, REQUEST, "text/event-stream", [sse(o) for o in CHUNKS]), codec
    )
    assert llm["endpoint"] == "streamGenerateContent" and llm["model"] == MODEL and llm["stream"]
    assert llm["ttft_ns"] == arrived(0) - T0
    assert llm["tpot_ns"] == (arrived(2) - arrived(0)) // 4  # the last chunk's total: 5
    assert (llm["input_tokens"], llm["output_tokens"], llm["output_tokens_estimated"]) == (
        8,
        5,
        False,
    )
    assert llm["finish_reason"] == "STOP" and llm["error"] is None
    attrs = span["attributes"]
    assert attrs[names.ATTR_GEN_AI_OPERATION] == names.GEN_AI_OPERATION_GENERATE_CONTENT
    assert attrs[names.ATTR_GEN_AI_PROVIDER] == names.GEN_AI_PROVIDER_GEMINI
    assert attrs[names.ATTR_GEN_AI_RESPONSE_MODEL] == MODEL + "-001"


def test_json_array_stream_split_inside_strings(codec: AvroCodec) -> None:
    """Without alt=sse the answer is one JSON array, its elements written as they come."""
    texts = [json.dumps(o, indent=2) for o in CHUNKS]
    wire = "[" + texts[0] + "\r\n,\r\n" + texts[1] + "\r\n,\r\n" + texts[2] + "\r\n]"
    cut_1 = wire.index("upon")  # the second element's bytes arrive in two reads
    cut_2 = wire.index(" time") + 2
    sep = wire.index("\r\n,")
    pieces = [
        wire[:sep],
        wire[sep:cut_1],
        wire[cut_1:cut_2],
        wire[cut_2:],
    ]
    _, llm = run(
        streamed(ARRAY_PATH, REQUEST, "application/json", [p.encode() for p in pieces]), codec
    )
    assert llm["stream"] and llm["content_events"] == 3
    assert llm["ttft_ns"] == arrived(0) - T0
    assert llm["tpot_ns"] == (arrived(3) - arrived(0)) // 4
    assert llm["output_tokens"] == 5 and llm["finish_reason"] == "STOP" and llm["error"] is None


def test_non_stream_generate_content(codec: AvroCodec) -> None:
    path = f"/v1beta/models/{MODEL}:generateContent"
    body = response("A whole story.", 4, "MAX_TOKENS")
    body["usageMetadata"]["thoughtsTokenCount"] = 10
    body["usageMetadata"]["cachedContentTokenCount"] = 6
    _, llm = run(whole(path, REQUEST, body), codec)
    assert llm["endpoint"] == "generateContent" and not llm["stream"]
    assert llm["ttft_ns"] == 90_005 and llm["content_events"] == 1
    assert (llm["output_tokens"], llm["cached_tokens"]) == (14, 6)  # thinking is output
    assert llm["finish_reason"] == "MAX_TOKENS"


def test_error_body_and_blocked_prompt(codec: AvroCodec) -> None:
    error = {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted",
            "status": "RESOURCE_EXHAUSTED",
        }
    }
    span, llm = run(whole(ARRAY_PATH, REQUEST, [error], "429 Too Many Requests"), codec)
    assert llm["error"] == "http 429: Resource has been exhausted" and span["status"] == "ERROR"

    blocked = {
        "promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 8},
    }
    _, llm = run(streamed(SSE_PATH, REQUEST, "text/event-stream", [sse(blocked)]), codec)
    assert llm["finish_reason"] == "SAFETY" and llm["content_events"] == 0
    assert llm["error"] is None and llm["ttft_ns"] is None


def test_truncated_stream_says_so(codec: AvroCodec) -> None:
    _, llm = run(streamed(SSE_PATH, REQUEST, "text/event-stream", [sse(CHUNKS[0])]), codec)
    assert llm["error"] == "stream ended without a final event"
    assert llm["output_tokens"] == 1 and not llm["output_tokens_estimated"]

    array = "[" + json.dumps(CHUNKS[0]) + ",\r\n" + json.dumps(CHUNKS[1])[:20]
    _, llm = run(streamed(ARRAY_PATH, REQUEST, "application/json", [array.encode()]), codec)
    assert llm["error"] == "stream ended without a final event" and llm["content_events"] == 1


def test_request_model_and_limit() -> None:
    info = parse_request(
        json.dumps(REQUEST).encode(),
        "/gw/v1/projects/p/locations/l/publishers/google/models/gemini-pro:generateContent",
    )
    assert (info.model, info.stream, info.max_tokens) == ("gemini-pro", False, 256)
    info = parse_request(b"{cut", ARRAY_PATH)
    assert (info.model, info.stream, info.max_tokens) == (MODEL, True, None)


def test_array_splitter_bounds_elements_and_ignores_brackets_in_strings() -> None:
    splitter = JsonArraySplitter(max_element_bytes=64)
    out = splitter.feed(b'[{"a": "x]}\\"{"}, {"b": "' + b"y" * 100 + b'"}]', 7)
    assert out[0].data == b'{"a": "x]}\\"{"}'
    assert out[1].truncated and len(out[1].data) == 64 and splitter.truncated_elements == 1
    assert splitter.closed and splitter.buffered_bytes() == 0


def test_a_gap_stops_the_array_reader() -> None:
    reader = GeminiReader("streamGenerateContent", 200, "application/json")
    reader.feed(b"[" + json.dumps(CHUNKS[0]).encode() + b",", 1)
    reader.gap()
    reader.feed(json.dumps(CHUNKS[2]).encode() + b"]", 2)
    outcome = reader.finish(3, True, None)
    assert outcome.timeline.count == 1 and outcome.error is not None
    assert outcome.error.endswith("capture truncated")


ELEMENTS = st.lists(
    st.dictionaries(
        st.sampled_from(["t", "k", '"]', "\\"]),
        st.text(alphabet='ab[]{}"\\ ,', max_size=6),
        max_size=3,
    ),
    max_size=4,
)


@given(ELEMENTS, st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_array_splitter_any_split_gives_the_elements(
    elements: list[dict[str, str]], cuts: list[int]
) -> None:
    wire = json.dumps(elements, indent=1).encode()
    splitter = JsonArraySplitter()
    bounds = sorted({0, len(wire), *(min(c, len(wire)) for c in cuts)})
    out = []
    for a, b in pairwise(bounds):
        out += splitter.feed(wire[a:b], b)
    assert [json.loads(e.data) for e in out] == elements
    assert splitter.closed
    # Each element is timed by the piece holding its closing brace.
    end = 0
    for element in out:
        end = wire.index(element.data, end) + len(element.data)
        assert element.time_ns == min(b for b in bounds if b >= end)
