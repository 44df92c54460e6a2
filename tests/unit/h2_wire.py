"""HTTP/2 wire bytes for the redactor's tests and the fuzz corpus, made with the python-hyper
`hpack` encoder (Huffman strings, the dynamic table, never-indexed fields, as a real client
writes them) and `hyperframe` frames; read back the same way, so a test judges the redacted
bytes with a decoder that is not the redactor's."""

from __future__ import annotations

import json
from collections.abc import Sequence

from hpack import Decoder, Encoder, NeverIndexedHeaderTuple
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    HeadersFrame,
    PingFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
KEY = "sk-proj-Zx81bQ3mT4uV5wX6yZ7aB8cD9e"
GOOGLE_KEY = "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv"
PROMPT = 'Summarise "Q3 revenue" for ACME, confidential'
ANSWER = "Revenue rose"
Headers = list[tuple[str, str]]


def request_headers(i: int = 0) -> Headers:
    """A chat request's headers: credentials under static, literal and (from the second
    request on) dynamic-table names, and a key in the query string."""
    return [
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "llm.internal"),
        (":path", f"/v1beta/models/m:generate?key={GOOGLE_KEY}"),
        ("authorization", f"Bearer {KEY}{i}"),
        ("x-api-key", f"0123456789abcdef{i}"),
        ("cookie", f"session=c00k1e-{i}"),
        ("content-type", "application/json"),
        ("user-agent", "zerotrace-test/1.0"),
        ("x-request-id", f"req-{i}"),
    ]


def response_headers(i: int = 0) -> Headers:
    return [
        (":status", "200"),
        ("content-type", "text/event-stream"),
        ("set-cookie", f"id=s3cr3t-id-{i}; HttpOnly"),
        ("server", "vllm"),
    ]


def chat_body(i: int = 0) -> bytes:
    body = {
        "model": "llama-3.1-8b-instruct",
        "messages": [{"role": "user", "content": f"{PROMPT} {i}"}],
        "stream": True,
    }
    return json.dumps(body).encode()


def sse_chunks(i: int = 0) -> list[bytes]:
    delta = {"choices": [{"delta": {"content": f"{ANSWER} {i}"}, "finish_reason": None}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 2}}
    return [
        b"data: " + json.dumps(delta).encode() + b"\n\n",
        b"data: " + json.dumps(usage).encode() + b"\n\n",
        b"data: [DONE]\n\n",
    ]


def block(encoder: Encoder, headers: Headers, huffman: bool) -> bytes:
    """A header block; authorization never indexed, as h2 and nghttp2 send it."""
    fields = [
        NeverIndexedHeaderTuple(n, v) if n in ("authorization", "proxy-authorization") else (n, v)
        for n, v in headers
    ]
    return encoder.encode(fields, huffman=huffman)


def headers_frames(stream: int, data: bytes, cut: int | None, pad: int, end: bool) -> bytes:
    """A HEADERS frame (padded, with a priority field when *pad*), and a CONTINUATION from
    *cut* on when given."""
    first = data if cut is None else data[:cut]
    flags = {"END_HEADERS"} if cut is None else set()
    if end:
        flags.add("END_STREAM")
    frame = HeadersFrame(stream, first, flags=flags)
    if pad:
        frame.flags.add("PADDED")
        frame.flags.add("PRIORITY")
        frame.pad_length = pad
        frame.depends_on, frame.stream_weight = 0, 15
    out = frame.serialize()
    if cut is not None:
        out += ContinuationFrame(stream, data[cut:], flags={"END_HEADERS"}).serialize()
    return out


def data_frames(stream: int, pieces: Sequence[bytes], pad: int, end: bool = True) -> bytes:
    out = b""
    for k, piece in enumerate(pieces):
        frame = DataFrame(stream, piece)
        if pad:
            frame.flags.add("PADDED")
            frame.pad_length = pad
        if end and k == len(pieces) - 1:
            frame.flags.add("END_STREAM")
        out += frame.serialize()
    return out


def client_wire(requests: int = 3, huffman: bool = True, pad: int = 0) -> bytes:
    """A client's side: preface, SETTINGS, then *requests* chat requests on streams 1, 3, ...,
    the first one's header block cut by a CONTINUATION inside a credential value, its body
    in two DATA frames."""
    encoder = Encoder()
    out = PREFACE + SettingsFrame(0, settings={1: 65536, 4: 1 << 20}).serialize()
    out += WindowUpdateFrame(0, window_increment=1 << 20).serialize()
    for i in range(requests):
        stream = 2 * i + 1
        data = block(encoder, request_headers(i), huffman)
        cut = data.find(KEY[:6].encode()) + 3 if not huffman and i == 0 else None
        out += headers_frames(stream, data, cut, pad, end=False)
        body = chat_body(i)
        out += data_frames(stream, [body[:50], body[50:]] if i == 0 else [body], pad)
    return out + PingFrame(0, opaque_data=b"12345678").serialize()


def server_wire(responses: int = 3, huffman: bool = True, pad: int = 0) -> bytes:
    """A server's side: SETTINGS, its ACK, then a streamed chat answer per request."""
    encoder = Encoder()
    out = SettingsFrame(0, settings={3: 100}).serialize()
    out += SettingsFrame(0, flags={"ACK"}).serialize()
    for i in range(responses):
        stream = 2 * i + 1
        out += headers_frames(
            stream, block(encoder, response_headers(i), huffman), None, pad, False
        )
        out += data_frames(stream, sse_chunks(i), pad)
    return out


def read_wire(wire: bytes) -> list[tuple[int, Headers | bytes]]:
    """(stream, headers) per header block and (stream, bytes) per DATA frame, in order, read
    with `hyperframe` and one `hpack` decoder; raises on what either refuses."""
    decoder = Decoder()
    at = len(PREFACE) if wire.startswith(PREFACE) else 0
    out: list[tuple[int, Headers | bytes]] = []
    pending = b""
    while at < len(wire):
        frame, length = Frame.parse_frame_header(memoryview(wire[at : at + 9]))
        frame.parse_body(memoryview(wire[at + 9 : at + 9 + length]))
        at += 9 + length
        if isinstance(frame, HeadersFrame | ContinuationFrame):
            pending += frame.data
            if "END_HEADERS" in frame.flags:
                fields = decoder.decode(pending, raw=True)
                out.append((frame.stream_id, [(n.decode(), v.decode()) for n, v in fields]))
                pending = b""
        elif isinstance(frame, DataFrame):
            out.append((frame.stream_id, bytes(frame.data)))
    return out


def headers_of(fields: list[tuple[int, Headers | bytes]]) -> list[Headers]:
    return [f for _, f in fields if isinstance(f, list)]


def bodies_of(fields: list[tuple[int, Headers | bytes]]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for stream, f in fields:
        if isinstance(f, bytes):
            out[stream] = out.get(stream, b"") + f
    return out


def starred(value: str) -> bool:
    return bool(value) and set(value) == {"*"}
