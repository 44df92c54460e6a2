"""A streaming test server for the LLM APIs other than OpenAI's, on the stack
openai_server.py uses (an ASGI app under uvicorn with uvloop and httptools). For the
end-to-end accuracy test of those formats (tests/e2e/test_llm_formats.py).

Routes, each streaming the way the real service does (shapes as the correlator's readers
document them):
- Anthropic Messages, POST /v1/messages with "stream": true: typed SSE events (message_start
  with the input tokens, content_block_start, ping, one content_block_delta per token,
  content_block_stop, message_delta with the output tokens, message_stop);
- Gemini, POST /v1beta/models/M:streamGenerateContent: with ?alt=sse one SSE event per chunk,
  without it one JSON array whose elements come as they are generated; every chunk carries
  usageMetadata (the running count), the last one finishReason;
- Ollama, POST /api/chat and /api/generate: NDJSON, one line per token (odd request numbers
  think first: `thinking` lines), then the `done` line with prompt_eval_count and eval_count;
- TGI, POST .../generate_stream: SSE, one StreamResponse per token, the last one with
  generated_text and details.generated_tokens (odd request numbers end on the special
  end-of-sequence token, finish_reason eos_token). TGI names no model, so the test puts its join
  key in a path prefix, as a gateway route would (/KEY/generate_stream);
- whole answers too: /v1/messages without "stream", Gemini's :generateContent, Ollama with
  "stream": false, TGI's .../generate.

Pacing comes from the model name (the path prefix for TGI): `pace(name)` reads the request
number at its end and gives the token count, the delay before the first token and the gap
between tokens, so the clients need no extra request fields that the SDKs would not send.

Run: python -m tests.harness.llm_formats_server --port 8000 [--certfile C --keyfile K]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from tests.harness.openai_server import Receive, Scope, Send, read_body, respond_json, token_text

PROMPT_TOKENS = 7
_NUMBER = re.compile(r"-(\d+)$")
_GEMINI = re.compile(r"/models/([^/:]+):(streamGenerateContent|generateContent)$")


@dataclass(frozen=True)
class Pace:
    tokens: int
    first_s: float
    token_s: float
    # How many of the tokens are reasoning (Anthropic, Gemini, Ollama); TGI: the run ends on the
    # end-of-sequence token when not 0.
    thinking: int = 0


def pace(name: str) -> Pace:
    """The pacing of the request whose model (or TGI path key) is *name*: varied per request
    number, 2 quick tokens for a name without one (the clients' warm-ups). The pace (about 40
    tokens/s a stream) keeps a 2-core machine running server, clients and zerotrace below
    saturation."""
    match = _NUMBER.search(name)
    if match is None:
        return Pace(2, 0.0, 0.0)
    n = int(match.group(1))
    return Pace(6 + n % 5, (30 + (n % 4) * 3) / 1000, (22 + (n % 3) * 2) / 1000, 2 * (n % 2))


Write = Callable[[bytes], Awaitable[None]]


async def start_stream(send: Send, media: str) -> Write:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", media.encode()), (b"cache-control", b"no-cache")],
        }
    )

    async def write(data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    return write


async def end_stream(send: Send) -> None:
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def tokens(p: Pace) -> Any:
    """Yields the token numbers, each when it is due."""
    await asyncio.sleep(p.first_s)
    for i in range(p.tokens):
        if i:
            await asyncio.sleep(p.token_s)
        yield i


async def anthropic(request: dict[str, Any], send: Send) -> None:
    model = str(request.get("model", ""))
    p = pace(model)
    write = await start_stream(send, "text/event-stream")

    async def event(payload: dict[str, Any]) -> None:
        await write(f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode())

    await event(
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{time.monotonic_ns()}",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": 1},
            },
        }
    )
    # With thinking, as Claude streams it: a thinking block (thinking_delta per token, then a
    # signature_delta, which is not content), then the text block.
    block = -1
    async for i in tokens(p):
        kind = "thinking" if i < p.thinking else "text"
        if i in (0, p.thinking):
            if block >= 0:  # the thinking block ends with its signature, not content
                signature = {"type": "signature_delta", "signature": "c2ln"}
                await event({"type": "content_block_delta", "index": block, "delta": signature})
                await event({"type": "content_block_stop", "index": block})
            block += 1
            start = {"type": kind, kind: ""} | ({"signature": ""} if kind == "thinking" else {})
            await event({"type": "content_block_start", "index": block, "content_block": start})
            if block == 0:
                await event({"type": "ping"})
        delta = {"type": f"{kind}_delta", kind: token_text(i)}
        await event({"type": "content_block_delta", "index": block, "delta": delta})
    await event({"type": "content_block_stop", "index": block})
    await event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": p.tokens},
        }
    )
    await event({"type": "message_stop"})
    await end_stream(send)


def gemini_chunk(model: str, i: int, p: Pace) -> dict[str, Any]:
    part: dict[str, Any] = {"text": token_text(i)}
    if i < p.thinking:
        part["thought"] = True  # a thought summary part: generated, counted apart
    candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
    if i == p.tokens - 1:
        candidate["finishReason"] = "MAX_TOKENS"
    usage = {"promptTokenCount": PROMPT_TOKENS, "totalTokenCount": PROMPT_TOKENS + i + 1}
    if i >= p.thinking:
        usage["candidatesTokenCount"] = i + 1 - p.thinking
    if p.thinking:
        usage["thoughtsTokenCount"] = min(i + 1, p.thinking)
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": f"r{time.monotonic_ns()}",
    }


async def gemini(model: str, sse: bool, send: Send) -> None:
    p = pace(model)
    if sse:
        write = await start_stream(send, "text/event-stream")
        async for i in tokens(p):
            await write(f"data: {json.dumps(gemini_chunk(model, i, p))}\r\n\r\n".encode())
    else:
        # As Google's servers send it: "[{" and each element pretty-printed, then ",\r\n{"
        # before each next one, then "]".
        write = await start_stream(send, "application/json; charset=UTF-8")
        async for i in tokens(p):
            head = "[" if i == 0 else ",\r\n"
            await write(f"{head}{json.dumps(gemini_chunk(model, i, p), indent=2)}\n".encode())
        await write(b"]")
    await end_stream(send)


async def ollama(endpoint: str, request: dict[str, Any], send: Send) -> None:
    model = str(request.get("model", ""))
    p = pace(model)
    write = await start_stream(send, "application/x-ndjson")
    stamp = "2026-12-04T00:00:00.000000Z"

    def line(text: str, done: bool, thinking: bool = False) -> dict[str, Any]:
        """A thinking model's reasoning comes first, in `thinking` beside an empty answer."""
        obj: dict[str, Any] = {"model": model, "created_at": stamp}
        fields = {"content": "", "thinking": text} if thinking else {"content": text}
        if endpoint == "chat":
            obj["message"] = {"role": "assistant", **fields}
        else:
            obj["response"] = fields["content"]
            if thinking:
                obj["thinking"] = text
        obj["done"] = done
        return obj

    async for i in tokens(p):
        await write((json.dumps(line(token_text(i), False, i < p.thinking)) + "\n").encode())
    final = line("", True)
    final.update(
        done_reason="length",
        total_duration=1_000_000,
        load_duration=1_000,
        prompt_eval_count=PROMPT_TOKENS,
        prompt_eval_duration=1_000,
        eval_count=p.tokens,
        eval_duration=1_000_000,
    )
    await write((json.dumps(final) + "\n").encode())
    await end_stream(send)


