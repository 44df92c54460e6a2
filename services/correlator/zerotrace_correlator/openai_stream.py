"""What an OpenAI-compatible exchange says: the endpoint, the request's model and options,
and from the response (SSE stream or JSON body) the content events, usage, finish reason and
errors. Pure; fed body pieces as they arrive, so a stream is never held whole.

Shapes understood (OpenAI API reference; vLLM, SGLang, TGI, llama.cpp and Ollama follow it):
- chat.completions: chunks with choices[].delta; content is non-empty `content`, or
  `reasoning_content`/`reasoning` (reasoning models), or tool-call arguments;
- completions: choices[].text;
- responses: typed events; content is a non-empty `response.output_text.delta` (and the
  reasoning and function-call argument deltas); `response.completed`/`failed`/`incomplete`
  end the stream and carry usage;
- usage (prompt/completion or input/output tokens, cached in *_tokens_details) may come in every
  chunk or only the last: the last one seen wins; `data: [DONE]` ends chat/completions streams.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from zerotrace_correlator.llm_metrics import ContentTimeline
from zerotrace_correlator.sse import SseDecoder, SseEvent

ENDPOINT_CHAT = "chat.completions"
ENDPOINT_COMPLETIONS = "completions"
ENDPOINT_RESPONSES = "responses"
# A request or non-streamed response body is kept this far for its JSON. Chat requests with
# long histories reach hundreds of KiB; past 1 MiB (images inlined as base64) we keep the
# prefix and read the model from it with a pattern instead.
MAX_JSON_BODY_BYTES = 1024 * 1024
# Errors the server reported in one response (stream `error` events, failed responses), kept
# for the exchange's `error` field; past it they are counted in `errors_dropped`. A peer may
# send error events without end on one long-lived stream: the fuzz run found the list, held
# for the whole response, grew by every one (1.2 MiB after a million inputs). Eight say what
# went wrong; each is cut to MAX_ERROR_CHARS, since the message is the peer's own text and an
# SSE event may carry a megabyte of it.
MAX_STREAM_ERRORS = 8
MAX_ERROR_CHARS = 256
ERROR_CAPTURE_TRUNCATED = "capture truncated"

_RESPONSES_CONTENT = {
    "response.output_text.delta",
    "response.reasoning_text.delta",
    "response.function_call_arguments.delta",
}
_RESPONSES_FINAL = {"response.completed", "response.incomplete", "response.failed"}
_MODEL_PATTERN = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.){1,256})"')
_STREAM_PATTERN = re.compile(rb'"stream"\s*:\s*(true|false)')
_JSON = json.JSONDecoder()


@dataclass(frozen=True)
class LlmRequestInfo:
    model: str | None
    stream: bool | None
    include_usage: bool | None
    max_tokens: int | None


def parse_request_body(body: bytes) -> LlmRequestInfo:
    """Reads the request's JSON; from a body cut short (capture or size limits) it still finds
    the model and stream flag by pattern, when they came before the cut."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):  # ~1,000 nested brackets: hostile, not JSON we read
        obj = None
    if not isinstance(obj, dict):
        model = _MODEL_PATTERN.search(body)
        stream = _STREAM_PATTERN.search(body)
        return LlmRequestInfo(
            model=_unescape(model.group(1)) if model else None,
            stream=None if stream is None else stream.group(1) == b"true",
            include_usage=None,
            max_tokens=None,
        )
    options = obj.get("stream_options")
    include = options.get("include_usage") if isinstance(options, dict) else None
    limit = next(
        (obj[k] for k in ("max_tokens", "max_completion_tokens", "max_output_tokens") if k in obj),
        None,
    )
    return LlmRequestInfo(
        model=_str(obj.get("model")),
        stream=obj.get("stream") if isinstance(obj.get("stream"), bool) else None,
        include_usage=include if isinstance(include, bool) else None,
        max_tokens=limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
    )


@dataclass(frozen=True)
class LlmOutcome:
    stream: bool
    timeline: ContentTimeline
    input_tokens: int | None
    output_tokens: int | None  # from usage; None when the response reported none
    cached_tokens: int | None
    finish_reason: str | None
    model: str | None  # as the response names it
    done: bool  # [DONE] or a final Responses event was seen
    error: str | None  # why the request failed or its metrics are incomplete
    failed: bool  # the server reported an error (HTTP status or in the stream)


