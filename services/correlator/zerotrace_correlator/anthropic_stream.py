"""What an Anthropic Messages exchange (POST /v1/messages) says. Pure.

Shapes understood (Anthropic API reference, "Messages" and "Streaming Messages"):
- the request: `model`, `stream`, `max_tokens` (the OpenAI request reader reads them);
- a stream (text/event-stream) of typed events: `message_start` (the message with `model` and
  `usage.input_tokens`), `content_block_start`, `content_block_delta` (content when its delta
  is a non-empty `text_delta`, `thinking_delta` or `input_json_delta`), `content_block_stop`,
  `message_delta` (`delta.stop_reason`, and `usage.output_tokens`: the running total, so the
  last one wins), `message_stop` (the end), `ping` (keep-alive, not content) and `error`;
- a whole JSON message: `content[]` blocks (unless content is captured, the collector masks
  their strings to the same length but keeps their keys and `type`; collectors before that
  masked the keys too, and such blocks still count), `stop_reason`, `usage`;
- an error body: {"type": "error", "error": {"type": ..., "message": ...}}.

Input tokens follow OpenTelemetry's GenAI conventions (gen_ai.usage.input_tokens includes
cached tokens): Anthropic's `input_tokens` counts only the uncached part, so the cache reads
and writes are added to it; the reads are the cached tokens.
"""

from __future__ import annotations

from typing import Any

from zerotrace_correlator.llm_response import LlmResponseReader, as_int, as_str, error_message

ENDPOINT_MESSAGES = "messages"
PATH_SUFFIX = "/v1/messages"

_DELTA_FIELDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}


class AnthropicReader(LlmResponseReader):
    def _on_object(self, obj: dict[str, Any], event: str, time_ns: int) -> None:
        kind = as_str(obj.get("type")) or event
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict):
                field = _DELTA_FIELDS.get(str(delta.get("type")))
                if field is not None and as_str(delta.get(field)):
                    self.timeline.add(time_ns)
        elif kind == "message_start":
            message = obj.get("message")
            if isinstance(message, dict):
                # Its usage.output_tokens is a placeholder (1): message_delta gives the count.
                self._on_message(message, output=False)
        elif kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict):
                self.finish_reason = as_str(delta.get("stop_reason")) or self.finish_reason
            self._on_usage(obj.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self._server_error(error_message(obj))
            self.done = True

    def _on_body(self, body: Any, time_ns: int) -> None:
        if not isinstance(body, dict):
            return
        if body.get("type") == "error":
            self._server_error(error_message(body), "error")
            return
        self._on_message(body)
        blocks = body.get("content")
        for block in blocks if isinstance(blocks, list) else ():
            if isinstance(block, dict) and _block_has_output(block):
                self.timeline.add(time_ns)  # the whole answer arrives with the body's last byte
                break

    def _on_message(self, message: dict[str, Any], output: bool = True) -> None:
        self.model = as_str(message.get("model")) or self.model
        self.finish_reason = as_str(message.get("stop_reason")) or self.finish_reason
        self._on_usage(message.get("usage"), output)

    def _on_usage(self, usage: Any, output: bool = True) -> None:
        if not isinstance(usage, dict):
            return
        uncached = as_int(usage.get("input_tokens"))
        read = as_int(usage.get("cache_read_input_tokens"))
        written = as_int(usage.get("cache_creation_input_tokens"))
        if uncached is not None:
            self.input_tokens = uncached + (read or 0) + (written or 0)
        if read is not None:
            self.cached_tokens = read
        tokens = as_int(usage.get("output_tokens"))
        if output and tokens is not None:
            self.output_tokens = tokens


def _block_has_output(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    if kind == "text":
        return as_str(block.get("text")) is not None
    if kind == "thinking":
        return as_str(block.get("thinking")) is not None
    if kind is None and block and all(_masked(key) for key in block):
        # Collectors before keys were kept masked every string inside a `content` array,
        # keys included, byte for byte: the block's kind is hidden, not whether it held
        # something. Same-length keys collapse to the last one's value (a text block's
        # `text`), so an empty text block stays empty.
        return any(block.values())
    return kind == "tool_use"


def _masked(key: str) -> bool:
    return bool(key) and key.count("*") == len(key)
