"""Running one LLM API exchange through HttpLlmCorrelator, for the tests of the non-OpenAI
readers (test_anthropic_stream.py, test_gemini_stream.py, test_ollama_stream.py,
test_tgi_stream.py)."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.http_wire import LAST_CHUNK, chunk, post, sock
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace_correlator.http_llm_step import HttpLlmCorrelator, Output

T0 = 1_000_000
READ_NS = 5  # http_wire.sock's read duration: a read's bytes arrive at its end


def head(content_type: str, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
    ).encode()


def streamed(
    path: str, request: dict[str, Any] | bytes, content_type: str, pieces: list[bytes]
) -> list[dict[str, Any]]:
    """The request at T0, the head at T0 + 40 us, piece i (each its own chunk and read) at
    T0 + 50 us + i * 10 us, the last chunk 100 us after the last piece."""
    out = [
        sock("EGRESS", post(path, request), T0),
        sock("INGRESS", head(content_type), T0 + 40_000),
    ]
    for i, piece in enumerate(pieces):
        out.append(sock("INGRESS", chunk(piece), piece_time(i)))
    out.append(sock("INGRESS", LAST_CHUNK, piece_time(len(pieces)) + 100_000))
    return out


def piece_time(i: int) -> int:
    """When piece i was read."""
    return T0 + 50_000 + 10_000 * i


def arrived(i: int) -> int:
    """When piece i's bytes arrived (the end of its read)."""
    return piece_time(i) + READ_NS


def whole(
    path: str,
    request: dict[str, Any] | bytes,
    body: dict[str, Any] | list[Any],
    status: str = "200 OK",
) -> list[dict[str, Any]]:
    """A non-streamed exchange: request at T0, the JSON answer in one read at T0 + 90 us."""
    return [
        sock("EGRESS", post(path, request), T0),
        sock("INGRESS", _json(body, status), T0 + 90_000),
    ]


def _json(body: dict[str, Any] | list[Any], status: str) -> bytes:
    data = json.dumps(body).encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n".encode()
        + data
    )


def run(
    records: list[dict[str, Any]],
    codec: AvroCodec,
    correlator: HttpLlmCorrelator | None = None,
    advance_to: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The one span and one derived.llm record the exchange gives, checked to encode;
    `advance_to` moves the correlator's clock (a close waits out its grace)."""
    correlator = HttpLlmCorrelator() if correlator is None else correlator
    out: list[Output] = []
    for record in records:
        out += correlator.feed_conn(record) if "kind" in record else correlator.feed_socket(record)
    if advance_to is not None:
        out += correlator.advance(advance_to)
    for name, datum in out:
        assert codec.decode(codec.encode(name, datum)) == (name, datum)
    [span] = [d for r, d in out if r == names.DERIVED_SPAN.record]
    [llm] = [d for r, d in out if r == names.DERIVED_LLM.record]
    return span, llm
