"""What every non-OpenAI LLM response reader shares: the bounded body kept for a non-streamed
JSON answer, the stream framings (SSE, NDJSON) turned into JSON objects, the capped list of
server errors, and the LlmOutcome assembled at the end with the same error wording as
openai_stream's. Pure.

A reader (anthropic_stream, gemini_stream, ollama_stream, tgi_stream) subclasses
`LlmResponseReader` and fills in `_on_object` (one streamed JSON object) and `_on_body` (a
whole non-streamed JSON body), setting the outcome fields below as it goes. The caps are
openai_stream's, so one counter per limit covers every API.
"""

from __future__ import annotations

import json
from typing import Any

from zerotrace_correlator.llm_metrics import ContentTimeline
from zerotrace_correlator.ndjson import NdjsonDecoder
from zerotrace_correlator.openai_stream import (
    ERROR_CAPTURE_TRUNCATED,
    MAX_ERROR_CHARS,
    MAX_JSON_BODY_BYTES,
    MAX_STREAM_ERRORS,
    LlmOutcome,
)
from zerotrace_correlator.sse import SseDecoder

MEDIA_SSE = "text/event-stream"
MEDIA_NDJSON = "application/x-ndjson"
_JSON = json.JSONDecoder()


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


def json_value(data: str | bytes) -> Any:
    """The one JSON value `data` holds, or None (noise, a cut event, hostile nesting)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = text.strip()
    try:
        value, end = _JSON.raw_decode(text)
    except (ValueError, RecursionError):
        return None
    return value if end == len(text) else None


class LlmResponseReader:
    """Follows one response body: feed/gap as pieces arrive, then finish once. The same
    surface as openai_stream.ResponseAnalyzer, which conversation.py drives."""

    def __init__(self, endpoint: str, status: int, content_type: str | None) -> None:
        self.endpoint = endpoint
        self.status = status
        media = media_type(content_type)
        self._sse = SseDecoder() if media == MEDIA_SSE else None
        self._ndjson = NdjsonDecoder() if media == MEDIA_NDJSON else None
        self.stream = self._sse is not None or self._ndjson is not None
        self.timeline = ContentTimeline()
        self._body = bytearray()
        self.body_limit_hit = False
        self._gap = False
        self._errors: list[str] = []
        self.errors_dropped = 0  # server errors past MAX_STREAM_ERRORS: counted, not kept
        # The outcome, set by the subclass as the response says it.
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.done = False  # the stream's final event (or line) was seen

    def buffered_bytes(self) -> int:
        held = len(self._body)
        held += self._sse.buffered_bytes() if self._sse else 0
        return held + (self._ndjson.buffered_bytes() if self._ndjson else 0)

    @property
    def sse_truncated_events(self) -> int:
        """Stream events (SSE events, NDJSON lines) cut at their size limit."""
        cut = self._sse.truncated_events if self._sse else 0
        return cut + (self._ndjson.truncated_lines if self._ndjson else 0)

    def feed(self, data: bytes, time_ns: int) -> None:
        if self._sse is not None:
            for event in self._sse.feed(data, time_ns):
                obj = json_value(event.data)
                if isinstance(obj, dict):
                    self._on_object(obj, event.event, event.time_ns)
        elif self._ndjson is not None:
            for line in self._ndjson.feed(data, time_ns):
                obj = json_value(line.data)
                if isinstance(obj, dict):
                    self._on_object(obj, "", line.time_ns)
        else:
            self._keep_body(data)

    def gap(self) -> None:
        self._gap = True
        if self._sse is not None:
            self._sse.resync()
        if self._ndjson is not None:
            self._ndjson.resync()

    def finish(self, time_ns: int, complete: bool, reason: str | None) -> LlmOutcome:
        """time_ns: the time of the body's last byte; complete: the body ended as framed."""
        if not self.stream and complete:
            self._read_body(time_ns)
        if self.errors_dropped:  # said after the server errors kept, before the rest
            self._errors.append(f"{self.errors_dropped} more server errors")
        if self.status >= 400 and not any(e.startswith("http ") for e in self._errors):
            self._errors.insert(0, f"http {self.status}")
        failed = self.status >= 400 or bool(self._errors)
        if not complete and not self.done:
            what = "stream aborted" if self.stream else "response incomplete"
            self._errors.append(f"{what}: {reason or 'connection closed'}")
        elif complete and self.stream and not self.done and self.finish_reason is None:
            self._errors.append("stream ended without a final event")
        if self._gap:
            self._errors.append(ERROR_CAPTURE_TRUNCATED)
        return LlmOutcome(
            stream=self.stream,
            timeline=self.timeline,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            finish_reason=self.finish_reason,
            model=self.model,
            done=self.done,
            error="; ".join(self._errors) or None,
            failed=failed,
        )

    # -- for the subclasses ---------------------------------------------------------------

    def _on_object(self, obj: dict[str, Any], event: str, time_ns: int) -> None:
        """One streamed JSON object; `event` is the SSE event name ("" when none)."""
        raise NotImplementedError

    def _on_body(self, body: Any, time_ns: int) -> None:
        """A whole non-streamed JSON body of a successful (< 400) response."""
        raise NotImplementedError

    def _server_error(self, message: str, prefix: str = "stream error") -> None:
        if len(self._errors) >= MAX_STREAM_ERRORS:
            self.errors_dropped += 1
            return
        self._errors.append(f"{prefix}: {message[:MAX_ERROR_CHARS]}")

    def _keep_body(self, data: bytes) -> None:
        room = MAX_JSON_BODY_BYTES - len(self._body)
        if len(data) > room:
            self.body_limit_hit = True
        self._body += data[: max(0, room)]

    def _read_body(self, time_ns: int) -> None:
        body = None if self.body_limit_hit else json_value(bytes(self._body))
        self._body.clear()
        if body is None:
            return
        if self.status >= 400:
            self._server_error(error_message(body), f"http {self.status}")
            return
        self._on_body(body, time_ns)


def error_message(body: Any) -> str:
    """The message of an error body: {"error": {"message": ...}}, {"error": "..."}, or the
    same as the first item of a list (Gemini's streamed array)."""
    if isinstance(body, list) and body:
        body = body[0]
    if not isinstance(body, dict):
        return "error"
    error = body.get("error")
    if isinstance(error, dict):
        return as_str(error.get("message")) or as_str(error.get("type")) or "error"
    return as_str(error) or as_str(body.get("message")) or "error"


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
