"""LLM analysis of one HTTP/2 stream: the request's headers and body, the response's headers
and DATA with the time of each socket call that carried it, in; the same `LlmOutcome` and
derived.llm record the HTTP/1.1 path gives (conversation.py, exchange_records.py), out. Pure.

http2.py starts a `StreamLlm` when a stream's request headers name an LLM API:
- an HTTP API that llm_apis.api_for recognises (POST to /v1/chat/completions, /v1/messages,
  Gemini's :streamGenerateContent, Ollama's /api/chat, TGI's /generate_stream, ...): the
  request body is kept (bounded, below) for its JSON, and the response's DATA goes, as it
  comes, to the API's own reader (openai_stream.ResponseAnalyzer and the others), which keeps
  only what it needs (an SSE event being read, a non-streamed body up to MAX_JSON_BODY_BYTES);
- Triton's gRPC streaming inference (TRITON_STREAM_PATH, inference.GRPCInferenceService/
  ModelStreamInfer): each response message is a token event, timed by the call that carried
  its 5-byte gRPC prefix; output tokens are the response messages (estimated); the model is
  field 1 (model_name) of the first ModelInferRequest, read by a bounded protobuf walk.
- a POST on a path no API names whose response is text/event-stream (read as an OpenAI-
  compatible chat) or application/x-ndjson (as Ollama's chat), from its response headers on
  (its request body was not kept: the model is the response's): its analysis counts only when
  the response proved to be an LLM's (a content event or a model named), `LlmResult.guessed`.
  application/json answers on other paths are not guessed at: every JSON API would be read.
Every other stream's body passes through http2.py uncopied.

A compressed response (content-encoding gzip, deflate, ...) is decoded before its reader sees
it, bounded, as for HTTP/1.1 (content_encoding.decoding); one the collector masked whole
(without --keep-content) or in a coding not decoded here gives no tokens, and its error says
why.

Times as for HTTP/1.1: start = the request HEADERS' call, first byte = the response HEADERS'
call, token events = the DATA calls. TTFT and TPOT then follow llm_metrics.compute_timings.

Bounded: a request body keeps at most MAX_REQUEST_BODY_BYTES per stream and, over all the
streams of a connection open at once, the parser's REQUEST_BODY_BUDGET (http2.py): past either,
the prefix is read (the model found by pattern when it came first) and the cut counted
(REQUEST_BODIES_CUT). A Triton request keeps MAX_GRPC_REQUEST_BYTES of its first message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerotrace import names
from zerotrace.service_identity import record_service
from zerotrace_correlator.content_encoding import decoding
from zerotrace_correlator.llm_apis import LlmAnalyzer, LlmApi, api_for
from zerotrace_correlator.llm_metrics import ContentTimeline, compute_timings
from zerotrace_correlator.openai_stream import MAX_JSON_BODY_BYTES, LlmOutcome, LlmRequestInfo
from zerotrace_correlator.protocol_span import ProtoSpan

TRITON_STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"
TRITON_ENDPOINT = TRITON_STREAM_PATH[1:]
MAX_REQUEST_BODY_BYTES = MAX_JSON_BODY_BYTES
# The first bytes of a Triton request message: model_name is field 1, written first.
MAX_GRPC_REQUEST_BYTES = 4096
_MAX_PROTO_FIELDS = 64  # fields walked to find model_name

# Counter names.
REQUEST_BODIES_CUT = "h2_llm_request_bodies_cut"  # past MAX_REQUEST_BODY_BYTES or the budget
SSE_EVENTS_CUT = "h2_llm_sse_events_cut"  # the readers' own event limit
RESPONSE_BODIES_CUT = "h2_llm_response_bodies_cut"  # non-streamed body past its limit
ITL_SAMPLES_DROPPED = "h2_llm_itl_samples_dropped"
STREAM_ERRORS_DROPPED = "h2_llm_stream_errors_dropped"


@dataclass(frozen=True)
class LlmResult:
    """What a stream's LLM analysis found, for the derived.llm record."""

    endpoint: str
    operation: str
    provider: str | None
    path: str
    request_info: LlmRequestInfo | None
    outcome: LlmOutcome
    status_code: int | None
    response_start_ns: int | None
    error: str | None
    guessed: bool = False  # the API was guessed from the response's content-type

    @property
    def counts(self) -> bool:
        """A guessed stream is an LLM's only when its response read as one."""
        llm = self.outcome
        return not self.guessed or bool(llm.model or llm.timeline.count or llm.output_tokens)


@dataclass(frozen=True)
class LlmProtoSpan(ProtoSpan):
    """An HTTP/2 or gRPC span that carried an LLM request."""

    llm: LlmResult | None = None


