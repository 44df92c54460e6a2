"""What a Google Gemini exchange (POST .../models/{model}:generateContent or
:streamGenerateContent) says. Pure.

Shapes understood (Gemini API reference, "Generating content"; Vertex AI's paths end the same):
- the model is in the path; the request body's `generationConfig.maxOutputTokens` is the limit;
- :streamGenerateContent with `?alt=sse` answers text/event-stream, one GenerateContentResponse
  per event; without it, one JSON array whose elements arrive as they are generated
  (`[{...}\\r\\n,{...}\\r\\n]`), split here by `JsonArraySplitter`;
- a response: `candidates[].content.parts[]` (content when a part has non-empty `text`, thought
  parts included, or a `functionCall`), `candidates[].finishReason`, `usageMetadata`
  (promptTokenCount, candidatesTokenCount, thoughtsTokenCount, cachedContentTokenCount: each
  chunk's is the running total, so the last wins), `modelVersion`, and
  `promptFeedback.blockReason` when the prompt was refused;
- an error: {"error": {"code", "message", "status"}} (in a list on the array form).

Output tokens are candidatesTokenCount plus thoughtsTokenCount: thinking is generated (and
billed) output, and its parts are content events too. A stream has no end marker: the first
finishReason (or the array's closing bracket) ends it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zerotrace_correlator.llm_response import (
    MEDIA_SSE,
    LlmResponseReader,
    as_int,
    as_str,
    error_message,
    json_value,
    media_type,
)
from zerotrace_correlator.openai_stream import LlmRequestInfo

ENDPOINT_GENERATE = "generateContent"
ENDPOINT_STREAM = "streamGenerateContent"
PATH_PATTERN = re.compile(r"/models/([^/:]{1,256}):(generateContent|streamGenerateContent)$")
# One array element is kept up to this size: Gemini's chunks are a few KiB (the last repeats
# nothing, unlike OpenAI's Responses API); 1 MiB leaves room for inline data.
MAX_ELEMENT_BYTES = 1024 * 1024

_IN_STRING = re.compile(rb'["\\]')
_OUTSIDE = re.compile(rb'[\[\]{}"]')


def parse_request(body: bytes, target: str) -> LlmRequestInfo:
    path = target.split("?", 1)[0]
    match = PATH_PATTERN.search(path)
    value = json_value(body)
    config = value.get("generationConfig") if isinstance(value, dict) else None
    limit = as_int(config.get("maxOutputTokens")) if isinstance(config, dict) else None
    return LlmRequestInfo(
        model=match.group(1) if match else None,
        stream=None if match is None else match.group(2) == ENDPOINT_STREAM,
        include_usage=None,
        max_tokens=limit,
    )


@dataclass(slots=True)
class ArrayElement:
    data: bytes
    time_ns: int
    truncated: bool


class JsonArraySplitter:
    """The top-level elements of one JSON array as their closing brackets arrive. Tracks only
    bracket depth and strings (with their escapes), so no element is parsed twice; depth is a
    counter, so hostile nesting costs no recursion here (the element's parse catches it)."""

    def __init__(self, max_element_bytes: int = MAX_ELEMENT_BYTES) -> None:
        self._max = max_element_bytes
        self._depth = 0
        self._in_string = False
        self._escape = False  # the previous piece ended in a backslash inside a string
        self._element = bytearray()
        self._truncated = False
        self.closed = False  # the array's closing bracket was seen
        self.truncated_elements = 0

    def buffered_bytes(self) -> int:
        return len(self._element)

    def feed(self, data: bytes, time_ns: int) -> list[ArrayElement]:
        out: list[ArrayElement] = []
        start = 0 if self._depth >= 2 else None
        pos, size = 0, len(data)
        if self._escape and size:
            self._escape, pos = False, 1
        while pos < size:
            if self._in_string:
                match = _IN_STRING.search(data, pos)
                if match is None:
                    break
                at = match.start()
                if data[at] == 0x5C:  # a backslash: skip what it escapes
                    self._escape = at + 1 == size
                    pos = at + 2
                    continue
                self._in_string = False
                pos = at + 1
                continue
            match = _OUTSIDE.search(data, pos)
            if match is None:
                break
            at, char = match.start(), data[match.start()]
            pos = at + 1
            if char == 0x22:  # a quote
                self._in_string = True
            elif char in b"[{":
                self._depth += 1
                if self._depth == 2:
                    start = at
            elif self._depth > 0:
                self._depth -= 1
                if self._depth == 1 and start is not None:
                    self._keep(data[start:pos])
                    out.append(ArrayElement(bytes(self._element), time_ns, self._truncated))
                    self.truncated_elements += self._truncated
                    self._element.clear()
                    self._truncated = False
                    start = None
                elif self._depth == 0:
                    self.closed = True
        if start is not None:
            self._keep(data[start:])
        return out

    def _keep(self, piece: bytes) -> None:
        room = self._max - len(self._element)
        if len(piece) > room:
            self._truncated = True
            piece = piece[: max(0, room)]
        self._element += piece


class GeminiReader(LlmResponseReader):
    def __init__(self, endpoint: str, status: int, content_type: str | None) -> None:
        super().__init__(endpoint, status, content_type)
        array = (
            endpoint == ENDPOINT_STREAM and status < 400 and media_type(content_type) != MEDIA_SSE
        )
        self._array = JsonArraySplitter() if array else None
        self._array_lost = False  # a capture gap: the array's bracket state is unknown
        self.stream = self.stream or array

    def buffered_bytes(self) -> int:
        return super().buffered_bytes() + (self._array.buffered_bytes() if self._array else 0)

    @property
    def sse_truncated_events(self) -> int:
        cut = super().sse_truncated_events
        return cut + (self._array.truncated_elements if self._array else 0)

    def feed(self, data: bytes, time_ns: int) -> None:
        if self._array is None:
            super().feed(data, time_ns)
            return
        if self._array_lost:
            return
        for element in self._array.feed(data, time_ns):
            obj = json_value(element.data)
            if isinstance(obj, dict):
                self._on_object(obj, "", element.time_ns)
        self.done = self.done or self._array.closed

    def gap(self) -> None:
        super().gap()
        # Which bracket or string the lost bytes left open is unknowable: stop reading the
        # array (the exchange says "capture truncated"; its metrics end at the gap).
        self._array_lost = self._array is not None

    def _on_object(self, obj: dict[str, Any], event: str, time_ns: int) -> None:
        if "error" in obj:
            self._server_error(error_message(obj))
            self.done = True
            return
        if self._on_response(obj):
            self.timeline.add(time_ns)

    def _on_body(self, body: Any, time_ns: int) -> None:
        content = False
        for obj in body if isinstance(body, list) else [body]:
            if isinstance(obj, dict):
                content |= self._on_response(obj)
        if content:
            self.timeline.add(time_ns)  # the whole answer arrives with the body's last byte

    def _on_response(self, obj: dict[str, Any]) -> bool:
        """One GenerateContentResponse; True when it carried output."""
        self.model = as_str(obj.get("modelVersion")) or self.model
        usage = obj.get("usageMetadata")
        if isinstance(usage, dict):
            prompt = as_int(usage.get("promptTokenCount"))
            self.input_tokens = prompt if prompt is not None else self.input_tokens
            output = as_int(usage.get("candidatesTokenCount"))
            thoughts = as_int(usage.get("thoughtsTokenCount"))
            if output is not None or thoughts is not None:
                self.output_tokens = (output or 0) + (thoughts or 0)
            cached = as_int(usage.get("cachedContentTokenCount"))
            self.cached_tokens = cached if cached is not None else self.cached_tokens
        feedback = obj.get("promptFeedback")
        if isinstance(feedback, dict) and as_str(feedback.get("blockReason")):
            self.finish_reason = feedback["blockReason"]
            self.done = True
        content = False
        candidates = obj.get("candidates")
        for candidate in candidates if isinstance(candidates, list) else ():
            if not isinstance(candidate, dict):
                continue
            body = candidate.get("content")
            parts = body.get("parts") if isinstance(body, dict) else None
            for part in parts if isinstance(parts, list) else ():
                if isinstance(part, dict) and (
                    as_str(part.get("text")) or part.get("functionCall")
                ):
                    content = True
            finish = as_str(candidate.get("finishReason"))
            if finish is not None:
                self.finish_reason = finish
                self.done = True
        return content