class ResponseAnalyzer:
    """Follows one response body. feed/gap as pieces arrive, then finish once."""

    def __init__(self, endpoint: str, status: int, content_type: str | None) -> None:
        self.endpoint = endpoint
        self.status = status
        self.stream = (content_type or "").split(";")[0].strip().lower() == "text/event-stream"
        self.timeline = ContentTimeline()
        self._sse = SseDecoder() if self.stream else None
        self._body = bytearray()
        self.body_limit_hit = False
        self._gap = False
        self._usage: dict[str, Any] | None = None
        self._finish: str | None = None
        self._model: str | None = None
        self._done = False
        self._errors: list[str] = []
        self._failed = False
        self.errors_dropped = 0  # server errors past MAX_STREAM_ERRORS: counted, not kept

    def buffered_bytes(self) -> int:
        return len(self._body) + (self._sse.buffered_bytes() if self._sse else 0)

    @property
    def sse_truncated_events(self) -> int:
        return self._sse.truncated_events if self._sse else 0

    def feed(self, data: bytes, time_ns: int) -> None:
        if self._sse is not None:
            for event in self._sse.feed(data, time_ns):
                self._on_event(event)
            return
        room = MAX_JSON_BODY_BYTES - len(self._body)
        if len(data) > room:
            self.body_limit_hit = True
        self._body += data[: max(0, room)]

    def gap(self) -> None:
        self._gap = True
        if self._sse is not None:
            self._sse.resync()

    def finish(self, time_ns: int, complete: bool, reason: str | None) -> LlmOutcome:
        """time_ns: the time of the body's last byte; complete: the body ended as framed."""
        if self._sse is None and complete:
            self._on_body(time_ns)
        if self.errors_dropped:  # said after the server errors kept, before the rest
            self._errors.append(f"{self.errors_dropped} more server errors")
        if self.status >= 400 and not any(e.startswith("http ") for e in self._errors):
            self._errors.insert(0, f"http {self.status}")
        self._failed = self.status >= 400 or bool(self._errors)
        if not complete and not self._done:
            what = "stream aborted" if self.stream else "response incomplete"
            self._errors.append(f"{what}: {reason or 'connection closed'}")
        elif complete and self.stream and not self._done and self._finish is None:
            self._errors.append("stream ended without a final event")
        if self._gap:
            self._errors.append(ERROR_CAPTURE_TRUNCATED)
        usage = self._usage or {}
        prompt_details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
        return LlmOutcome(
            stream=self.stream,
            timeline=self.timeline,
            input_tokens=_int(usage.get("prompt_tokens", usage.get("input_tokens"))),
            output_tokens=_int(usage.get("completion_tokens", usage.get("output_tokens"))),
            cached_tokens=_int(prompt_details.get("cached_tokens"))
            if isinstance(prompt_details, dict)
            else None,
            finish_reason=self._finish,
            model=self._model,
            done=self._done,
            error="; ".join(self._errors) or None,
            failed=self._failed,
        )

    # -- streams --------------------------------------------------------------------------

    def _on_event(self, event: SseEvent) -> None:
        data = event.data.strip()
        if data == "[DONE]":
            self._done = True
            return
        try:
            # json.loads without its two wrapper calls (this runs once per token); stripped
            # already, so only what follows the value is left to check.
            obj, end = _JSON.raw_decode(data)
        except (ValueError, RecursionError):
            return  # keep-alive noise, an event cut at the size limit, or hostile nesting
        if end != len(data) or not isinstance(obj, dict):
            return
        if self.endpoint == ENDPOINT_RESPONSES:
            self._on_responses_event(obj, event.event, event.time_ns)
        elif self._on_choices(obj, "delta"):
            self.timeline.add(event.time_ns)

    def _on_choices(self, obj: dict[str, Any], key: str) -> bool:
        """Chat and completions objects (chunks, or whole bodies with key="message")."""
        self._take_common(obj)
        content = False
        choices = obj.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            if self.endpoint == ENDPOINT_CHAT:
                content |= _has_chat_output(choice.get(key))
            else:
                content |= bool(_str(choice.get("text")))
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                self._finish = finish
        return content

    def _on_responses_event(self, obj: dict[str, Any], name: str, time_ns: int) -> None:
        kind = _str(obj.get("type")) or name
        if kind in _RESPONSES_CONTENT and _str(obj.get("delta")):
            self.timeline.add(time_ns)
        elif kind == "error":
            self._server_error(obj)
            self._done = True
        response = obj.get("response")
        if isinstance(response, dict):
            self._on_response_object(response)
        if kind in _RESPONSES_FINAL:
            self._done = True

    def _on_response_object(self, response: dict[str, Any]) -> None:
        """A Responses API `response` object: in stream events, or a whole non-stream body."""
        self._model = _str(response.get("model")) or self._model
        if isinstance(response.get("usage"), dict):
            self._usage = response["usage"]
        status = _str(response.get("status"))
        details = response.get("incomplete_details")
        if status == "incomplete" and isinstance(details, dict):
            self._finish = _str(details.get("reason")) or status
        elif status in ("completed", "failed", "cancelled"):
            self._finish = status
        if isinstance(response.get("error"), dict):
            self._server_error(response)

    def _take_common(self, obj: dict[str, Any]) -> None:
        model, usage = obj.get("model"), obj.get("usage")
        if isinstance(model, str) and model:
            self._model = model
        if isinstance(usage, dict):
            self._usage = usage
        if obj.get("error") or obj.get("object") == "error":
            self._server_error(obj)

    def _server_error(self, obj: dict[str, Any], prefix: str = "stream error") -> None:
        if len(self._errors) >= MAX_STREAM_ERRORS:
            self.errors_dropped += 1
            return
        self._errors.append(f"{prefix}: {_message(obj)[:MAX_ERROR_CHARS]}")

    # -- whole bodies ---------------------------------------------------------------------

    def _on_body(self, time_ns: int) -> None:
        try:
            obj = json.loads(self._body) if not self.body_limit_hit else None
        except (ValueError, RecursionError):
            obj = None
        self._body.clear()
        if not isinstance(obj, dict):
            return
        if self.status >= 400:
            self._server_error(obj, f"http {self.status}")
            return
        if self.endpoint == ENDPOINT_RESPONSES:
            self._on_response_object(obj)
            content = _responses_body_has_output(obj)
        else:
            content = self._on_choices(obj, "message")
        if content:
            self.timeline.add(time_ns)  # the whole answer arrives with the body's last byte


