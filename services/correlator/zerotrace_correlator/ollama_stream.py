"""What an Ollama exchange (POST /api/chat, /api/generate) says. Pure.

Shapes understood (Ollama's docs/api.md):
- the request: `model`, `stream` (true when absent), `options.num_predict` (the limit);
- a stream (application/x-ndjson), one JSON object a line: content is a non-empty
  `message.content` / `message.thinking` or `message.tool_calls` (chat), or `response` /
  `thinking` (generate); the last line has `done: true`, `done_reason`, `prompt_eval_count`
  (input tokens; absent when the whole prompt came from the cache) and `eval_count` (output
  tokens);
- with `"stream": false`, the same final object alone, as application/json;
- an error: {"error": "..."}, as a whole body (with a 4xx/5xx status) or as a stream line.
"""

from __future__ import annotations

from typing import Any

from zerotrace_correlator.llm_response import LlmResponseReader, as_int, as_str, json_value
from zerotrace_correlator.openai_stream import LlmRequestInfo, parse_request_body

ENDPOINT_CHAT = "api/chat"
ENDPOINT_GENERATE = "api/generate"


def parse_request(body: bytes, target: str) -> LlmRequestInfo:
    info = parse_request_body(body)  # model and stream as OpenAI names them
    value = json_value(body)
    options = value.get("options") if isinstance(value, dict) else None
    limit = as_int(options.get("num_predict")) if isinstance(options, dict) else None
    whole = isinstance(value, dict)
    return LlmRequestInfo(
        model=info.model,
        # Ollama streams unless told not to; a cut body may not show the flag at all.
        stream=True if info.stream is None and whole else info.stream,
        include_usage=None,
        max_tokens=limit,
    )


class OllamaReader(LlmResponseReader):
    def _on_object(self, obj: dict[str, Any], event: str, time_ns: int) -> None:
        if self._on_line(obj):
            self.timeline.add(time_ns)

    def _on_body(self, body: Any, time_ns: int) -> None:
        if isinstance(body, dict) and self._on_line(body):
            self.timeline.add(time_ns)  # the whole answer arrives with the body's last byte

    def _on_line(self, obj: dict[str, Any]) -> bool:
        """One chat or generate object; True when it carried output."""
        error = as_str(obj.get("error"))
        if error is not None:
            self._server_error(error)
            self.done = True
            return False
        self.model = as_str(obj.get("model")) or self.model
        if obj.get("done") is True:
            self.done = True
            self.finish_reason = as_str(obj.get("done_reason")) or self.finish_reason
            self.input_tokens = as_int(obj.get("prompt_eval_count"))
            self.output_tokens = as_int(obj.get("eval_count"))
        message = obj.get("message")
        if isinstance(message, dict):
            return bool(
                as_str(message.get("content"))
                or as_str(message.get("thinking"))
                or message.get("tool_calls")
            )
        return bool(as_str(obj.get("response")) or as_str(obj.get("thinking")))
