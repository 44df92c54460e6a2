"""An OpenAI-compatible streaming server over HTTP/2 and clients that know their own truth, for
the test of LLM metrics over HTTP/2 (tests/e2e/test_llm_http2.py).

- `serve PORT [CERT KEY]`: openai_server.make_app (paced tokens, `zt_pace` in the request)
  under hypercorn: h2c by prior knowledge, or h2 over TLS (ALPN).
- `client PORT TRUTH [CA]`: REQUESTS streamed chats on one connection with the `h2` package
  over a blocking socket (Python's ssl with CA: the libssl uprobes see it), one after the
  other; `clients H2C TLS TRITON CA H2C_TRUTH TLS_TRUTH TRITON_TRUTH` runs the three in turn
  (triton-client below last). Each
  request's truth (one JSON line in TRUTH, CLOCK_MONOTONIC ns, as zerotrace's kernel times):
  `sent_ns` just before the call that writes its HEADERS, each content token just after the
  recv that returned it, the tokens as usage counts them. Then HTTPX_REQUESTS
  streamed chats with httpx (http2=True) on a connection of its own, counted only.
- `triton PORT`: a grpcio server of Triton's streaming method (TRITON_METHOD, raw bytes, no
  compiled proto): for each request message, TOKENS response messages, paced as PACE.
- `triton-client PORT TRUTH`: REQUESTS ModelStreamInfer calls, one after the other on one h2c
  connection framed by hand (`h2`; grpcio's own client is cut by the socket probe's iovec
  limit, tests/kernel/test_h2_spans.py), each one ModelInferRequest naming TRITON_MODEL; the
  truth as for `client`, a token for each response message, stamped when its prefix arrived.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import sys
import time
from pathlib import Path
from typing import Any

MODEL = "h2-model"
HTTPX_MODEL = "h2-httpx-model"
REQUESTS = 6
HTTPX_REQUESTS = 3
TOKENS = 6
PACE = {"first_ms": 40, "token_ms": 15}
PATH = "/v1/chat/completions"
TRITON_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
TRITON_MODEL = "triton-llm"


def serve(port: int, cert: str = "", key: str = "") -> None:
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    from tests.harness.openai_server import make_app

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.keep_alive_timeout = 300
    if cert:
        config.certfile, config.keyfile = cert, key
    asyncio.run(hypercorn_serve(make_app(), config))  # type: ignore[arg-type]


def chat_body(model: str, i: int) -> bytes:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"count to {TOKENS}, #{i}"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": TOKENS,
        "zt_pace": PACE,
    }
    return json.dumps(body).encode()


def _content(event: bytes) -> tuple[bool, int | None]:
    """(carries content, usage's completion tokens) of one SSE event."""
    if not event.startswith(b"data: ") or event == b"data: [DONE]":
        return False, None
    chunk = json.loads(event[6:])
    usage = (chunk.get("usage") or {}).get("completion_tokens")
    choices = chunk.get("choices") or []
    text = choices[0].get("delta", {}).get("content") if choices else None
    return bool(text), usage


def one_chat(sock: socket.socket, conn: Any, authority: str, scheme: str, i: int) -> dict[str, Any]:
    import h2.events

    sid = conn.get_next_available_stream_id()
    headers = [
        (":method", "POST"), (":scheme", scheme), (":authority", authority), (":path", PATH),
        ("content-type", "application/json"), ("accept", "text/event-stream"),
    ]  # fmt: skip
    conn.send_headers(sid, headers)
    conn.send_data(sid, chat_body(MODEL, i), end_stream=True)
    data = conn.data_to_send()
    sent_ns = time.monotonic_ns()
    sock.sendall(data)
    pending, times, tokens, status = b"", [], None, ""
    while True:
        got = sock.recv(65536)
        now = time.monotonic_ns()
        if not got:
            raise ConnectionError("the server closed the connection")
        for event in conn.receive_data(got):
            if isinstance(event, h2.events.ResponseReceived) and event.stream_id == sid:
                status = dict(event.headers)[b":status"].decode()
            elif isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
                conn.acknowledge_received_data(event.flow_controlled_length, sid)
                pending += event.data
                while b"\n\n" in pending:
                    raw, pending = pending.split(b"\n\n", 1)
                    content, usage = _content(raw.strip())
                    if content:
                        times.append(now)
                    tokens = usage if usage is not None else tokens
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
                assert status == "200", status
                assert len(times) == TOKENS and tokens == TOKENS, (times, tokens)
                return {"model": MODEL, "sent_ns": sent_ns, "tokens_ns": times, "tokens": tokens}
        out = conn.data_to_send()
        if out:
            sock.sendall(out)


def client(port: int, truth: str, ca: str = "") -> None:
    import h2.config
    import h2.connection

    raw = socket.create_connection(("127.0.0.1", port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock: socket.socket = raw
    if ca:
        context = ssl.create_default_context(cafile=ca)
        context.set_alpn_protocols(["h2"])
        sock = context.wrap_socket(raw, server_hostname="localhost")
        assert sock.selected_alpn_protocol() == "h2"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    scheme, authority = ("https", f"localhost:{port}") if ca else ("http", f"127.0.0.1:{port}")
    with sock, Path(truth).open("w") as out:
        for i in range(REQUESTS):
            out.write(json.dumps(one_chat(sock, conn, authority, scheme, i)) + "\n")
    asyncio.run(httpx_chats(port, ca))


async def httpx_chats(port: int, ca: str) -> None:
    import httpx

    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else False
    base = f"https://localhost:{port}" if ca else f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(http1=False, http2=True, verify=verify, timeout=30) as client:
        for i in range(HTTPX_REQUESTS):
            body = chat_body(HTTPX_MODEL, i)
            headers = {"content-type": "application/json"}
            async with client.stream("POST", base + PATH, content=body, headers=headers) as r:
                assert r.http_version == "HTTP/2" and r.status_code == 200
                text = b"".join([piece async for piece in r.aiter_bytes()])
            assert text.endswith(b"data: [DONE]\n\n"), text[-100:]


def model_infer_request(model: str, i: int) -> bytes:
    """A ModelInferRequest: model_name (1), model_version (2), id (3), by hand."""
    name, rid = model.encode(), f"req-{i}".encode()
    return (
        b"\x0a" + bytes([len(name)]) + name + b"\x12\x01" + b"1" + b"\x1a" + bytes([len(rid)]) + rid
    )


def serve_triton(port: int) -> None:
    from concurrent import futures

    import grpc

    def stream_infer(requests: Any, context: Any) -> Any:
        for _ in requests:
            time.sleep(PACE["first_ms"] / 1000)
            for i in range(TOKENS):
                if i:
                    time.sleep(PACE["token_ms"] / 1000)
                # A ModelStreamInferResponse: infer_response (2) with model_name (1).
                inner = b"\x0a" + bytes([len(TRITON_MODEL)]) + TRITON_MODEL.encode()
                yield b"\x12" + bytes([len(inner)]) + inner

    service, method = TRITON_METHOD[1:].split("/")
    handler = grpc.method_handlers_generic_handler(
        service, {method: grpc.stream_stream_rpc_method_handler(stream_infer)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def one_infer(sock: socket.socket, conn: Any, authority: str, i: int) -> dict[str, Any]:
    import h2.events

    sid = conn.get_next_available_stream_id()
    headers = [
        (":method", "POST"), (":scheme", "http"), (":authority", authority),
        (":path", TRITON_METHOD), ("content-type", "application/grpc"), ("te", "trailers"),
    ]  # fmt: skip
    message = model_infer_request(TRITON_MODEL, i)
    conn.send_headers(sid, headers)
    conn.send_data(sid, b"\0" + len(message).to_bytes(4, "big") + message, end_stream=True)
    data = conn.data_to_send()
    sent_ns = time.monotonic_ns()
    sock.sendall(data)
    body, times, at, status = bytearray(), [], 0, ""
    while True:
        got = sock.recv(65536)
        now = time.monotonic_ns()
        if not got:
            raise ConnectionError("the server closed the connection")
        for event in conn.receive_data(got):
            if isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
                conn.acknowledge_received_data(event.flow_controlled_length, sid)
                body += event.data
                while at + 5 <= len(body):  # a message's prefix arrived: a token
                    times.append(now)
                    at += 5 + int.from_bytes(body[at + 1 : at + 5], "big")
            elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == sid:
                status = dict(event.headers)[b"grpc-status"].decode()
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
                assert status == "0" and len(times) == TOKENS, (status, times)
                return {"model": TRITON_MODEL, "sent_ns": sent_ns, "tokens_ns": times}
        out = conn.data_to_send()
        if out:
            sock.sendall(out)


def triton_client(port: int, truth: str) -> None:
    import h2.config
    import h2.connection

    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    with sock, Path(truth).open("w") as out:
        for i in range(REQUESTS):
            out.write(json.dumps(one_infer(sock, conn, f"127.0.0.1:{port}", i)) + "\n")


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "serve":
        serve(int(args[0]), *args[1:])
    elif command == "client":
        client(int(args[0]), *args[1:])
    elif command == "clients":  # h2c, TLS, then Triton, for one observed run
        h2c, tls, triton, ca, h2c_truth, tls_truth, triton_truth = args
        client(int(h2c), h2c_truth)
        client(int(tls), tls_truth, ca)
        triton_client(int(triton), triton_truth)
    elif command == "triton":
        serve_triton(int(args[0]))
    elif command == "triton-client":
        triton_client(int(args[0]), args[1])
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