def triton_model(message: bytes) -> str | None:
    """model_name (field 1, length-delimited) of a ModelInferRequest's first bytes, or None
    when it is not among the first fields or the bytes are not protobuf."""
    at, seen = 0, 0
    while at < len(message) and seen < _MAX_PROTO_FIELDS:
        key, at = _varint(message, at)
        if key is None:
            return None
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, at = _varint(message, at)
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == 2:
            size, at = _varint(message, at)
            if size is None:
                return None
            if number == 1:
                if at + size > len(message):
                    return None
                return message[at : at + size].decode("utf-8", "replace")
            at += size
        else:
            return None
        seen += 1
    return None


def _varint(data: bytes, at: int) -> tuple[int | None, int]:
    value = shift = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
    return None, len(data) + 1


@dataclass
class StreamLlm:
    """One HTTP/2 stream's LLM analysis, fed as its frames are read."""

    path: str
    api: LlmApi | None  # None: Triton's ModelStreamInfer
    counters: dict[str, int]
    body: bytearray = field(default_factory=bytearray)
    body_cut: bool = False
    status: int | None = None
    response_start_ns: int | None = None
    grpc_status: str = ""
    analyzer: LlmAnalyzer | None = None
    timeline: ContentTimeline = field(default_factory=ContentTimeline)
    # A gRPC response's message framing: the prefix read so far, the bytes still due.
    _prefix: bytearray = field(default_factory=bytearray)
    _left: int = 0
    _request_limit: int = MAX_REQUEST_BODY_BYTES
    guessed: bool = False
    request_info: LlmRequestInfo | None = None  # read at the request's end

    @classmethod
    def start(cls, method: str, path: str, counters: dict[str, int]) -> StreamLlm | None:
        """The analysis of a stream whose request headers name an LLM API, or None."""
        if path.split("?", 1)[0] == TRITON_STREAM_PATH:
            return cls(path, None, counters, _request_limit=MAX_GRPC_REQUEST_BYTES)
        api = api_for(method, path)
        return None if api is None else cls(path, api, counters)

    @classmethod
    def guess(
        cls, method: str, path: str, content_type: str, counters: dict[str, int]
    ) -> StreamLlm | None:
        """The analysis of a stream no API names, from its response's content-type, or None."""
        kind = content_type.split(";", 1)[0].strip().lower()
        like = _GUESSES.get(kind) if method == "POST" else None
        api = None if like is None else api_for("POST", like)
        return None if api is None else cls(path, api, counters, guessed=True)

    def buffered_bytes(self) -> int:
        held = len(self.body) + len(self._prefix)
        return held + (self.analyzer.buffered_bytes() if self.analyzer is not None else 0)

    def request_data(self, data: bytes, room: int) -> int:
        """A piece of the request body; room: what the connection's budget has left. Returns
        the bytes kept."""
        if self.request_info is not None:  # read already (trailers or a protocol slip)
            return 0
        limit = min(self._request_limit - len(self.body), room)
        if len(data) > limit and not self.body_cut:
            self.body_cut = True
            if self.api is not None:
                self._count(REQUEST_BODIES_CUT)
        take = max(0, min(limit, len(data)))
        self.body += data[:take]
        return take

    def request_end(self) -> int:
        """The request body is whole: read it now, so that it is not held while the answer
        streams. Returns the bytes let go."""
        held = len(self.body)
        if self.request_info is None:
            body = bytes(self.body)
            if self.api is not None:
                self.request_info = self.api.parse_request(body, self.path)
            else:
                model = triton_model(body[5:]) if len(body) > 5 else None
                self.request_info = LlmRequestInfo(model, True, None, None)
        self.body = bytearray()
        return held

    def response_head(
        self, status: str, content_type: str, time_ns: int, content_encoding: str = ""
    ) -> None:
        """The final response's headers; *content_encoding* "" when absent (or unknown)."""
        if self.response_start_ns is not None:
            return
        self.response_start_ns = time_ns
        self.status = int(status) if status.isdigit() and len(status) < 4 else None
        if self.api is not None:
            self.analyzer = decoding(  # a compressed body decoded first, bounded
                self.api.analyzer(self.api.endpoint, self.status or 0, content_type or None),
                content_encoding or None,
            )

    def response_data(self, data: bytes, time_ns: int) -> None:
        if self.analyzer is not None:
            hit = self.analyzer.body_limit_hit
            self.analyzer.feed(data, time_ns)
            if self.analyzer.body_limit_hit and not hit:
                self._count(RESPONSE_BODIES_CUT)
            return
        if self.api is not None:
            return
        at = 0
        while at < len(data):  # Triton: a token event per response message
            if self._left:
                take = min(self._left, len(data) - at)
                self._left -= take
                at += take
                continue
            take = min(5 - len(self._prefix), len(data) - at)
            self._prefix += data[at : at + take]
            at += take
            if len(self._prefix) == 5:
                self.timeline.add(time_ns)
                self._left = int.from_bytes(self._prefix[1:5], "big")
                self._prefix.clear()

    def finish(self, end_ns: int, complete: bool, reason: str | None) -> LlmResult:
        self.request_end()
        info = self.request_info
        assert info is not None
        if self.api is None:
            return self._triton(info, complete, reason)
        if self.analyzer is None:  # no response headers: nothing to read
            outcome = LlmOutcome(
                bool(info.stream), ContentTimeline(), None, None, None, None, None,
                False, reason or "no response", False,
            )  # fmt: skip
        else:
            outcome = self.analyzer.finish(end_ns, complete, reason)
            self._count(SSE_EVENTS_CUT, self.analyzer.sse_truncated_events)
            self._count(STREAM_ERRORS_DROPPED, self.analyzer.errors_dropped)
        self._count(ITL_SAMPLES_DROPPED, outcome.timeline.samples_dropped)
        error = outcome.error or (None if complete or outcome.done else reason or "incomplete")
        return LlmResult(
            self.api.endpoint, self.api.operation, self.api.provider, self.path, info,
            outcome, self.status, self.response_start_ns, error, self.guessed,
        )  # fmt: skip

    def _triton(self, info: LlmRequestInfo, complete: bool, reason: str | None) -> LlmResult:
        model = info.model
        ok = complete and self.grpc_status == "0"
        error = None
        if not complete:
            error = reason or "incomplete"
        elif self.grpc_status != "0":
            error = f"grpc-status {self.grpc_status or 'missing'}"
        self._count(ITL_SAMPLES_DROPPED, self.timeline.samples_dropped)
        outcome = LlmOutcome(
            True, self.timeline, None, None, None, None, model, ok, error,
            complete and not ok,
        )  # fmt: skip
        return LlmResult(
            TRITON_ENDPOINT, names.GEN_AI_OPERATION_TEXT_COMPLETION, None, self.path, info,
            outcome, self.status, self.response_start_ns, error,
        )  # fmt: skip

    def _count(self, name: str, by: int = 1) -> None:
        if by:
            self.counters[name] = self.counters.get(name, 0) + by


