"""The LLM APIs recognised in HTTP traffic, by request path: for each, the endpoint name the
derived.llm record carries, its OpenTelemetry GenAI operation and provider, the request-body
reader and the response reader. Pure.

conversation.py asks `api_for` once per request; a new API plugs in here with one `LlmApi`
and its own `<api>_stream.py`. Paths match by suffix (Gemini's by pattern), so gateway
prefixes count too. The OpenAI-compatible endpoints keep their endpoint name as the
operation, as before this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from zerotrace import names
from zerotrace_correlator import (
    anthropic_stream,
    gemini_stream,
    ollama_stream,
    openai_stream,
    tgi_stream,
)
from zerotrace_correlator.openai_stream import LlmOutcome, LlmRequestInfo


class LlmAnalyzer(Protocol):
    """A response reader, as conversation.py drives it (openai_stream.ResponseAnalyzer's
    surface): feed/gap as body pieces arrive, then finish once."""

    body_limit_hit: bool  # the non-streamed body passed MAX_JSON_BODY_BYTES
    errors_dropped: int  # server errors past MAX_STREAM_ERRORS

    @property
    def sse_truncated_events(self) -> int: ...
    def buffered_bytes(self) -> int: ...
    def feed(self, data: bytes, time_ns: int) -> None: ...
    def gap(self) -> None: ...
    def finish(self, time_ns: int, complete: bool, reason: str | None) -> LlmOutcome: ...


@dataclass(frozen=True)
class LlmApi:
    endpoint: str  # the derived.llm record's `endpoint`
    operation: str  # gen_ai.operation.name
    provider: str | None  # gen_ai.provider.name; None for OpenAI-compatible servers (any)
    # The request body (maybe cut at MAX_JSON_BODY_BYTES) and the request target.
    parse_request: Callable[[bytes, str], LlmRequestInfo]
    # endpoint, response status, Content-Type.
    analyzer: Callable[[str, int, str | None], LlmAnalyzer]


def _openai_request(body: bytes, target: str) -> LlmRequestInfo:
    return openai_stream.parse_request_body(body)


def _openai(endpoint: str) -> LlmApi:
    return LlmApi(endpoint, endpoint, None, _openai_request, openai_stream.ResponseAnalyzer)


_ANTHROPIC = LlmApi(
    anthropic_stream.ENDPOINT_MESSAGES,
    names.GEN_AI_OPERATION_CHAT,
    names.GEN_AI_PROVIDER_ANTHROPIC,
    _openai_request,  # model, stream and max_tokens are named as OpenAI names them
    anthropic_stream.AnthropicReader,
)
_GEMINI = {
    endpoint: LlmApi(
        endpoint,
        names.GEN_AI_OPERATION_GENERATE_CONTENT,
        names.GEN_AI_PROVIDER_GEMINI,
        gemini_stream.parse_request,
        gemini_stream.GeminiReader,
    )
    for endpoint in (gemini_stream.ENDPOINT_GENERATE, gemini_stream.ENDPOINT_STREAM)
}
_SUFFIXES = tuple(
    (suffix, api)
    for suffix, api in (
        ("/v1/chat/completions", _openai(openai_stream.ENDPOINT_CHAT)),
        ("/v1/completions", _openai(openai_stream.ENDPOINT_COMPLETIONS)),
        ("/v1/responses", _openai(openai_stream.ENDPOINT_RESPONSES)),
        (anthropic_stream.PATH_SUFFIX, _ANTHROPIC),
        (
            "/api/chat",
            LlmApi(
                ollama_stream.ENDPOINT_CHAT,
                names.GEN_AI_OPERATION_CHAT,
                names.GEN_AI_PROVIDER_OLLAMA,
                ollama_stream.parse_request,
                ollama_stream.OllamaReader,
            ),
        ),
        (
            "/api/generate",
            LlmApi(
                ollama_stream.ENDPOINT_GENERATE,
                names.GEN_AI_OPERATION_TEXT_COMPLETION,
                names.GEN_AI_PROVIDER_OLLAMA,
                ollama_stream.parse_request,
                ollama_stream.OllamaReader,
            ),
        ),
        *(
            (
                "/" + endpoint,
                LlmApi(
                    endpoint,
                    names.GEN_AI_OPERATION_TEXT_COMPLETION,
                    names.GEN_AI_PROVIDER_TGI,
                    tgi_stream.parse_request,
                    tgi_stream.TgiReader,
                ),
            )
            for endpoint in (tgi_stream.ENDPOINT_STREAM, tgi_stream.ENDPOINT_GENERATE)
        ),
    )
)


def api_for(method: str, target: str) -> LlmApi | None:
    """The LLM API a request line names, or None."""
    if method != "POST":
        return None
    path = target.split("?", 1)[0].rstrip("/")
    for suffix, api in _SUFFIXES:
        if path.endswith(suffix):
            return api
    match = gemini_stream.PATH_PATTERN.search(path)
    return None if match is None else _GEMINI[match.group(2)]
