"""Misbehaving peers, for the robustness tests: servers that cut a stream, fail mid-way,
answer 500, send a 50 MiB body, echo garbage or speak a line protocol, and one client that
walks through all of them (garbage, a truncated request, ...) and ends with a good request.

The servers run in their own process, apart from the observed client, so zerotrace sees one
side of every connection (the client's). The client writes what it saw itself to a JSON file,
so a test can tell "the peer did not misbehave as planned" from "zerotrace got it wrong".

Run: python -m tests.harness.bad_clients serve [--line-port 80]   # prints the ports as JSON
     python -m tests.harness.bad_clients client --llm-port P --servers JSON --out facts.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

# What the bad LLM server does, chosen by the request's model name.
CUT_STREAM = "cut-stream"  # SSE head and CUT_AFTER content chunks, then it closes
ERROR_MIDSTREAM = "error-midstream"  # ERROR_AFTER content chunks, an error event, [DONE]
HTTP_500 = "http-500"  # a 500 with an OpenAI-style error body
BIG = "big-50mb"  # a non-streamed completion whose chunked JSON body is BIG_BYTES long
GOOD = "good-final"  # sent to the real server, not the bad one
CUT_AFTER = 3
ERROR_AFTER = 2
ERROR_MESSAGE = "engine died mid-stream"
BIG_BYTES = 50 * 1024 * 1024
BIG_CHUNK = 1024 * 1024
GOOD_TOKENS = 13
TRUNCATED_PATH = "/truncated/v1/chat/completions"
TRUNCATED_PROMISED, TRUNCATED_SENT = 1000, 10
# 16 KiB reads are captured whole by the socket probe (its per-call payload limit), so the
# chunked framing of the 50 MiB body can be followed to its end.
BIG_READ = 16 * 1024
TIMEOUT_S = 20


# -- servers ------------------------------------------------------------------------------


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, Any]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    body = await reader.readexactly(length)
    return lines[0].split(" ")[1], json.loads(body or b"{}")


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _sse(model: str, payload: Any) -> bytes:
    if isinstance(payload, str):
        return _chunk(f"data: {payload}\n\n".encode())
    body = {"id": "bad", "object": "chat.completion.chunk", "model": model, **payload}
    return _chunk(f"data: {json.dumps(body)}\n\n".encode())


def _content(i: int) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]}


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    b"connection: close\r\n\r\n"
)


async def _bad_llm(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        _path, request = await _read_request(reader)
        model = str(request.get("model"))

        async def send(data: bytes) -> None:
            writer.write(data)
            await writer.drain()
            await asyncio.sleep(0.01)  # each piece its own read on the client

        if model == CUT_STREAM:
            await send(SSE_HEAD)
            await send(_sse(model, {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
            for i in range(CUT_AFTER):
                await send(_sse(model, _content(i)))
        elif model == ERROR_MIDSTREAM:
            await send(SSE_HEAD)
            for i in range(ERROR_AFTER):
                await send(_sse(model, _content(i)))
            await send(_sse(model, {"error": {"message": ERROR_MESSAGE, "code": 500}}))
            await send(_sse(model, "[DONE]") + b"0\r\n\r\n")
        elif model == HTTP_500:
            body = json.dumps(
                {"error": {"message": "engine crashed", "type": "InternalServerError"}}
            ).encode()
            await send(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
        elif model == BIG:
            await send(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            )
            for piece in _big_body(model):
                writer.write(_chunk(piece))
                await writer.drain()
            await send(b"0\r\n\r\n")
    except (OSError, asyncio.IncompleteReadError, ValueError):
        pass  # a bad client of the bad server: nothing to do but close
    finally:
        writer.close()


def _big_body(model: str) -> Iterator[bytes]:
    """BIG_BYTES of one chat completion, in BIG_CHUNK pieces, made as they are sent."""
    head = json.dumps({"id": "big", "object": "chat.completion", "model": model})[:-1].encode()
    head += b', "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": '
    head += b'"assistant", "content": "'
    tail = b'"}}], "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}}'
    filler = BIG_BYTES - len(head) - len(tail)
    yield head
    while filler > 0:
        yield b"x" * min(filler, BIG_CHUNK)
        filler -= BIG_CHUNK
    yield tail


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def _line_protocol(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A memcached/Redis-like line protocol: `get KEY`, `PING N`, `quit`."""
    with contextlib.suppress(OSError):
        while line := (await reader.readline()).strip():
            word, _, arg = line.partition(b" ")
            if word == b"get":
                writer.write(b"VALUE " + arg + b" 0 1\r\nx\r\nEND\r\n")
            elif word == b"PING":
                writer.write(b"+PONG " + arg + b"\r\n")
            elif word == b"quit":
                break
            else:
                writer.write(b"ERROR\r\n")
            await writer.drain()
    writer.close()


async def serve(line_port: int) -> None:
    bad = await asyncio.start_server(_bad_llm, "127.0.0.1", 0)
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    line = await asyncio.start_server(_line_protocol, "127.0.0.1", line_port)
    ports = {
        name: server.sockets[0].getsockname()[1]
        for name, server in (("bad_llm", bad), ("echo", echo), ("line", line))
    }
    print(json.dumps(ports), flush=True)
    await asyncio.Event().wait()  # until terminated


# -- the client ---------------------------------------------------------------------------


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)


