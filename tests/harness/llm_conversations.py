"""Synthetic OpenAI-compatible streaming conversations as raw.socket records, interleaved across
connections the way a busy client's calls reach the bus. For the delivery tests (a worker
killed mid-stream) where the input must be known record by record, with no eBPF in between."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.http_wire import CHAT_PATH, LAST_CHUNK, SSE_HEAD, chat_delta, chunk, post, sock, sse

MS = 1_000_000


def conversation(
    conn: str, t0: int, tokens: int, node: str = "n1", model: str = "served-model"
) -> list[dict[str, Any]]:
    """One keep-alive-style chat stream seen at the client: request, SSE head, one chunk per
    token 1 ms apart, a usage chunk, [DONE] and the last chunk (the exchange ends in-band)."""
    request = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    out = [sock("EGRESS", post(CHAT_PATH, request), t0, conn=conn)]
    out.append(sock("INGRESS", SSE_HEAD, t0 + 5 * MS, conn=conn))
    t = t0 + 10 * MS
    for i in range(tokens):
        out.append(sock("INGRESS", chunk(sse(chat_delta(f"w{i}"))), t, conn=conn))
        t += MS
    usage = {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": 3 + tokens}
    tail = sse(json.dumps({"choices": [], "usage": usage, "model": model})) + sse("[DONE]")
    out.append(sock("INGRESS", chunk(tail), t, conn=conn))
    out.append(sock("INGRESS", LAST_CHUNK, t + MS, conn=conn))
    for record in out:
        record["node_id"] = node
    return out


def interleaved(
    count: int, t0: int, tokens: int = 8, node: str = "n1", prefix: str = "c"
) -> list[list[dict[str, Any]]]:
    """`count` conversations started together and streamed side by side; returned as rounds:
    round k holds the k-th record of every conversation still going."""
    convs = [conversation(f"{prefix}{i}", t0 + i * 1000, tokens, node) for i in range(count)]
    rounds = max(len(c) for c in convs)
    return [[c[k] for c in convs if k < len(c)] for k in range(rounds)]