def _has_chat_output(delta: Any) -> bool:
    if not isinstance(delta, dict):
        return False
    # Spelled out, not any() over the keys or _str: this runs once per token of every stream.
    content = delta.get("content")
    if isinstance(content, str) and content:
        return True
    if _str(delta.get("reasoning_content")) or _str(delta.get("reasoning")):
        return True
    calls = delta.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and _str(function.get("arguments")):
            return True
    return False


def _responses_body_has_output(obj: dict[str, Any]) -> bool:
    output = obj.get("output")
    for item in output if isinstance(output, list) else ():
        parts = item.get("content") if isinstance(item, dict) else None
        for part in parts if isinstance(parts, list) else ():
            # Unless content is captured the collector masks the text to the same length,
            # keeping the keys (redaction.py); collectors before masked the keys too: a part
            # all of whose keys are `*` held text if a value is non-empty.
            if isinstance(part, dict) and (_str(part.get("text")) or _all_masked(part)):
                return True
        if isinstance(item, dict) and _str(item.get("arguments")):
            return True
    return False


def _all_masked(part: dict[str, Any]) -> bool:
    keys = part.keys()
    return bool(part) and all(k and k.count("*") == len(k) for k in keys) and any(part.values())


def _message(obj: dict[str, Any]) -> str:
    error = obj.get("error")
    if isinstance(error, dict):
        return _str(error.get("message")) or _str(error.get("code")) or "error"
    return _str(error) or _str(obj.get("message")) or "error"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _unescape(raw: bytes) -> str:
    try:
        value = json.loads(b'"' + raw + b'"')
    except ValueError:
        return raw.decode("utf-8", "replace")
    return value if isinstance(value, str) else raw.decode("utf-8", "replace")