def _read_all(sock: socket.socket, size: int = 65536) -> int:
    total = 0
    with contextlib.suppress(OSError):
        while data := sock.recv(size):
            total += len(data)
    return total


def garbage(llm_port: int, echo_port: int) -> dict[str, Any]:
    noise = b"\x00\xff\x16\x03" + random.Random(7).randbytes(4092)
    with _connect(llm_port) as sock:
        sock.sendall(noise)
        answer = sock.recv(4096)  # uvicorn answers 400 and closes
    with _connect(echo_port) as sock:
        sock.sendall(noise)
        echoed = b""
        while len(echoed) < len(noise) and (data := sock.recv(65536)):
            echoed += data
    return {"llm_answer": answer[:12].decode("latin-1"), "echoed": echoed == noise}


def truncated_request(llm_port: int) -> dict[str, Any]:
    head = (
        f"POST {TRUNCATED_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{llm_port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {TRUNCATED_PROMISED}\r\n\r\n"
    ).encode()
    with _connect(llm_port) as sock:
        sock.sendall(head + b'{"model":"'[:TRUNCATED_SENT])
        time.sleep(0.05)
    return {"sent": TRUNCATED_SENT}


def _request(port: int, body: dict[str, Any], path: str = "/v1/chat/completions") -> bytes:
    data = json.dumps(body)
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n{data}"
    ).encode()


def _dechunk(body: bytes) -> tuple[bytes, bool]:
    """The chunked body's data, and whether its last chunk came."""
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            return out, True
        out, body = out + body[:size], body[size + 2 :]
    return out, False


def stream(port: int, model: str, **extra: Any) -> dict[str, Any]:
    """A streamed chat completion over a plain socket: the status, content events seen, the
    usage's token count, and whether the body ended as framed."""
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with _connect(port) as sock:
        sock.sendall(_request(port, {**body, **extra}))
        raw = b""
        while data := sock.recv(65536):
            raw += data
    head, _, rest = raw.partition(b"\r\n\r\n")
    chunked = b"transfer-encoding: chunked" in head.lower()
    data, complete = _dechunk(rest) if chunked else (rest, True)
    facts: dict[str, Any] = {"status": int(head.split(b" ")[1]), "content": 0}
    facts["complete"] = complete
    for line in data.split(b"\n"):
        payload = line.removeprefix(b"data:").strip()
        if not line.startswith(b"data:") or payload == b"[DONE]":
            continue
        event = json.loads(payload)
        if event.get("usage"):
            facts["usage_tokens"] = event["usage"]["completion_tokens"]
        if event.get("error"):
            facts["error"] = event["error"]["message"]
        for choice in event.get("choices") or []:
            facts["content"] += bool((choice.get("delta") or {}).get("content"))
    return facts


def line_protocol(port: int) -> dict[str, Any]:
    answers = []
    for lines in ([b"get k1", b"get k2", b"quit"], [b"PING 1", b"PING 2", b"quit"]):
        with _connect(port) as sock:
            sock.sendall(b"".join(line + b"\r\n" for line in lines))
            answers.append(_read_all(sock))
    return {"answer_bytes": answers}


def big_response(port: int) -> dict[str, Any]:
    """Times are CLOCK_MONOTONIC (the same in every process), so a test can tell which of
    its samples of zerotrace's memory were taken during the transfer."""
    body = {"model": BIG, "messages": [{"role": "user", "content": "hi"}]}
    started = time.monotonic()
    with _connect(port) as sock:
        sock.sendall(_request(port, body))
        received = _read_all(sock, BIG_READ)  # counted, not kept: the client stays small
    return {"received": received, "started": started, "ended": time.monotonic()}


def client(llm_port: int, servers: dict[str, int]) -> dict[str, Any]:
    bad = servers["bad_llm"]
    facts = {"garbage": garbage(llm_port, servers["echo"])}
    facts["truncated"] = truncated_request(llm_port)
    facts[CUT_STREAM] = stream(bad, CUT_STREAM)
    facts[ERROR_MIDSTREAM] = stream(bad, ERROR_MIDSTREAM)
    facts[HTTP_500] = stream(bad, HTTP_500)
    facts["line"] = line_protocol(servers["line"])
    facts[BIG] = big_response(bad)
    # The 50 MiB body overflows zerotrace's socket ring on purpose (the loss is counted); the
    # good request comes once the ring had a moment to drain, so that it shows the pipeline
    # goes on rather than being lost to the same, already counted, overflow.
    time.sleep(1.0)
    facts[GOOD] = stream(
        llm_port,
        GOOD,
        max_tokens=GOOD_TOKENS,
        stream_options={"include_usage": True},
        zt_pace={"first_ms": 20, "token_ms": 2},
    )
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("serve", help="run the bad servers; prints their ports as JSON")
    s.add_argument("--line-port", type=int, default=0, help="line-protocol port (80: root)")
    c = sub.add_parser("client", help="walk through every misbehaviour, then a good request")
    c.add_argument("--llm-port", type=int, required=True, help="the real OpenAI server")
    c.add_argument("--servers", required=True, help="the JSON line `serve` printed")
    c.add_argument("--out", required=True, help="where to write what the client saw")
    args = parser.parse_args()
    if args.what == "serve":
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(args.line_port))
        return
    facts = client(args.llm_port, json.loads(args.servers))
    with open(args.out, "w") as out:
        json.dump(facts, out)
    print(json.dumps(facts), file=sys.stderr)


if __name__ == "__main__":
    main()
