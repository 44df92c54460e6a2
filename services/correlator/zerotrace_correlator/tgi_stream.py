"""What a Hugging Face Text Generation Inference exchange (POST /generate_stream, /generate)
says. Pure. (TGI's OpenAI-compatible /v1/chat/completions is openai_stream's.)

Shapes understood (TGI's OpenAPI spec, "generate" and "generate_stream"):
- the request: `inputs` and `parameters` (`max_new_tokens` is the limit); the model is the one
  the server was started with, named in neither request nor response;
- a stream (text/event-stream), one StreamResponse per generated token: `token` {id, text,
  special}; content is a non-special token with non-empty text, and the special token of
  the last event (the end-of-sequence token when finish_reason is `eos_token`): it is one of
  the `generated_tokens` and arrives at its own time, so the decode time that TPOT divides
  among the tokens runs to it (as `vllm bench`'s TGI client counts it); the last event also
  has `generated_text` and `details` {finish_reason, generated_tokens, input_length (newer
  releases)};
- a whole JSON answer: {generated_text, details?} (details only when the request asked with
  `parameters.details`), or a list of them (the compatibility route);
- an error: {"error": "...", "error_type": ...}, as a body or as a stream event.
"""

from __future__ import annotations

from typing import Any

from zerotrace_correlator.llm_response import LlmResponseReader, as_int, as_str, json_value
from zerotrace_correlator.openai_stream import LlmRequestInfo

ENDPOINT_GENERATE = "generate"
ENDPOINT_STREAM = "generate_stream"


def parse_request(body: bytes, target: str) -> LlmRequestInfo:
    value = json_value(body)
    parameters = value.get("parameters") if isinstance(value, dict) else None
    limit = as_int(parameters.get("max_new_tokens")) if isinstance(parameters, dict) else None
    return LlmRequestInfo(
        model=None,
        stream=target.split("?", 1)[0].rstrip("/").endswith("/" + ENDPOINT_STREAM),
        include_usage=None,
        max_tokens=limit,
    )


class TgiReader(LlmResponseReader):
    def _on_object(self, obj: dict[str, Any], event: str, time_ns: int) -> None:
        error = as_str(obj.get("error"))
        if error is not None:
            self._server_error(error)
            self.done = True
            return
        last = self._on_details(obj.get("details")) or obj.get("generated_text") is not None
        token = obj.get("token")
        if isinstance(token, dict) and (
            (last and token.get("special") is True)
            or (not token.get("special") and as_str(token.get("text")))
        ):
            self.timeline.add(time_ns)
        self.done = self.done or last

    def _on_body(self, body: Any, time_ns: int) -> None:
        if isinstance(body, list):
            body = body[0] if body else None
        if not isinstance(body, dict):
            return
        self._on_details(body.get("details"))
        if as_str(body.get("generated_text")):
            self.timeline.add(time_ns)  # the whole answer arrives with the body's last byte

    def _on_details(self, details: Any) -> bool:
        if not isinstance(details, dict):
            return False
        self.finish_reason = as_str(details.get("finish_reason")) or self.finish_reason
        self.output_tokens = as_int(details.get("generated_tokens"))
        self.input_tokens = as_int(details.get("input_length"))
        return True
