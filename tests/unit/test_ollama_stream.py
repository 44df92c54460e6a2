from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.http_wire import close
from tests.unit.llm_api_wire import T0, arrived, run, streamed, whole
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace_correlator import http_counters as c
from zerotrace_correlator.http_llm_step import CLOSE_GRACE_NS, HttpLlmCorrelator
from zerotrace_correlator.ndjson import MAX_LINE_BYTES
from zerotrace_correlator.ollama_stream import parse_request

pytestmark = pytest.mark.unit

NDJSON = "application/x-ndjson"
MODEL = "llama3.2"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "why is the sky blue?"}]}
CREATED = "2023-08-04T08:52:19.385406455-07:00"


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def chat(content: str) -> bytes:
    return line(
        {
            "model": MODEL,
            "created_at": CREATED,
            "message": {"role": "assistant", "content": content},
            "done": False,
        }
    )


FINAL = {
    "model": MODEL,
    "created_at": CREATED,
    "message": {"role": "assistant", "content": ""},
    "done": True,
    "done_reason": "stop",
    "total_duration": 4883583458,
    "load_duration": 1334875,
    "prompt_eval_count": 26,
    "prompt_eval_duration": 342546000,
    "eval_count": 282,
    "eval_duration": 4535599000,
}


def test_chat_stream_metrics_exact(codec: AvroCodec) -> None:
    pieces = [chat("The"), chat(" sky"), chat(" is") + chat(" blue"), line(FINAL)]
    span, llm = run(streamed("/api/chat", CHAT, NDJSON, pieces), codec)
    assert llm["endpoint"] == "api/chat" and llm["model"] == MODEL and llm["stream"]
    assert llm["ttft_ns"] == arrived(0) - T0 and llm["content_events"] == 4
    assert llm["tpot_ns"] == (arrived(2) - arrived(0)) // 281
    assert (llm["input_tokens"], llm["output_tokens"], llm["output_tokens_estimated"]) == (
        26,
        282,
        False,
    )
    assert llm["finish_reason"] == "stop" and llm["error"] is None
    attrs = span["attributes"]
    assert attrs[names.ATTR_GEN_AI_OPERATION] == names.GEN_AI_OPERATION_CHAT
    assert attrs[names.ATTR_GEN_AI_PROVIDER] == names.GEN_AI_PROVIDER_OLLAMA


def test_generate_stream_with_lines_split_across_reads(codec: AvroCodec) -> None:
    wire = b"".join(
        line({"model": MODEL, "created_at": CREATED, "response": word, "done": False})
        for word in ("Hel", "lo", "!")
    ) + line({**FINAL, "message": None, "response": "", "done_reason": "length", "eval_count": 3})
    cut = wire.index(b'"lo"')  # the second line's bytes arrive in two reads
    pieces = [wire[:cut], wire[cut:]]
    request = {"model": MODEL, "prompt": "Hello", "stream": True}
    span, llm = run(streamed("/api/generate", request, NDJSON, pieces), codec)
    assert llm["endpoint"] == "api/generate" and llm["content_events"] == 3
    assert llm["ttft_ns"] == arrived(0) - T0 and llm["tpot_ns"] == (arrived(1) - arrived(0)) // 2
    assert llm["output_tokens"] == 3 and llm["finish_reason"] == "length"
    assert span["attributes"][names.ATTR_GEN_AI_OPERATION] == names.GEN_AI_OPERATION_TEXT_COMPLETION


def test_non_stream_chat(codec: AvroCodec) -> None:
    body = {**FINAL, "message": {"role": "assistant", "content": "Rayleigh scattering."}}
    _, llm = run(whole("/api/chat", {**CHAT, "stream": False}, body), codec)
    assert not llm["stream"] and llm["content_events"] == 1 and llm["ttft_ns"] == 90_005
    assert (llm["input_tokens"], llm["output_tokens"]) == (26, 282)


def test_error_body_and_error_line(codec: AvroCodec) -> None:
    body = {"error": "model 'nope' not found"}
    span, llm = run(whole("/api/chat", CHAT, body, "404 Not Found"), codec)
    assert llm["error"] == "http 404: model 'nope' not found" and span["status"] == "ERROR"

    pieces = [chat("a"), line({"error": "an error was encountered while running the model"})]
    _, llm = run(streamed("/api/chat", CHAT, NDJSON, pieces), codec)
    assert llm["error"] == "stream error: an error was encountered while running the model"
    assert llm["content_events"] == 1 and llm["output_tokens_estimated"]


def test_stream_cut_by_close(codec: AvroCodec) -> None:
    records = streamed("/api/chat", CHAT, NDJSON, [chat("a"), chat("b")])[:-1]
    end = T0 + 500_000
    _, llm = run([*records, close(end)], codec, advance_to=end + CLOSE_GRACE_NS)
    assert llm["error"] == "stream aborted: connection closed"
    assert (llm["output_tokens"], llm["output_tokens_estimated"]) == (2, True)
    assert llm["tpot_ns"] == arrived(1) - arrived(0)


def test_huge_line_is_cut_and_counted(codec: AvroCodec) -> None:
    correlator = HttpLlmCorrelator()
    huge = line({"model": MODEL, "response": "x" * MAX_LINE_BYTES, "done": False})
    pieces = [huge[i : i + 65536] for i in range(0, len(huge), 65536)] + [line(FINAL)]
    _, llm = run(streamed("/api/generate", {"model": MODEL}, NDJSON, pieces), codec, correlator)
    assert llm["content_events"] == 0 and llm["output_tokens"] == 282  # the cut line is not JSON
    assert correlator.counters[c.LIMIT_SSE_EVENT_BYTES] == 1


def test_request_stream_defaults_to_true() -> None:
    assert parse_request(json.dumps(CHAT).encode(), "/api/chat").stream is True
    info = parse_request(json.dumps({**CHAT, "options": {"num_predict": 9}}).encode(), "/api/chat")
    assert info.max_tokens == 9 and info.model == MODEL
    assert parse_request(b'{"model": "m", "messages": [', "/api/chat").stream is None
