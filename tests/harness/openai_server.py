"""A real OpenAI-compatible server on the stack vLLM uses (an ASGI app under uvicorn with
uvloop and httptools), streaming tokens with controlled pacing. For tests and benchmarks.

Pacing comes from the request, so each test decides it: `max_tokens` is the number of tokens
generated; the extra body field `zt_pace` = {"first_ms": prefill delay, "token_ms": delay
between tokens}. Streams look like vLLM's: a role-only first chunk for chat, one chunk per
token, a finish chunk, the usage chunk when `stream_options.include_usage`, then [DONE].

With `--burn-ms-per-token X` every token costs X ms of CPU instead of the request's paced
sleeps (the prefill one token's worth): the server is CPU-bound, as a model server is, and
saturates the cores. The work is SHA-256 in threads, one per core, native code that releases
the GIL, like a tensor library's forward pass: the event loop keeps reading requests and
writing tokens while the burners queue for the cores.

With `--truth FILE` the server appends one JSON line per request with its own stamps
(CLOCK_MONOTONIC ns): when the app got the request, and just before it sent the first and
the last content. A capture between client and server sees a token no earlier than the server
sent it and a request no later than the app got it, so these bound what the wire can show.

Run: python -m tests.harness.openai_server --port 8000 [--certfile C --keyfile K] [--truth F]
    [--burn-ms-per-token X]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# (model, request got, first content sent, last content sent, tokens), CLOCK_MONOTONIC ns.
Record = Callable[[str, int, int, int, int], None]


def no_record(model: str, request_ns: int, first_ns: int, last_ns: int, tokens: int) -> None:
    pass


def truth_file(path: Path) -> Record:
    """A Record that appends one JSON line per request to *path*."""

    def record(model: str, request_ns: int, first_ns: int, last_ns: int, tokens: int) -> None:
        line = {
            "model": model,
            "request_ns": request_ns,
            "first_ns": first_ns,
            "last_ns": last_ns,
            "tokens": tokens,
        }
        with path.open("a") as out:
            out.write(json.dumps(line) + "\n")

    return record


def burn_bytes(ms: float) -> int:
    """How many bytes SHA-256 takes *ms* of this thread's CPU time to hash, measured here."""
    block = bytes(1 << 20)

    def cost_ns() -> int:
        start = time.thread_time_ns()
        hashlib.sha256(block)
        return time.thread_time_ns() - start

    return max(1, round(len(block) * ms * 1e6 / max(1, min(cost_ns() for _ in range(5)))))


def burn(data: memoryview) -> None:
    """Hash *data* in one call: the GIL stays released for the whole token (SHA-256 releases
    it from 2 KiB on), so a burner holds it only to start and to finish, and the event loop
    thread seldom waits for it."""
    hashlib.sha256(data)


# Waits before a token: the request's paced sleep, or (burn mode) a token's CPU.
Pause = Callable[[float], Awaitable[None]]


def burner(ms: float) -> Pause:
    """A Pause that burns *ms* of CPU in one of a thread per core, whatever the pace asked."""
    threads = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="burn")
    data = memoryview(bytes(burn_bytes(ms)))

    async def pause(_pace_s: float) -> None:
        await asyncio.get_running_loop().run_in_executor(threads, burn, data)

    return pause


def token_text(i: int) -> str:
    return f"tok{i} "


async def read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