UNKNOWN_MODEL = "unknown"
# Response content-types read on paths no API names, and the path of the API they are read as.
_GUESSES = {"text/event-stream": "/v1/chat/completions", "application/x-ndjson": "/api/chat"}


def span_attributes(result: LlmResult) -> dict[str, str]:
    """The gen_ai attributes an LLM request's span carries (as exchange_records.http_span's)."""
    out = {names.ATTR_GEN_AI_OPERATION: result.operation}
    if result.provider is not None:
        out[names.ATTR_GEN_AI_PROVIDER] = result.provider
    info, llm = result.request_info, result.outcome
    if info is not None and info.model:
        out[names.ATTR_GEN_AI_REQUEST_MODEL] = info.model
    if llm.model:
        out[names.ATTR_GEN_AI_RESPONSE_MODEL] = llm.model
    if llm.input_tokens is not None:
        out[names.ATTR_GEN_AI_INPUT_TOKENS] = str(llm.input_tokens)
    if llm.output_tokens is not None:
        out[names.ATTR_GEN_AI_OUTPUT_TOKENS] = str(llm.output_tokens)
    if llm.finish_reason:
        out[names.ATTR_GEN_AI_FINISH_REASONS] = llm.finish_reason
    return out


def llm_record(
    span: ProtoSpan, span_id: str, origin: dict[str, Any] | Any, observation_point: str
) -> dict[str, Any] | None:
    """The derived.llm record of an HTTP/2 or gRPC span that carried an LLM request (its id
    the span's, as for HTTP/1.1), or None for any other span."""
    if not isinstance(span, LlmProtoSpan) or span.llm is None or not span.llm.counts:
        return None
    result = span.llm
    info, llm = result.request_info, result.outcome
    timings = compute_timings(
        span.start_ns, result.response_start_ns, span.end_ns, llm.timeline, llm.output_tokens
    )
    model = (info.model if info else None) or llm.model or UNKNOWN_MODEL
    return {
        "request_id": span_id,
        "span_id": span_id,
        "node_id": str(origin.get("node_id", "")),
        "service": record_service(origin),
        "observation_point": observation_point,
        "model": model,
        "endpoint": result.endpoint,
        "stream": llm.stream,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "ttft_ns": timings.ttft_ns,
        "tpot_ns": timings.tpot_ns,
        "input_tokens": llm.input_tokens,
        "output_tokens": timings.output_tokens,
        "output_tokens_estimated": timings.output_tokens_estimated,
        "finish_reason": llm.finish_reason,
        "error": result.error,
        "cached_tokens": llm.cached_tokens,
        "itl_p50_ns": timings.itl_p50_ns,
        "itl_p99_ns": timings.itl_p99_ns,
        "itl_max_ns": timings.itl_max_ns,
        "tokens_per_s": timings.tokens_per_s,
        "status_code": result.status_code,
        "path": result.path.split("?", 1)[0],
        "pid": None if observation_point == "NETWORK" else int(origin.get("pid", 0)),
        "first_byte_ns": timings.first_byte_ns,
        "content_events": timings.content_events,
    }
