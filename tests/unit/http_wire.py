"""Builders of raw socket records and HTTP/SSE wire bytes for the HTTP/LLM correlation tests."""

from __future__ import annotations

import json
from typing import Any

CHAT_PATH = "/v1/chat/completions"


def sock(
    direction: str,
    payload: bytes,
    t: int,
    *,
    conn: str = "c1",
    size: int | None = None,
    source: str = "SYSCALL",
    duration: int = 5,
    event_id: str | None = None,
    pid: int = 10,
    tid: int = 11,
    seq: int | None = None,
) -> dict[str, Any]:
    """A zerotrace.raw.SocketData datum; `size` > len(payload) makes a truncated capture;
    `seq` is the TCP sequence number of its first byte."""
    size = len(payload) if size is None else size
    return {
        "event_id": event_id or f"{conn}/{direction}/{t}",
        "node_id": "n1",
        "pid": pid,
        "tid": tid,
        "process_name": "python3",
        "container_id": None,
        "conn_id": conn,
        "fd": 5,
        "direction": direction,
        "source": source,
        "start_ns": t,
        "end_ns": t if source == "PACKET" else t + duration,
        "bytes": size,
        "payload": payload,
        "payload_truncated": size > len(payload),
        "tcp_seq": seq,
        "local_addr": "10.0.0.1",
        "local_port": 40000,
        "remote_addr": "10.0.0.2",
        "remote_port": 8000,
    }


def close(t: int, conn: str = "c1") -> dict[str, Any]:
    """A zerotrace.raw.ConnEvent CLOSE datum."""
    return {
        "event_id": f"{conn}/close/{t}",
        "node_id": "n1",
        "pid": 10,
        "tid": 11,
        "process_name": "python3",
        "service": None,
        "container_id": None,
        "conn_id": conn,
        "fd": 5,
        "kind": "CLOSE",
        "ts_ns": t,
        "duration_ns": 0,
        "local_addr": "10.0.0.1",
        "local_port": 40000,
        "remote_addr": "10.0.0.2",
        "remote_port": 8000,
    }


def post(path: str, body: dict[str, Any] | bytes, extra: bytes = b"") -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: llm\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n".encode()
        + extra
        + b"\r\n"
        + data
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
LAST_CHUNK = b"0\r\n\r\n"


def sse(obj: dict[str, Any] | str, event: str | None = None) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


def json_response(obj: dict[str, Any], status: str = "200 OK") -> bytes:
    data = json.dumps(obj).encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n".encode()
        + data
    )


def chat_delta(
    content: str | None = None, finish: str | None = None, **delta: Any
) -> dict[str, Any]:
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "served-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out
