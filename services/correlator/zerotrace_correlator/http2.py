"""HTTP/2 and gRPC spans of one connection: one span per stream, request HEADERS to the end
of the response (END_STREAM) or a reset. Pure.

h2c (the client preface in cleartext) and the plaintext of HTTP/2 over TLS (the libssl
uprobes) read the same. http2_frames.py reads each direction's frames across calls,
http2_hpack.py decodes header blocks with each direction's dynamic table; this module follows
the streams, interleaved as they come, and names them:
- HTTP/2: "METHOD /path" (the path without its query), http.request.method, url.path,
  http.response.status_code, network.protocol.version "2", server.address and server.port
  from :authority; an error when the status is 500 or more (400 or more with
  `client_view=True`: OpenTelemetry's rule for client spans), error.type the status code.
- gRPC (content-type application/grpc* on either side, or a grpc-status seen): protocol
  "grpc", named "package.Service/Method" with rpc.system, rpc.service, rpc.method and
  rpc.grpc.status_code from the trailers (or from the one HEADERS of a trailers-only answer);
  the messages each side sent are counted from the 5-byte prefixes in DATA (the payloads pass
  through, never kept). An error when grpc-status is not 0 (error.type its name, UNAVAILABLE)
  or is missing at the end.
- A stream reset (RST_STREAM) before its response ended is an error, error.type the
  RFC 9113 error code's name (CANCEL); streams above a server's GOAWAY last stream id end as
  errors "GOAWAY"; `close` gives the rest as incomplete.

Joined mid-connection (no preface first): fields from the static table and literals are kept;
a field whose name or value is a dynamic entry we never saw has the value UNKNOWN_VALUE
("?unknown"; a span name "?unknown /v1/x", a status "?unknown") and parsing goes on; frames of
streams opened before we looked are skipped (counted). See http2_hpack.py for why the indices
we know stay right.

LLM requests (h2_llm.py): a stream whose request names an LLM API (llm_apis.api_for's paths,
Triton's ModelStreamInfer) keeps its request body, bounded per stream and by
REQUEST_BODY_BUDGET over the connection's open streams, and hands its response DATA, with the
time of the call that carried it, to the API's reader; its span is an h2_llm.LlmProtoSpan
with the gen_ai attributes, and the correlator makes a derived.llm record of it. Other
streams' bodies are never kept.

Bounded: the frame reader's limits (a header block of 64 KiB, SETTINGS entries, frames up to
16 MiB streamed), each decoder's table (64 KiB), MAX_OPEN_STREAMS streams at once, and a
decoded header list counted past MAX_HEADER_LIST_BYTES. A stream over MAX_OPEN_STREAMS gives no
span (its header block is still decoded: the table must stay in step).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from zerotrace import names
from zerotrace_correlator import http2_frames as f
from zerotrace_correlator.h2_llm import LlmProtoSpan, StreamLlm, span_attributes
from zerotrace_correlator.http2_frames import DataPiece, Frame, FrameReader
from zerotrace_correlator.http2_hpack import MAX_TABLE_BYTES, Field, HpackDecoder, HpackError
from zerotrace_correlator.protocol_span import (
    REQUEST,
    RESPONSE,
    AttributeValue,
    ProtoSpan,
    Side,
    Status,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Streams open at once. Servers allow 100-250 concurrent streams (SETTINGS_MAX_CONCURRENT_
# STREAMS; grpc-go 100, nghttp2 100); 1024 leaves room for a client that opens many and for
# streams whose end we missed, each ~200 bytes.
MAX_OPEN_STREAMS = 1024
# SETTINGS_MAX_HEADER_LIST_SIZE as servers set it (nghttp2 64 KiB, Go 1 MiB): a block decoding
# to more is counted; the fields we keep are few and cut, so nothing grows with it.
MAX_HEADER_LIST_BYTES = 1 << 20
# Request bodies of LLM streams kept at once on one connection (each up to
# h2_llm.MAX_REQUEST_BODY_BYTES): a client multiplexing many long chats gets their prefixes.
REQUEST_BODY_BUDGET = 8 << 20
UNKNOWN = names.UNKNOWN_VALUE
_WANTED = frozenset(
    b":method :path :authority :status content-type content-encoding grpc-status".split()
)  # fmt: skip
_SETTINGS_TABLE, _SETTINGS_FRAME = 0x1, 0x5
_GRPC_PATH = re.compile(r"/([^/]+)/([^/]+)\Z")
GRPC_STATUS_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)  # fmt: skip
H2_ERROR_NAMES = (
    "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
    "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
    "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
)  # fmt: skip

# Counter names (besides the frame reader's and the decoders').
OVERFLOW_STREAMS = "h2_overflow_streams"  # over MAX_OPEN_STREAMS: no span
UNKNOWN_STREAM_FRAMES = "h2_unknown_stream_frames"  # streams opened before we looked
CUT_HEADER_BLOCKS = "h2_cut_header_blocks"  # over MAX_HEADER_BLOCK_BYTES: skipped
LONG_HEADER_LISTS = "h2_long_header_lists"  # decoded past MAX_HEADER_LIST_BYTES
UNKNOWN_FIELDS = "h2_unknown_fields"  # fields kept as UNKNOWN_VALUE


def recognise(first_bytes: bytes) -> bool:
    """The client preface (or its first 14 bytes and more), or, for a connection joined
    mid-way, frame headers that follow each other plausibly (http2_frames.plausible) for the
    bytes given: at least one whole header, each frame's header where the previous one ends.
    Never true for HTTP/1.x, TLS, Redis or the length-prefixed protocols whose first bytes
    are no known frame type or flags (their tests hold the cases)."""
    data = first_bytes
    if len(data) >= 14 and data[: len(PREFACE)] == PREFACE[: len(data)]:
        return True
    at = 0
    while at + f.HEADER_BYTES <= len(data):
        if not f.plausible(data[at : at + f.HEADER_BYTES]):
            return False
        at += f.HEADER_BYTES + int.from_bytes(data[at : at + 3], "big")
    return at > 0


def sent_by_server(first_bytes: bytes) -> bool:
    """Are these first bytes a server's? When they open with a SETTINGS frame (not an ACK):
    the server's connection preface, which servers such as grpcio's send as soon as they
    accept, so a capture or the server's own writes may show it before the client's preface.
    Joined mid-way, when the first HEADERS among them starts with :status (static entries
    8-14, or a literal named by entry 8)."""
    data, at = first_bytes, 0
    if data.startswith(PREFACE[:14]):
        return False
    if len(data) >= f.HEADER_BYTES:
        _, kind, flags, stream = f.unpack_header(data[: f.HEADER_BYTES])
        if kind == f.SETTINGS and not flags & f.ACK and stream == 0:
            return True
    while at + f.HEADER_BYTES < len(data):
        length, kind, flags, _ = f.unpack_header(data[at : at + f.HEADER_BYTES])
        if kind == f.HEADERS:
            skip = (1 if flags & f.PADDED else 0) + (5 if flags & f.PRIORITY_FLAG else 0)
            block = data[at + f.HEADER_BYTES + skip : at + f.HEADER_BYTES + length]
            if not block:
                return False
            first = block[0]
            return 8 <= first - 0x80 <= 14 or first in (0x48, 0x08, 0x18)
        at += f.HEADER_BYTES + length
    return False


@dataclass(slots=True)
class _Stream:
    start_ns: int
    method: str = ""
    path: str = ""
    authority: str = ""
    content_type: str = ""
    status: str = ""  # the final :status
    grpc_status: str = ""
    grpc_seen: bool = False
    request_bytes: int = 0
    response_bytes: int = 0
    # gRPC messages per side (REQUEST, RESPONSE): the length prefix read so far, the bytes
    # of the message still due, the messages begun.
    prefix: list[bytearray] = field(default_factory=lambda: [bytearray(), bytearray()])
    body_left: list[int] = field(default_factory=lambda: [0, 0])
    messages: list[int] = field(default_factory=lambda: [0, 0])
    llm: StreamLlm | None = None  # an LLM request's analysis (h2_llm.py)


class Http2Parser:
    """A ProtocolParser for HTTP/2 and gRPC: the client's bytes on the REQUEST side."""

    protocol = names.PROTOCOL_HTTP2

    def __init__(self, client_view: bool = False) -> None:
        self.client_view = client_view
        self._counters: dict[str, int] = {}
        self._readers = {side: FrameReader(self._counters, synced=False) for side in _SIDES}
        self._tables = {side: HpackDecoder(self._counters) for side in _SIDES}
        self._preface = 0  # preface bytes read; -1: none (joined mid-way)
        # A header block waiting for its CONTINUATIONs: its first frame, its bytes, the
        # wire bytes of its frames, whether it was cut.
        self._block: dict[Side, tuple[Frame, bytearray, int, bool] | None] = dict.fromkeys(_SIDES)
        self._streams: dict[int, _Stream] = {}
        self._error = ""
        self._closed = False
        self._llm_bodies = 0  # request body bytes kept by open LLM streams

    @property
    def error(self) -> str:
        return self._error

    @property
    def counters(self) -> Mapping[str, int]:
        return self._counters

    @property
    def joined_late(self) -> bool:
        return self._preface < 0

    def open_streams(self) -> int:
        return len(self._streams)

    def buffered_bytes(self) -> int:
        blocks = sum(len(b[1]) for b in self._block.values() if b is not None)
        blocks += sum(s.llm.buffered_bytes() for s in self._streams.values() if s.llm)
        return blocks + sum(r.buffered_bytes() for r in self._readers.values())

    def feed(self, side: Side, data: bytes, start_ns: int, end_ns: int) -> list[ProtoSpan]:
        out: list[ProtoSpan] = []
        if self._error or self._closed or not data:
            return out
        if side == REQUEST and self._preface >= 0 and self._preface < len(PREFACE):
            data = self._read_preface(data)
        reader = self._readers[side]
        for item in reader.feed(data, start_ns):
            if isinstance(item, DataPiece):
                self._data(side, item, end_ns)
            else:
                self._frame(side, item, end_ns, out)
            if self._error:
                break
        if reader.error and not self._error:
            self._error = f"{side.lower()}: {reader.error}"
        return out

    def close(self, now_ns: int) -> list[ProtoSpan]:
        """Every stream still open, as an incomplete span ending now."""
        out = [self._span(s, "incomplete", now_ns, "") for s in self._streams.values()]
        self._streams.clear()
        self._closed = True
        return out

    # -- frames ---------------------------------------------------------------------------

    def _read_preface(self, data: bytes) -> bytes:
        want = PREFACE[self._preface :]
        seen = data[: len(want)]
        if want.startswith(seen):
            self._preface += len(seen)
            if self._preface == len(PREFACE):
                self._readers[REQUEST].synced = True
            return data[len(seen) :]
        if self._preface:
            self._error = "request: not the HTTP/2 client preface"
            return b""
        self._preface = -1  # joined mid-way: tables set before we looked may be large
        for table in self._tables.values():
            table.max_size = MAX_TABLE_BYTES
        return data

    def _frame(self, side: Side, frame: Frame, end_ns: int, out: list[ProtoSpan]) -> None:
        kind = frame.type
        pending = self._block[side]
        if pending is not None and (kind != f.CONTINUATION or frame.stream != pending[0].stream):
            self._error = f"{side.lower()}: a header block not continued"
            return
        stream = self._streams.get(frame.stream)
        if stream is not None and kind != f.CONTINUATION:  # a block's are added at its end
            size = f.HEADER_BYTES + frame.length
            if side == REQUEST:
                stream.request_bytes += size
            else:
                stream.response_bytes += size
        if kind in (f.HEADERS, f.PUSH_PROMISE):
            self._block_start(side, frame, end_ns, out)
        elif kind == f.CONTINUATION:
            self._continuation(side, frame, end_ns, out)
        elif kind == f.DATA:
            if stream is None:
                self._count(UNKNOWN_STREAM_FRAMES)
            elif frame.flags & f.END_STREAM and side == RESPONSE:
                out.append(self._end(frame.stream, end_ns))
            elif frame.flags & f.END_STREAM and stream.llm is not None:  # the request's end
                self._llm_bodies -= stream.llm.request_end()
        elif kind == f.RST_STREAM and stream is not None:
            code = int.from_bytes(frame.payload, "big")
            out.append(self._end(frame.stream, end_ns, _name(H2_ERROR_NAMES, code)))
        elif kind == f.SETTINGS and not frame.flags & f.ACK:
            self._settings(side, frame.payload)
        elif kind == f.GOAWAY and side == RESPONSE:
            last = int.from_bytes(frame.payload[:4], "big") & 0x7FFFFFFF
            for sid in [sid for sid in self._streams if sid > last and sid % 2]:
                out.append(self._end(sid, end_ns, "GOAWAY"))

    def _settings(self, side: Side, payload: bytes) -> None:
        """A side's settings bound what the other side sends it."""
        other: Side = RESPONSE if side == REQUEST else REQUEST
        for at in range(0, len(payload) - 5, 6):
            key = int.from_bytes(payload[at : at + 2], "big")
            value = int.from_bytes(payload[at + 2 : at + 6], "big")
            if key == _SETTINGS_TABLE:
                self._tables[other].setting = value
            elif key == _SETTINGS_FRAME:
                self._readers[other].max_frame_bytes = value

    def _block_start(self, side: Side, frame: Frame, end_ns: int, out: list[ProtoSpan]) -> None:
        payload, flags = frame.payload, frame.flags
        skip = 1 if flags & f.PADDED else 0
        pad = payload[0] if skip and payload else 0
        skip += 5 if frame.type == f.HEADERS and flags & f.PRIORITY_FLAG else 0
        skip += 4 if frame.type == f.PUSH_PROMISE else 0
        if skip + pad > frame.length:
            self._error = f"{side.lower()}: padding longer than the frame"
            return
        fragment = payload[skip : max(skip, frame.length - pad)]
        wire = f.HEADER_BYTES + frame.length
        self._block[side] = (frame, bytearray(fragment), wire, frame.cut)
        if flags & f.END_HEADERS:
            self._block_end(side, end_ns, out)

    def _continuation(self, side: Side, frame: Frame, end_ns: int, out: list[ProtoSpan]) -> None:
        pending = self._block[side]
        if pending is None:
            if not self.joined_late:
                self._error = f"{side.lower()}: CONTINUATION without HEADERS"
                return
            self._tables[side].lose_sync()  # its HEADERS came before we looked
            return
        first, block, wire, cut = pending
        if frame.cut or len(block) + frame.length > f.MAX_HEADER_BLOCK_BYTES:
            cut = True
            block.clear()
        elif not cut:
            block += frame.payload
        self._block[side] = (first, block, wire + f.HEADER_BYTES + frame.length, cut)
        if frame.flags & f.END_HEADERS:
            self._block_end(side, end_ns, out)

    def _block_end(self, side: Side, end_ns: int, out: list[ProtoSpan]) -> None:
        pending = self._block[side]
        assert pending is not None
        first, block, wire, cut = pending
        sid = first.stream
        self._block[side] = None
        if cut:
            self._count(CUT_HEADER_BLOCKS)
            self._tables[side].lose_sync()
            return
        try:
            fields = self._tables[side].decode(bytes(block), _WANTED)
        except HpackError as exc:
            self._error = f"{side.lower()}: HPACK: {exc}"
            return
        if first.type == f.PUSH_PROMISE:
            at = 1 if first.flags & f.PADDED else 0
            promised = int.from_bytes(first.payload[at : at + 4], "big") & 0x7FFFFFFF
            self._open(promised, first.start_ns, fields, 0)
            return
        stream = self._streams.get(sid)
        if side == REQUEST:
            if stream is None:
                self._open(sid, first.start_ns, fields, wire)
            else:  # request trailers
                stream.request_bytes += wire - f.HEADER_BYTES - first.length
        elif stream is None:
            self._count(UNKNOWN_STREAM_FRAMES)
        else:
            stream.response_bytes += wire - f.HEADER_BYTES - first.length
            content_type, coding = self._response_fields(stream, fields)
            if stream.llm is None and stream.status and content_type:
                stream.llm = StreamLlm.guess(
                    stream.method, stream.path, content_type, self._counters
                )
            if stream.llm is not None and stream.status:
                stream.llm.response_head(stream.status, content_type, first.start_ns, coding)
            if first.flags & f.END_STREAM:
                out.append(self._end(sid, end_ns))

    def _open(self, sid: int, start_ns: int, fields: list[Field], wire: int) -> None:
        if len(self._streams) >= MAX_OPEN_STREAMS:
            self._count(OVERFLOW_STREAMS)
            return
        stream = _Stream(start_ns, request_bytes=wire)
        values = self._values(fields, (b":method", b":path", b":authority", b"content-type"))
        stream.method, stream.path, stream.authority, stream.content_type = values
        stream.llm = StreamLlm.start(stream.method, stream.path, self._counters)
        self._streams[sid] = stream

    def _response_fields(self, stream: _Stream, fields: list[Field]) -> tuple[str, str]:
        """Takes a response's headers or trailers; returns their content-type and
        content-encoding (an unknown coding as none: the body is then read as it came)."""
        status, content_type, grpc = self._values(
            fields, (b":status", b"content-type", b"grpc-status")
        )
        # Not among `_values`' fields: an unknown one is no coding, and not counted again.
        coding = next((v for n, v in fields if n == b"content-encoding" and v is not None), b"")
        trailers = bool(stream.status)
        if status and not trailers and not status.startswith("1"):  # 1xx: a final one follows
            stream.status = status
        stream.content_type = stream.content_type or content_type
        # In trailers an unknown field may be grpc-status; in headers it is too rare a guess.
        if grpc and (trailers or any(name == b"grpc-status" for name, _ in fields)):
            stream.grpc_status, stream.grpc_seen = grpc, True
        return content_type, coding.decode("latin-1")

    def _values(self, fields: list[Field], wanted: tuple[bytes, ...]) -> tuple[str, ...]:
        """The value of each wanted field ("" when absent, UNKNOWN when a dynamic entry we
        never saw: its value, or its name when that field is absent)."""
        found: dict[bytes, str] = {}
        nameless = False
        size = 0
        for name, value in fields:
            size += len(name or b"") + len(value or b"") + 32
            if name is None:
                nameless = True
            elif name not in found:
                found[name] = UNKNOWN if value is None else value.decode("utf-8", "replace")
        if size > MAX_HEADER_LIST_BYTES:
            self._count(LONG_HEADER_LISTS)
        out = tuple(found.get(name, UNKNOWN if nameless else "") for name in wanted)
        self._count(UNKNOWN_FIELDS, sum(value == UNKNOWN for value in out))
        return out

    # -- DATA and gRPC messages -------------------------------------------------------------

    def _data(self, side: Side, piece: DataPiece, time_ns: int) -> None:
        stream = self._streams.get(piece.stream)
        if stream is None:
            return
        if stream.llm is not None:
            if side == REQUEST:
                room = REQUEST_BODY_BUDGET - self._llm_bodies
                self._llm_bodies += stream.llm.request_data(piece.data, room)
            else:
                stream.llm.response_data(piece.data, time_ns)
        k = 0 if side == REQUEST else 1
        prefix, data, at = stream.prefix[k], piece.data, 0
        while at < len(data):
            if stream.body_left[k]:
                take = min(stream.body_left[k], len(data) - at)
                stream.body_left[k] -= take
                at += take
                continue
            take = min(5 - len(prefix), len(data) - at)
            prefix += data[at : at + take]
            at += take
            if len(prefix) == 5:  # a compressed flag, then the message's length
                stream.messages[k] += 1
                stream.body_left[k] = int.from_bytes(prefix[1:5], "big")
                prefix.clear()

    # -- spans ----------------------------------------------------------------------------

    def _end(self, sid: int, end_ns: int, reset: str = "") -> ProtoSpan:
        stream = self._streams.pop(sid)
        return self._span(stream, "error" if reset else "ok", end_ns, reset)

    def _span(self, s: _Stream, status: Status, end_ns: int, error_type: str) -> ProtoSpan:
        grpc = s.grpc_seen or s.content_type.startswith("application/grpc")
        ended, reason = status == "ok", error_type or status  # before an answer's error
        attributes: dict[str, AttributeValue] = {}
        host, port = _authority(s.authority)
        if host:
            attributes[names.ATTR_SERVER_ADDRESS] = host
        if port is not None:
            attributes[names.ATTR_SERVER_PORT] = port
        path = s.path.split("?", 1)[0]
        if grpc:
            name, service, method = _grpc_name(path)
            attributes[names.ATTR_RPC_SYSTEM] = names.PROTOCOL_GRPC
            attributes[names.ATTR_RPC_SERVICE] = service
            attributes[names.ATTR_RPC_METHOD] = method
            attributes[names.ATTR_RPC_REQUEST_MESSAGES] = s.messages[0]
            attributes[names.ATTR_RPC_RESPONSE_MESSAGES] = s.messages[1]
            code = _code(s.grpc_status)
            if s.grpc_status:
                attributes[names.ATTR_RPC_GRPC_STATUS_CODE] = code
            if status == "ok" and isinstance(code, int) and code:
                status, error_type = "error", _name(GRPC_STATUS_NAMES, code)
            elif status == "ok" and not s.grpc_status:
                status, error_type = "error", _http_error(s.status, 400) or "_OTHER"
        else:
            name = f"{s.method or UNKNOWN} {path or UNKNOWN}"
            attributes[names.ATTR_HTTP_METHOD] = s.method or UNKNOWN
            attributes[names.ATTR_URL_PATH] = path or UNKNOWN
            if status == "ok" and (http_error := _http_error(s.status, self._error_from())):
                status, error_type = "error", http_error
        if s.status:
            attributes[names.ATTR_HTTP_STATUS] = _code(s.status)
        attributes[names.ATTR_NETWORK_PROTOCOL_VERSION] = "2"
        if status == "incomplete" and self._error:
            attributes[names.ATTR_ERROR_MESSAGE] = self._error
        llm = None
        if s.llm is not None:
            self._llm_bodies -= s.llm.request_end()
            s.llm.grpc_status = s.grpc_status
            llm = s.llm.finish(end_ns, ended, reason)
            s.llm = None
            if llm.counts:
                attributes.update(span_attributes(llm))
            if llm.counts and llm.outcome.failed and status == "ok":  # as HTTP/1.1's spans
                status, error_type = "error", (llm.error or "error").split(":", 1)[0]
                attributes[names.ATTR_ERROR_MESSAGE] = llm.error or ""
        return LlmProtoSpan(
            protocol=names.PROTOCOL_GRPC if grpc else names.PROTOCOL_HTTP2,
            name=name,
            start_ns=s.start_ns,
            end_ns=max(end_ns, s.start_ns),
            status=status,
            attributes=attributes,
            error_type=error_type,
            request_bytes=s.request_bytes,
            response_bytes=s.response_bytes,
            llm=llm,
        )

    def _error_from(self) -> int:
        return 400 if self.client_view else 500

    def _count(self, name: str, by: int = 1) -> None:
        if by:
            self._counters[name] = self._counters.get(name, 0) + by


_SIDES: tuple[Side, Side] = (REQUEST, RESPONSE)


def _code(text: str) -> int | str:
    return int(text) if text.isdigit() and len(text) < 10 else text


def _name(table: tuple[str, ...], code: int) -> str:
    return table[code] if 0 <= code < len(table) else str(code)


def _http_error(status: str, error_from: int) -> str:
    code = _code(status)
    return status if isinstance(code, int) and code >= error_from else ""


def _grpc_name(path: str) -> tuple[str, str, str]:
    """(span name, rpc.service, rpc.method) of a gRPC path /package.Service/Method."""
    match = _GRPC_PATH.match(path)
    if match is None:
        return path or UNKNOWN, UNKNOWN, UNKNOWN
    return f"{match[1]}/{match[2]}", match[1], match[2]


def _authority(authority: str) -> tuple[str, int | None]:
    """host and port of :authority (host, host:port, [v6]:port); the port when numeric."""
    if authority == UNKNOWN:
        return UNKNOWN, None
    host, port = authority, ""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif authority.count(":") == 1:
        host, port = authority.split(":")
    return host, int(port) if port.isdigit() and len(port) <= 5 else None