async def tgi(key: str, send: Send) -> None:
    """With thinking set (odd request numbers), the run ends on the end-of-sequence token,
    special, as TGI streams it when the model stops by itself: one of generated_tokens."""
    p = pace(key)
    write = await start_stream(send, "text/event-stream")
    text = ""
    async for i in tokens(p):
        last = i == p.tokens - 1
        eos = last and p.thinking > 0
        piece = "</s>" if eos else token_text(i)
        text += "" if eos else piece
        details = {
            "finish_reason": "eos_token" if eos else "length",
            "generated_tokens": p.tokens,
            "seed": None,
            "input_length": PROMPT_TOKENS,
        }
        event = {
            "index": i + 1,
            "token": {"id": 2 if eos else 100 + i, "text": piece, "logprob": -0.5, "special": eos},
            "generated_text": text if last else None,
            "details": details if last else None,
        }
        await write(f"data:{json.dumps(event)}\n\n".encode())
    await end_stream(send)


async def whole(api: str, name: str, send: Send) -> None:
    """A whole (non-streamed) answer, sent once every token is generated, with its usage:
    Anthropic's message, Gemini's generateContent response, Ollama's `"stream": false` final
    object, TGI's /generate answer with details."""
    p = pace(name)
    await asyncio.sleep(p.first_s + p.token_s * (p.tokens - 1))
    text = "".join(token_text(i) for i in range(p.tokens))
    body: dict[str, Any]
    if api == "anthropic":
        body = {
            "id": f"msg_{time.monotonic_ns()}",
            "type": "message",
            "role": "assistant",
            "model": name,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "max_tokens",
            "stop_sequence": None,
            "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": p.tokens},
        }
    elif api == "gemini":
        body = gemini_chunk(name, p.tokens - 1, replace(p, thinking=0))
        body["candidates"][0]["content"]["parts"] = [{"text": text}]
    elif api == "ollama":
        body = {
            "model": name,
            "created_at": "2026-12-04T00:00:00.000000Z",
            "message": {"role": "assistant", "content": text},
            "done": True,
            "done_reason": "length",
            "prompt_eval_count": PROMPT_TOKENS,
            "eval_count": p.tokens,
        }
    else:
        details = {"finish_reason": "length", "generated_tokens": p.tokens, "seed": None}
        body = {"generated_text": text, "details": details | {"prefill": [], "tokens": []}}
    await respond_json(send, 200, body)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    body = await read_body(receive)
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        await respond_json(send, 400, {"error": {"message": "bad json"}})
        return
    gemini_path = _GEMINI.search(path)
    if scope["method"] != "POST":
        await respond_json(send, 404, {"error": {"message": "not found"}})
    elif path == "/v1/messages":
        if request.get("stream"):
            await anthropic(request, send)
        else:
            await whole("anthropic", str(request.get("model", "")), send)
    elif gemini_path is not None:
        if gemini_path.group(2) == "streamGenerateContent":
            await gemini(gemini_path.group(1), b"alt=sse" in scope["query_string"], send)
        else:
            await whole("gemini", gemini_path.group(1), send)
    elif path in ("/api/chat", "/api/generate"):
        if request.get("stream", True):
            await ollama(path.rsplit("/", 1)[1], request, send)
        else:
            await whole("ollama", str(request.get("model", "")), send)
    elif path.endswith("/generate_stream"):
        await tgi(path.removesuffix("/generate_stream").strip("/"), send)
    elif path.endswith("/generate"):
        await whole("tgi", path.removesuffix("/generate").strip("/"), send)
    else:
        await respond_json(send, 404, {"error": {"message": f"no route {path}"}})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--certfile")
    parser.add_argument("--keyfile")
    args = parser.parse_args()
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        ssl_certfile=args.certfile,
        ssl_keyfile=args.keyfile,
        timeout_keep_alive=300,  # as openai_server.py: clients idle while the others warm up
    )


if __name__ == "__main__":
    main()