def make_app(
    record: Record = no_record, pause: Pause = asyncio.sleep
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI app; *record* gets the server's stamps of every request it answers; *pause*
    waits before each token (asyncio.sleep: the request's pace)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        request_ns = time.monotonic_ns()  # headers parsed: the request was on the wire before
        path = scope["path"]
        body = await read_body(receive)
        if scope["method"] != "POST":
            await respond_json(send, 404, {"error": {"message": "not found"}})
            return
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            await respond_json(send, 400, {"error": {"message": "bad json"}})
            return
        if path.endswith("/v1/chat/completions"):
            endpoint = "chat"
        elif path.endswith("/v1/completions"):
            endpoint = "completions"
        elif path.endswith("/v1/responses"):
            endpoint = "responses"
        else:
            await respond_json(send, 404, {"error": {"message": f"no route {path}"}})
            return
        await generate(endpoint, request, send, request_ns, record, pause)

    return app


app = make_app()


async def respond_json(send: Send, status: int, body: Any) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def usage(prompt: int, completion: int, endpoint: str) -> dict[str, Any]:
    if endpoint == "responses":
        return {
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def generate(
    endpoint: str,
    request: dict[str, Any],
    send: Send,
    request_ns: int = 0,
    record: Record = no_record,
    pause: Pause = asyncio.sleep,
) -> None:
    n = int(request.get("max_tokens") or request.get("max_output_tokens") or 16)
    pace = request.get("zt_pace") or {}
    first_s = float(pace.get("first_ms", 20)) / 1000
    token_s = float(pace.get("token_ms", 5)) / 1000
    model = request.get("model", "test-model")
    prompt_tokens = 7
    rid = f"cmpl-{time.monotonic_ns()}"
    if not request.get("stream"):
        if pause is asyncio.sleep:
            await asyncio.sleep(first_s + token_s * (n - 1))
        else:
            for i in range(n):
                await pause(token_s if i else first_s)
        text = "".join(token_text(i) for i in range(n))
        if endpoint == "chat":
            body: dict[str, Any] = {
                "id": rid,
                "object": "chat.completion",
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "length",
                        "message": {"role": "assistant", "content": text},
                    }
                ],
            }
        elif endpoint == "completions":
            body = {
                "id": rid,
                "object": "text_completion",
                "model": model,
                "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
            }
        else:
            body = {
                "id": rid,
                "object": "response",
                "model": model,
                "status": "completed",
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    }
                ],
            }
        body["usage"] = usage(prompt_tokens, n, endpoint)
        sent_ns = time.monotonic_ns()
        # Written before the answer goes: a client that has it finds the line there.
        record(model, request_ns, sent_ns, sent_ns, n)
        await respond_json(send, 200, body)
        return
    include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
    )

    async def event(payload: Any, name: str | None = None) -> None:
        head = f"event: {name}\n" if name else ""
        data = payload if isinstance(payload, str) else json.dumps(payload)
        await send(
            {
                "type": "http.response.body",
                "body": f"{head}data: {data}\n\n".encode(),
                "more_body": True,
            }
        )

    def chunk(
        delta: dict[str, Any] | None = None, text: str | None = None, finish: str | None = None
    ) -> dict[str, Any]:
        if endpoint == "chat":
            choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
            return {
                "id": rid,
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [choice],
            }
        return {
            "id": rid,
            "object": "text_completion",
            "model": model,
            "choices": [{"index": 0, "text": text or "", "finish_reason": finish}],
        }

    if endpoint == "chat":
        await event(chunk({"role": "assistant", "content": ""}))  # role-only, as vLLM does
    elif endpoint == "responses":
        await event(
            {"type": "response.created", "response": {"id": rid, "model": model}},
            "response.created",
        )
    await pause(first_s)
    first_ns = last_ns = 0
    for i in range(n):
        if i:
            await pause(token_s)
        last_ns = time.monotonic_ns()
        first_ns = first_ns or last_ns
        if endpoint == "chat":
            await event(chunk({"content": token_text(i)}))
        elif endpoint == "completions":
            await event(chunk(text=token_text(i)))
        else:
            await event(
                {"type": "response.output_text.delta", "delta": token_text(i)},
                "response.output_text.delta",
            )
    if endpoint == "responses":
        await event(
            {
                "type": "response.completed",
                "response": {
                    "id": rid,
                    "model": model,
                    "status": "completed",
                    "usage": usage(prompt_tokens, n, endpoint),
                },
            },
            "response.completed",
        )
    else:
        await event(chunk({}, finish="length"))
        if include_usage:
            final = chunk()
            final["choices"] = []
            final["usage"] = usage(prompt_tokens, n, endpoint)
            await event(final)
        await event("[DONE]")
    record(model, request_ns, first_ns, last_ns, n)  # before the end of the stream goes
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--certfile")
    parser.add_argument("--keyfile")
    parser.add_argument("--truth", type=Path, help="append the server's stamps here")
    parser.add_argument(
        "--burn-ms-per-token",
        type=float,
        default=0,
        help="each token costs this many ms of CPU instead of the request's paced sleep",
    )
    args = parser.parse_args()
    record = truth_file(args.truth) if args.truth else no_record
    pause = burner(args.burn_ms_per_token) if args.burn_ms_per_token > 0 else asyncio.sleep
    uvicorn.run(
        make_app(record, pause),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        ssl_certfile=args.certfile,
        ssl_keyfile=args.keyfile,
        # uvicorn closes a connection idle for 5 s by default; a client that sends its next
        # request just then gets "Server disconnected" (the SDK: "Connection error."). The load
        # clients sit idle that long while the others warm up, and a test measures zerotrace,
        # not that race.
        timeout_keep_alive=300,
    )


if __name__ == "__main__":
    main()
