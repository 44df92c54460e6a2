"""LLM records of HTTP/2 streams (h2_llm.py through http2.py and the correlator): an
OpenAI-compatible streaming chat and Triton's ModelStreamInfer, timed by the calls that
carried their DATA; other streams keep no body."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import pytest

from tests.unit.http_wire import close, sock
from tests.unit.test_http2 import GRPC, Wire, run
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_collector.redaction import Redactor
from zerotrace_correlator import content_encoding, h2_llm
from zerotrace_correlator.h2_llm import LlmProtoSpan, triton_model
from zerotrace_correlator.http2 import REQUEST_BODY_BUDGET, Http2Parser
from zerotrace_correlator.http_llm_step import HttpLlmCorrelator
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, Side

CHAT = [
    (":method", "POST"), (":scheme", "http"), (":authority", "llm:8000"),
    (":path", "/v1/chat/completions"), ("content-type", "application/json"),
]  # fmt: skip
TRITON = [
    (":method", "POST"), (":scheme", "http"), (":authority", "triton:8001"),
    (":path", h2_llm.TRITON_STREAM_PATH), ("content-type", GRPC), ("te", "trailers"),
]  # fmt: skip
SSE = [(":status", "200"), ("content-type", "text/event-stream")]


def chunk(text: str) -> bytes:
    delta = {"model": "m-served", "choices": [{"delta": {"content": text}}]}
    return b"data: " + json.dumps(delta).encode() + b"\n\n"


USAGE = b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}\n\n'


def correlate(calls: list[tuple[Side, bytes]], times: list[int]) -> list[tuple[str, Any]]:
    """The client's view: its writes EGRESS at their start, its reads INGRESS at their end
    (sock's duration is 5 ns)."""
    correlator, out = HttpLlmCorrelator(), []
    for (side, data), t in zip(calls, times, strict=True):
        out += correlator.feed_socket(sock("EGRESS" if side == REQUEST else "INGRESS", data, t))
    out += correlator.feed_conn(close(times[-1] + 100))
    return out + correlator.flush()


def chat_wire() -> Wire:
    wire = Wire()
    wire.headers(REQUEST, 1, CHAT)
    body = json.dumps({"model": "llama-3", "stream": True, "messages": []}).encode()
    wire.data(REQUEST, 1, body, end=True)
    wire.headers(RESPONSE, 1, SSE)
    for text in ("He", "llo", "!"):
        wire.data(RESPONSE, 1, chunk(text))
    wire.data(RESPONSE, 1, USAGE)
    wire.data(RESPONSE, 1, b"data: [DONE]\n\n", end=True)
    return wire


def test_a_streamed_chat_over_h2c_is_a_derived_llm_record_timed_by_its_data_calls() -> None:
    wire = chat_wire()
    # preface, server settings, ack, headers, body, response headers, 3 tokens, usage, done
    times = [1_000, 1_100, 1_200, 2_000, 2_100, 5_000, 9_000, 12_000, 15_000, 15_500, 16_000]
    out = correlate(wire.calls, times)
    [span] = [d for r, d in out if r == names.DERIVED_SPAN.record]
    [llm] = [d for r, d in out if r == names.DERIVED_LLM.record]
    assert llm["request_id"] == span["span_id"] == llm["span_id"]
    assert (llm["model"], llm["endpoint"], llm["stream"]) == ("llama-3", "chat.completions", True)
    assert llm["start_ns"] == 2_000
    assert llm["first_byte_ns"] == 5_005 - 2_000
    assert llm["ttft_ns"] == 9_005 - 2_000
    assert llm["tpot_ns"] == (15_005 - 9_005) // 2
    assert (llm["output_tokens"], llm["output_tokens_estimated"]) == (3, False)
    assert (llm["input_tokens"], llm["content_events"], llm["error"]) == (7, 3, None)
    assert (llm["status_code"], llm["path"], llm["observation_point"]) == (
        200, "/v1/chat/completions", "CLIENT",
    )  # fmt: skip
    attrs = span["attributes"]
    assert attrs[names.ATTR_GEN_AI_REQUEST_MODEL] == "llama-3"
    assert attrs[names.ATTR_GEN_AI_OUTPUT_TOKENS] == "3"
    assert span["name"] == "POST /v1/chat/completions"
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    codec.encode(names.DERIVED_SPAN.record, span)
    codec.encode(names.DERIVED_LLM.record, llm)


def test_any_cut_into_calls_gives_the_same_counts() -> None:
    """One byte per call: the body and the events are read across calls."""
    wire = chat_wire()
    calls = [(side, data[i : i + 1]) for side, data in wire.calls for i in range(len(data))]
    [span] = run(calls)
    assert isinstance(span, LlmProtoSpan) and span.llm is not None
    assert span.llm.outcome.timeline.count == 3
    assert span.llm.request_info is not None and span.llm.request_info.model == "llama-3"


def model_infer_request(model: str) -> bytes:
    """A ModelInferRequest: model_name (1), model_version (2), id (3), an input (5)."""
    name = model.encode()
    message = b"\x0a" + bytes([len(name)]) + name + b"\x12\x01" + b"1" + b"\x1a\x02r1"
    message += b"\x2a\x04" + b"\x0a\x02in"
    return b"\x00" + len(message).to_bytes(4, "big") + message


def grpc_message(size: int) -> bytes:
    return b"\x00" + size.to_bytes(4, "big") + b"t" * size


def test_triton_model_stream_infer_counts_each_response_message_as_a_token() -> None:
    wire = Wire()
    wire.headers(REQUEST, 1, TRITON)
    wire.data(REQUEST, 1, model_infer_request("llama-7b-trtllm"), end=True)
    wire.headers(RESPONSE, 1, [(":status", "200"), ("content-type", GRPC)])
    wire.data(RESPONSE, 1, grpc_message(20))
    wire.data(RESPONSE, 1, grpc_message(21) + grpc_message(22)[:3])  # a message split
    wire.data(RESPONSE, 1, grpc_message(22)[3:] + grpc_message(23))
    wire.headers(RESPONSE, 1, [("grpc-status", "0")], end=True)
    times = [1_000, 1_100, 1_200, 2_000, 2_100, 3_000, 7_000, 10_000, 13_000, 13_500]
    out = correlate(wire.calls, times)
    [span] = [d for r, d in out if r == names.DERIVED_SPAN.record]
    [llm] = [d for r, d in out if r == names.DERIVED_LLM.record]
    assert span["name"] == "inference.GRPCInferenceService/ModelStreamInfer"
    assert span["kind"] == "grpc.client" and span["status"] == "OK"
    assert (llm["model"], llm["endpoint"]) == ("llama-7b-trtllm", h2_llm.TRITON_ENDPOINT)
    # Messages begin at 7_005, 10_005 (two), 13_005: the 3rd's prefix finished at 13_005.
    assert llm["ttft_ns"] == 7_005 - 2_000
    assert llm["tpot_ns"] == (13_005 - 7_005) // 3
    assert (llm["output_tokens"], llm["output_tokens_estimated"]) == (4, True)
    assert (llm["error"], llm["status_code"]) == (None, 200)
    AvroCodec(load_schema_dir(), InMemorySchemaRegistry()).encode(names.DERIVED_LLM.record, llm)


def test_a_failed_triton_stream_is_an_error_record() -> None:
    wire = Wire()
    wire.headers(REQUEST, 1, TRITON)
    wire.data(REQUEST, 1, model_infer_request("m"), end=True)
    wire.headers(RESPONSE, 1, [(":status", "200"), ("content-type", GRPC)])
    wire.headers(RESPONSE, 1, [("grpc-status", "14")], end=True)
    [span] = run(wire.calls)
    assert isinstance(span, LlmProtoSpan) and span.llm is not None
    assert span.llm.error == "grpc-status 14" and span.llm.outcome.failed


def test_triton_model_reads_field_one_and_refuses_garbage() -> None:
    assert triton_model(model_infer_request("abc")[5:]) == "abc"
    # Field 1 after other fields (a varint, a fixed64) still found.
    assert triton_model(b"\x10\x96\x01" + b"\x19" + b"\x00" * 8 + b"\x0a\x01x") == "x"
    for garbage in (b"", b"\xff" * 20, b"\x0a\x7f" + b"a", b"\x0f", b"\x08" * 200):
        assert triton_model(garbage) is None


def test_streams_that_are_no_llm_request_keep_no_body() -> None:
    wire = Wire()
    get = [(":method", "POST"), (":scheme", "http"), (":authority", "a"), (":path", "/upload")]
    wire.headers(REQUEST, 1, get)
    wire.data(REQUEST, 1, b"x" * 10_000)
    parser = Http2Parser()
    for side, data in wire.calls:
        parser.feed(side, data, 1, 1)
    assert parser.open_streams() == 1 and parser.buffered_bytes() == 0
    [span] = parser.close(5)
    assert not isinstance(span, LlmProtoSpan) or span.llm is None


def test_request_bodies_are_bounded_per_connection_and_the_cut_counted() -> None:
    wire = Wire()
    streams = range(1, 2 * (REQUEST_BODY_BUDGET // h2_llm.MAX_REQUEST_BODY_BYTES) + 2, 2)
    piece = b'{"model": "big", "messages": [' + b" " * (16_000 - 31)
    for sid in streams:
        wire.headers(REQUEST, sid, CHAT)
        for _ in range(h2_llm.MAX_REQUEST_BODY_BYTES // 16_000 + 1):
            wire.data(REQUEST, sid, piece)
    parser = Http2Parser()
    for side, data in wire.calls:
        parser.feed(side, data, 1, 1)
    assert parser.buffered_bytes() <= REQUEST_BODY_BUDGET
    assert parser.counters[h2_llm.REQUEST_BODIES_CUT] == len(streams)
    spans = parser.close(5)
    assert len(spans) == len(streams)
    for span in spans:  # the model is read from each kept prefix
        assert isinstance(span, LlmProtoSpan) and span.llm is not None
        assert span.llm.request_info is not None
        assert span.llm.request_info.model == ("big" if span is not spans[-1] else None)
        assert span.llm.error == "incomplete"


def custom_path_wire(events: list[bytes], content_type: str = "text/event-stream") -> Wire:
    wire = Wire()
    wire.headers(REQUEST, 1, [*CHAT[:3], (":path", "/my/gateway/talk")])
    wire.data(REQUEST, 1, b'{"model": "hidden"}', end=True)
    wire.headers(RESPONSE, 1, [(":status", "200"), ("content-type", content_type)])
    for i, event in enumerate(events):
        wire.data(RESPONSE, 1, event, end=i == len(events) - 1)
    return wire


def test_an_event_stream_on_a_path_no_api_names_is_read_as_an_openai_chat() -> None:
    wire = custom_path_wire([chunk("a"), chunk("b"), b"data: [DONE]\n\n"])
    times = [1_000, 1_100, 1_200, 2_000, 2_100, 3_000, 4_000, 6_000, 6_500]
    out = correlate(wire.calls, times)
    [llm] = [d for r, d in out if r == names.DERIVED_LLM.record]
    assert (llm["model"], llm["endpoint"], llm["path"]) == (
        "m-served", "chat.completions", "/my/gateway/talk",
    )  # fmt: skip
    assert (llm["ttft_ns"], llm["tpot_ns"], llm["output_tokens"]) == (4_005 - 2_000, 2_000, 2)


def test_an_event_stream_that_is_no_llm_gives_no_llm_record() -> None:
    events = [b"event: tick\ndata: 1\n\n", b"event: tick\ndata: 2\n\n"]
    wire = custom_path_wire(events)
    out = correlate(wire.calls, [1_000 * t for t in range(1, len(wire.calls) + 1)])
    assert [r for r, _ in out] == [names.DERIVED_SPAN.record]
    [span] = [d for _, d in out]
    assert span["status"] == "OK" and names.ATTR_GEN_AI_OPERATION not in span["attributes"]


def test_a_stream_whose_server_reports_an_error_is_an_error_span() -> None:
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    wire = chat_wire()
    wire.calls[6:] = []
    wire.data(RESPONSE, 1, chunk("x"))
    wire.data(RESPONSE, 1, error, end=True)
    out = correlate(wire.calls, [1_000 * t for t in range(1, len(wire.calls) + 1)])
    [span] = [d for r, d in out if r == names.DERIVED_SPAN.record]
    [llm] = [d for r, d in out if r == names.DERIVED_LLM.record]
    assert llm["error"] and span["status"] == "ERROR"
    assert span["attributes"][names.ATTR_ERROR_MESSAGE] == llm["error"]


def test_an_ndjson_stream_on_a_path_no_api_names_is_read_as_an_ollama_chat() -> None:
    line = {"model": "llama3", "message": {"role": "assistant", "content": "Hi"}, "done": False}
    last = {"model": "llama3", "message": {"role": "assistant", "content": ""}, "done": True}
    lines = [json.dumps(x).encode() + b"\n" for x in (line, line, {**last, "eval_count": 2})]
    wire = custom_path_wire(lines, "application/x-ndjson")
    out = correlate(wire.calls, [1_000 * t for t in range(1, len(wire.calls) + 1)])
    [llm] = [d for r, d in out if r == names.DERIVED_LLM.record]
    assert (llm["model"], llm["output_tokens"], llm["content_events"]) == ("llama3", 2, 2)
    assert llm["ttft_ns"] == 7_005 - 4_000 and llm["error"] is None


def test_a_request_body_is_let_go_when_the_request_ends() -> None:
    wire = chat_wire()
    parser = Http2Parser()
    for side, data in wire.calls[:5]:  # up to the request's last DATA
        parser.feed(side, data, 1, 1)
    assert parser.open_streams() == 1 and parser.buffered_bytes() == 0
    [span] = run(wire.calls[5:], parser)
    assert isinstance(span, LlmProtoSpan) and span.llm is not None
    assert span.llm.request_info is not None and span.llm.request_info.model == "llama-3"


# -- compressed answers (content-encoding) -----------------------------------------------------

EVENTS = [chunk("He"), chunk("llo"), chunk("!"), USAGE, b"data: [DONE]\n\n"]
JSON_ANSWER = json.dumps(
    {
        "model": "m-served",
        "choices": [{"message": {"role": "assistant", "content": "Hello!"}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3},
    }
).encode()


def gzip_chat_wire(streamed: bool, coding: str = "gzip") -> Wire:
    """A chat over h2c whose answer is gzip'd as a server streams it: each SSE event flushed
    (Z_SYNC_FLUSH), so it decodes as its DATA arrives; or one JSON body in two DATA frames."""
    wire = Wire()
    wire.headers(REQUEST, 1, CHAT)
    body = json.dumps({"model": "llama-3", "stream": streamed, "messages": []}).encode()
    wire.data(REQUEST, 1, body, end=True)
    kind = "text/event-stream" if streamed else "application/json"
    wire.headers(
        RESPONSE, 1, [(":status", "200"), ("content-type", kind), ("content-encoding", coding)]
    )
    squeeze = zlib.compressobj(wbits=31)  # gzip
    pieces = [squeeze.compress(e) + squeeze.flush(zlib.Z_SYNC_FLUSH) for e in EVENTS]
    if not streamed:
        whole = gzip.compress(JSON_ANSWER, mtime=0)
        pieces = [whole[:20], whole[20:]]
    else:
        pieces[-1] += squeeze.flush()
    for k, piece in enumerate(pieces):
        wire.data(RESPONSE, 1, piece, end=k == len(pieces) - 1)
    return wire


def llm_of(calls: list[tuple[Side, bytes]]) -> dict[str, Any]:
    """The derived.llm record of *calls*, a call every 1,000 ns."""
    out = correlate(calls, [1_000 * t for t in range(1, len(calls) + 1)])
    [llm] = [d for r, d in out if r == names.DERIVED_LLM.record]
    assert isinstance(llm, dict)
    return llm


def redacted(calls: list[tuple[Side, bytes]], keep_content: bool) -> list[tuple[Side, bytes]]:
    """The calls as the collector publishes them (its redaction, per direction)."""
    redactor = Redactor(keep_content)
    return [(side, redactor.redact("conn", side, data)) for side, data in calls]


def test_a_gzipped_streamed_answer_is_decoded_and_timed_by_its_data_calls() -> None:
    wire = gzip_chat_wire(streamed=True)
    times = [1_000, 1_100, 1_200, 2_000, 2_100, 5_000, 9_000, 12_000, 15_000, 15_500, 16_000]
    [llm] = [d for r, d in correlate(wire.calls, times) if r == names.DERIVED_LLM.record]
    assert llm["ttft_ns"] == 9_005 - 2_000 and llm["tpot_ns"] == (15_005 - 9_005) // 2
    assert (llm["output_tokens"], llm["input_tokens"], llm["content_events"]) == (3, 7, 3)
    assert llm["error"] is None and llm["model"] == "llama-3"


@pytest.mark.parametrize("streamed", [True, False], ids=["sse", "json"])
def test_with_keep_content_a_gzipped_answer_reads_its_tokens(streamed: bool) -> None:
    calls = redacted(gzip_chat_wire(streamed).calls, keep_content=True)
    llm = llm_of(calls)
    assert (llm["output_tokens"], llm["input_tokens"], llm["error"]) == (3, 7, None)
    assert llm["output_tokens_estimated"] is False


@pytest.mark.parametrize("streamed", [True, False], ids=["sse", "json"])
def test_a_gzipped_answer_masked_on_the_node_says_why_no_tokens_were_read(streamed: bool) -> None:
    wire = gzip_chat_wire(streamed)
    calls = redacted(wire.calls, keep_content=False)
    answer = b"".join(d for s, d in calls if s == RESPONSE)
    assert len(answer) == len(wire.bytes_of(RESPONSE)) and b"*" * 20 in answer
    llm = llm_of(calls)
    assert llm["error"] == content_encoding.MASKED
    assert (llm["content_events"], llm["ttft_ns"], llm["input_tokens"]) == (0, None, None)
    assert llm["output_tokens"] == 0
    assert llm["model"] == "llama-3" and llm["status_code"] == 200


def test_an_answer_in_a_coding_not_decoded_here_says_so() -> None:
    llm = llm_of(gzip_chat_wire(streamed=True, coding="br").calls)
    assert llm["error"] == "content-encoding br not decoded"
