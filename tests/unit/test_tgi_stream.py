from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.llm_api_wire import T0, arrived, run, streamed, whole
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace_correlator.tgi_stream import TgiReader, parse_request

pytestmark = pytest.mark.unit

REQUEST = {"inputs": "What is Deep Learning?", "parameters": {"max_new_tokens": 20}}


def event(i: int, text: str, special: bool = False, details: dict[str, Any] | None = None) -> bytes:
    obj = {
        "index": i,
        "token": {"id": 100 + i, "text": text, "logprob": -0.5, "special": special},
        "generated_text": None if details is None else "Deep learning is",
        "details": details,
    }
    return b"data:" + json.dumps(obj).encode() + b"\n\n"  # TGI writes no space after `data:`


STREAM = [
    event(1, "Deep"),
    event(2, " learning"),
    event(3, " is"),
    event(
        4,
        "</s>",
        special=True,
        details={"finish_reason": "eos_token", "generated_tokens": 4, "seed": None},
    ),
]


def test_stream_metrics_exact(codec: AvroCodec) -> None:
    span, llm = run(streamed("/generate_stream", REQUEST, "text/event-stream", STREAM), codec)
    assert llm["endpoint"] == "generate_stream" and llm["stream"]
    assert llm["model"] == "unknown"  # TGI names its model in neither request nor response
    assert llm["ttft_ns"] == arrived(0) - T0
    # The end-of-sequence token is one of the 4 generated: decoding ran until it came.
    assert llm["content_events"] == 4
    assert llm["tpot_ns"] == (arrived(3) - arrived(0)) // 3
    assert (llm["output_tokens"], llm["output_tokens_estimated"]) == (4, False)
    assert llm["finish_reason"] == "eos_token" and llm["error"] is None
    attrs = span["attributes"]
    assert attrs[names.ATTR_GEN_AI_OPERATION] == names.GEN_AI_OPERATION_TEXT_COMPLETION
    assert attrs[names.ATTR_GEN_AI_PROVIDER] == names.GEN_AI_PROVIDER_TGI


def test_only_the_last_special_token_is_content(codec: AvroCodec) -> None:
    """A special token inside the stream (a control token the tokenizer hides) is no output
    a client sees; a run cut at the length limit ends on an ordinary token."""
    stream = [
        event(1, "<|tool|>", special=True),
        event(2, "Deep"),
        event(3, ""),  # a token whose bytes do not decode yet (half a UTF-8 character)
        event(4, " learning", details={"finish_reason": "length", "generated_tokens": 4}),
    ]
    _, llm = run(streamed("/generate_stream", REQUEST, "text/event-stream", stream), codec)
    assert llm["ttft_ns"] == arrived(1) - T0 and llm["content_events"] == 2
    assert llm["tpot_ns"] == (arrived(3) - arrived(1)) // 3
    assert (llm["output_tokens"], llm["finish_reason"]) == (4, "length")


def test_non_stream_generate(codec: AvroCodec) -> None:
    body = {
        "generated_text": "Deep learning is a subset of machine learning",
        "details": {
            "finish_reason": "length",
            "generated_tokens": 20,
            "seed": None,
            "prefill": [],
            "tokens": [],
        },
    }
    _, llm = run(whole("/generate", REQUEST, body), codec)
    assert llm["endpoint"] == "generate" and not llm["stream"]
    assert llm["ttft_ns"] == 90_005 and llm["output_tokens"] == 20
    assert llm["finish_reason"] == "length"

    _, llm = run(whole("/generate", {"inputs": "x"}, [{"generated_text": "y"}]), codec)
    assert llm["content_events"] == 1 and llm["output_tokens_estimated"]


def test_errors(codec: AvroCodec) -> None:
    error = (
        b'data:{"error":"Request failed during generation: Server error: CUDA OOM",'
        b'"error_type":"generation"}\n\n'
    )
    span, llm = run(
        streamed("/generate_stream", REQUEST, "text/event-stream", [STREAM[0], error]), codec
    )
    assert llm["error"] == "stream error: Request failed during generation: Server error: CUDA OOM"
    assert span["status"] == "ERROR" and llm["content_events"] == 1

    body = {
        "error": "Input validation error: `inputs` must have less than 1024 tokens",
        "error_type": "validation",
    }
    _, llm = run(whole("/generate", REQUEST, body, "422 Unprocessable Entity"), codec)
    assert llm["error"].startswith("http 422: Input validation error")


def test_truncated_stream(codec: AvroCodec) -> None:
    _, llm = run(streamed("/generate_stream", REQUEST, "text/event-stream", STREAM[:2]), codec)
    assert llm["error"] == "stream ended without a final event"
    assert (llm["output_tokens"], llm["output_tokens_estimated"]) == (2, True)


def test_request_and_hostile_input() -> None:
    info = parse_request(json.dumps(REQUEST).encode(), "/tgi/generate_stream?x=1")
    assert (info.model, info.stream, info.max_tokens) == (None, True, 20)
    assert parse_request(b"[" * 50_000, "/generate").stream is False
    reader = TgiReader("generate", 200, "application/json")
    reader.feed(b"[" * 50_000, 1)
    outcome = reader.finish(2, True, None)
    assert outcome.timeline.count == 0 and outcome.error is None
