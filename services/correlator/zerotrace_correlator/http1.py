"""Incremental HTTP/1.1 framing of one direction of a connection (RFC 9112). Pure.

One parser reads either requests or responses, fed the bytes of socket records in order, each
with the time of the record that carried them. It reports what it framed as events:
`MessageHead` (start line and headers, with the time of the first byte), `BodyPiece` (decoded
body bytes: chunk framing removed), `BodyGap` (body bytes we know were there but did not see:
capture truncation) and `MessageEnd`. Messages follow each other back to back (keep-alive,
pipelining); a response parser pairs each final response with the methods queued by
`expect_response_to`, FIFO, because a response's framing depends on its request (HEAD).

Never raises on input: garbage puts the parser in a terminal error state with a reason
(`error`), and only the header section and one chunk-size line are ever buffered, both capped,
so a peer cannot make us hold more than MAX_HEADER_BYTES whatever it sends.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from enum import Enum, auto

# Header sections past this are refused: common servers cap theirs at 8-64 KiB (nginx 8 KiB
# per line, Node 16 KiB, uvicorn/h11 64 KiB), so no real peer sends more.
MAX_HEADER_BYTES = 64 * 1024
# A start line is a method, a path and a version; paths past 8 KiB are rejected by most servers.
MAX_START_LINE_BYTES = 8 * 1024
# A chunk-size line is hex digits plus rare extensions; 4 KiB is far beyond any real one.
MAX_CHUNK_LINE_BYTES = 4 * 1024
# Methods are short upper-case tokens; refusing anything else rejects binary protocols (TLS,
# Redis, Postgres) on their first bytes instead of after buffering a header limit of them.
MAX_METHOD_CHARS = 24
# 16 hex digits is already 2**64 bytes; longer sizes are garbage.
MAX_CHUNK_SIZE_DIGITS = 16

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE_SPLIT = re.compile(rb"\r?\n")
_METHOD_PREFIX = re.compile(rb"[A-Z][A-Z0-9_-]*")
_REQUEST_LINE = re.compile(rb"([A-Z][A-Z0-9_-]{0,23}) ([^\s]+) HTTP/(\d)\.(\d)")
_STATUS_LINE = re.compile(rb"HTTP/(\d)\.(\d) (\d{3})(?: ([^\r\n]*))?")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_PLAIN_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,%d})\r?" % MAX_CHUNK_SIZE_DIGITS)


@dataclass(frozen=True)
class MessageHead:
    is_request: bool
    method: str  # requests; "" for responses
    target: str  # requests; "" for responses
    status: int  # responses; 0 for requests
    reason: str
    version: str  # "1.1"
    headers: tuple[tuple[str, str], ...]  # names lower-cased, in wire order
    start_ns: int  # time of the record that carried the message's first byte
    end_ns: int  # time of the record that completed the header section

    def header(self, name: str) -> str | None:
        """The first value of a header (name in lower case)."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


# The events of a body (one or more per record of every stream) are not frozen: a frozen
# dataclass's __init__ pays a setattr call per field, and nothing mutates or hashes them.
@dataclass(slots=True)
class BodyPiece:
    data: bytes
    time_ns: int


@dataclass(slots=True)
class BodyGap:
    size: int
    time_ns: int


@dataclass(slots=True)
class MessageEnd:
    time_ns: int  # time of the record that carried the last byte
    complete: bool
    reason: str | None = None  # why incomplete


Event = MessageHead | BodyPiece | BodyGap | MessageEnd


class _State(Enum):
    HEAD = auto()
    LENGTH = auto()
    UNTIL_CLOSE = auto()
    CHUNK_SIZE = auto()
    CHUNK_DATA = auto()
    CHUNK_CRLF = auto()
    TRAILERS = auto()
    OPAQUE = auto()  # after 101 Switching Protocols or a CONNECT tunnel: not HTTP any more
    ERROR = auto()
    CLOSED = auto()


class Http1Parser:
    """Frames requests (is_request=True) or responses from one direction's bytes."""

    def __init__(self, is_request: bool) -> None:
        self.is_request = is_request
        self.error: str | None = None
        self._state = _State.HEAD
        self._buf = bytearray()
        self._remaining = 0
        self._saw_cr = False
        self._in_message = False  # a MessageHead was emitted and its MessageEnd not yet
        self._start_ns = 0
        self._last_ns = 0
        self._methods: deque[str] = deque()
        self._then_opaque = False

    @property
    def upgraded(self) -> bool:
        return self._state is _State.OPAQUE

    @property
    def in_message(self) -> bool:
        """True between a message's first byte and its end."""
        return self._in_message or bool(self._buf and self._state is _State.HEAD)

    def buffered_bytes(self) -> int:
        return len(self._buf)

    def expect_response_to(self, method: str) -> None:
        """Response parsers: queue the method of the next request sent on the connection."""
        self._methods.append(method)

    def feed(self, data: bytes, time_ns: int) -> list[Event]:
        out: list[Event] = []
        pos = 0
        while pos < len(data) and self._state not in _TERMINAL:
            pos = self._step(data, pos, time_ns, out)
        return out

    def skip(self, size: int, time_ns: int, reason: str = "capture truncated") -> list[Event]:
        """`size` bytes passed that the capture did not keep (a truncated payload, or events
        lost on the way: `reason`). Framing survives when they fall inside a body of known
        extent; anywhere else we lose sync."""
        out: list[Event] = []
        if size <= 0 or self._state in _TERMINAL:
            return out
        self._last_ns = time_ns
        if self._state is _State.UNTIL_CLOSE:
            out.append(BodyGap(size, time_ns))
        elif self._state in (_State.LENGTH, _State.CHUNK_DATA) and size <= self._remaining:
            out.append(BodyGap(size, time_ns))
            self._remaining -= size
            if self._remaining == 0:
                self._body_done(time_ns, out)
        else:
            self._fail(reason, time_ns, out)
        return out

    def close(self, reason: str = "connection closed") -> list[Event]:
        """The connection closed (or is given up, for `reason`): a body read until close ends
        here; any other message in flight ends incomplete. A message ends at its last byte
        seen, not at the moment we learn of the close."""
        out: list[Event] = []
        if self._state is _State.UNTIL_CLOSE:
            out.append(MessageEnd(self._last_ns, complete=True))
        elif self._in_message:
            out.append(MessageEnd(self._last_ns, complete=False, reason=reason))
        self._in_message = False
        self._buf.clear()
        if self._state is not _State.ERROR:
            self._state = _State.CLOSED
        return out

    # -- states ---------------------------------------------------------------------------

    def _step(self, data: bytes, pos: int, t: int, out: list[Event]) -> int:
        self._last_ns = t
        state = self._state
        if state is _State.HEAD:
            return self._head(data, pos, t, out)
        if state in (_State.LENGTH, _State.CHUNK_DATA):
            take = min(self._remaining, len(data) - pos)
            out.append(BodyPiece(data[pos : pos + take], t))
            self._remaining -= take
            if self._remaining == 0:
                if state is _State.LENGTH:
                    self._end(t, out)
                else:
                    self._state = _State.CHUNK_CRLF
            return pos + take
        if state is _State.UNTIL_CLOSE:
            out.append(BodyPiece(data[pos:], t))
            return len(data)
        if state is _State.CHUNK_SIZE:
            return self._chunk_size(data, pos, t, out)
        if state is _State.CHUNK_CRLF:
            byte = data[pos]
            if byte == 0x0D and not self._saw_cr:
                self._saw_cr = True
            elif byte == 0x0A:
                self._saw_cr = False
                self._state = _State.CHUNK_SIZE
            else:
                self._fail("chunk data not followed by CRLF", t, out)
            return pos + 1
        return self._trailers(data, pos, t, out)

    def _head(self, data: bytes, pos: int, t: int, out: list[Event]) -> int:
        if not self._buf:
            # Robust servers ignore empty lines before a message (RFC 9112 section 2.2).
            while pos < len(data) and data[pos] in b"\r\n":
                pos += 1
            if pos == len(data):
                return pos
            self._start_ns = t
        old = len(self._buf)
        self._buf += data[pos : pos + MAX_HEADER_BYTES - old]
        match = _HEAD_END.search(self._buf, max(0, old - 3))
        if match is None:
            reason = self._implausible_prefix()
            if reason is None and len(self._buf) >= MAX_HEADER_BYTES:
                reason = "header section too large"
            if reason is not None:
                self._fail(reason, t, out)
            return pos + len(self._buf) - old
        head_bytes = bytes(self._buf[: match.start()])
        self._buf.clear()
        self._parse_head(head_bytes, t, out)
        return pos + match.end() - old

    def _implausible_prefix(self) -> str | None:
        """Rejects a partial start line as soon as it cannot be HTTP/1.x."""
        newline = self._buf.find(b"\n")
        line = bytes(self._buf if newline < 0 else self._buf[:newline])
        if newline < 0 and len(line) > MAX_START_LINE_BYTES:
            return "start line too long"
        if not self.is_request:
            return None if line[:5] == b"HTTP/"[: len(line)] else "not an HTTP response"
        match = _METHOD_PREFIX.match(line)
        if match is None or match.end() > MAX_METHOD_CHARS:
            return "not an HTTP request"
        rest = line[match.end() :].rstrip(b"\r")
        if rest and (rest[:1] != b" " or _CONTROL.search(rest)):
            return "not an HTTP request"
        return None

    def _parse_head(self, raw: bytes, t: int, out: list[Event]) -> None:
        lines = _LINE_SPLIT.split(raw)
        start = lines[0]
        if self.is_request:
            req = _REQUEST_LINE.fullmatch(start)
            if req is None:
                return self._fail("malformed request line", t, out)
            major, minor = req.group(3), req.group(4)
            method, target = req.group(1).decode(), req.group(2).decode("latin-1")
            status, reason = 0, ""
        else:
            resp = _STATUS_LINE.fullmatch(start)
            if resp is None:
                return self._fail("malformed status line", t, out)
            major, minor = resp.group(1), resp.group(2)
            method, target = "", ""
            status, reason = int(resp.group(3)), (resp.group(4) or b"").decode("latin-1")
        if major != b"1":
            return self._fail(f"not HTTP/1.x (HTTP/{major.decode()}.{minor.decode()})", t, out)
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if line[:1] in (b" ", b"\t") and headers:  # obsolete line folding: join
                key, text = headers[-1]
                headers[-1] = (key, f"{text} {line.strip().decode('latin-1')}")
                continue
            name, colon, value = line.partition(b":")
            if not colon or _TOKEN.fullmatch(name) is None:
                return self._fail("malformed header line", t, out)
            headers.append((name.decode().lower(), value.strip().decode("latin-1")))
        version = f"{major.decode()}.{minor.decode()}"
        head = MessageHead(
            self.is_request, method, target, status, reason, version, tuple(headers),
            self._start_ns, t,
        )  # fmt: skip
        self._frame(head, t, out)

    def _frame(self, head: MessageHead, t: int, out: list[Event]) -> None:
        """Body length per RFC 9112 section 6.3."""
        method = ""
        if not head.is_request:
            if head.status < 200:
                # Interim responses (100 Continue) have no body and do not answer the request,
                # except 101, after which the connection speaks another protocol.
                self._then_opaque = head.status == 101
                return self._bodiless(head, t, out)
            method = self._methods.popleft() if self._methods else ""
            if method == "CONNECT" and head.status < 300:
                self._then_opaque = True
                return self._bodiless(head, t, out)
            if method == "HEAD" or head.status in (204, 304):
                return self._bodiless(head, t, out)
        coding = head.header("transfer-encoding")
        if coding is not None:
            if coding.split(",")[-1].strip().lower() == "chunked":
                return self._start_body(head, _State.CHUNK_SIZE, 0, out)
            if head.is_request:
                return self._fail("request transfer-encoding is not chunked", t, out)
            return self._start_body(head, _State.UNTIL_CLOSE, 0, out)
        lengths = {
            v.strip() for k, raw in head.headers if k == "content-length" for v in raw.split(",")
        }
        if lengths:
            value = lengths.pop()
            # isascii: str.isdigit also takes `²` and other digits int() refuses (bench.fuzz).
            if lengths or not (value.isascii() and value.isdigit()) or len(value) > 18:
                return self._fail("invalid content-length", t, out)
            if int(value) == 0:
                return self._bodiless(head, t, out)
            return self._start_body(head, _State.LENGTH, int(value), out)
        if head.is_request:
            return self._bodiless(head, t, out)
        return self._start_body(head, _State.UNTIL_CLOSE, 0, out)

    def _bodiless(self, head: MessageHead, t: int, out: list[Event]) -> None:
        out.append(head)
        self._in_message = True
        self._end(t, out)

    def _start_body(self, head: MessageHead, state: _State, length: int, out: list[Event]) -> None:
        out.append(head)
        self._in_message = True
        self._state = state
        self._remaining = length

    def _chunk_size(self, data: bytes, pos: int, t: int, out: list[Event]) -> int:
        """A chunk-size line; then, while whole chunks follow in *data* (a streaming server
        writes one chunk per call, so nearly always), their data and CRLF at once rather than
        a state step per piece and per byte of the CRLF."""
        newline = data.find(b"\n", pos)
        end = len(data) if newline < 0 else newline
        if len(self._buf) + end - pos > MAX_CHUNK_LINE_BYTES:
            self._fail("chunk-size line too long", t, out)
            return len(data)
        if newline < 0:
            self._buf += data[pos:end]
            return len(data)
        line = data[pos:end]
        if self._buf:  # the line began in an earlier record
            line = bytes(self._buf + line)
            self._buf.clear()
        while True:
            size = self._chunk_size_field(line, t, out)
            if size is None:
                return newline + 1
            start = newline + 1
            if size == 0 or data[start + size : start + size + 2] != b"\r\n":
                self._remaining = size
                self._state = _State.CHUNK_DATA if size else _State.TRAILERS
                return start
            out.append(BodyPiece(data[start : start + size], t))
            pos = start + size + 2
            newline = data.find(b"\n", pos, pos + MAX_CHUNK_LINE_BYTES)
            if newline < 0:
                self._state = _State.CHUNK_SIZE
                return pos  # the next size line, if any, takes the general path
            line = data[pos:newline]

    def _chunk_size_field(self, line: bytes, t: int, out: list[Event]) -> int | None:
        plain = _PLAIN_CHUNK_SIZE.fullmatch(line)  # hex digits and CR: nearly every line
        if plain is not None:
            return int(plain.group(1), 16)
        size_field = line.split(b";", 1)[0].strip()
        if not _HEX.fullmatch(size_field) or len(size_field) > MAX_CHUNK_SIZE_DIGITS:
            self._fail("invalid chunk size", t, out)
            return None
        return int(size_field, 16)

    def _trailers(self, data: bytes, pos: int, t: int, out: list[Event]) -> int:
        """Trailer fields are framed and dropped: nothing downstream reads them."""
        old = len(self._buf)
        self._buf += data[pos : pos + MAX_HEADER_BYTES - old]
        empty = re.match(rb"\r?\n", self._buf)
        match = empty or _HEAD_END.search(self._buf, max(0, old - 3))
        if match is None:
            if len(self._buf) >= MAX_HEADER_BYTES:
                self._fail("trailer section too large", t, out)
            return pos + len(self._buf) - old
        self._buf.clear()
        self._end(t, out)
        return pos + match.end() - old

    def _body_done(self, t: int, out: list[Event]) -> None:
        if self._state is _State.LENGTH:
            self._end(t, out)
        else:
            self._state = _State.CHUNK_CRLF

    def _end(self, t: int, out: list[Event]) -> None:
        out.append(MessageEnd(t, complete=True))
        self._in_message = False
        self._saw_cr = False
        self._state = _State.OPAQUE if self._then_opaque else _State.HEAD
        self._then_opaque = False

    def _fail(self, reason: str, t: int, out: list[Event]) -> None:
        if self._in_message:
            out.append(MessageEnd(t, complete=False, reason=reason))
        self._in_message = False
        self.error = reason
        self._state = _State.ERROR
        self._buf.clear()


_TERMINAL = (_State.OPAQUE, _State.ERROR, _State.CLOSED)


class Verdict(Enum):
    REQUEST = auto()  # starts like a request line: this direction carries requests
    RESPONSE = auto()  # starts like a status line: we joined a connection mid-way
    UNKNOWN = auto()  # nothing to judge by (no payload captured)
    TLS = auto()  # a TLS record: HTTP may follow as plaintext from the TLS uprobes
    BODY = auto()  # the middle of a message (a chunk, SSE lines, JSON): we joined mid-way
    OTHER = auto()  # not HTTP/1.x


_SNIFF_REQUEST = re.compile(rb"[\r\n]*[A-Z][A-Z0-9_-]{0,23}(?: [^\x00-\x08\x0a-\x1f\x7f]| ?\Z)")
# What the rest of a message starts with: a chunk-size line, SSE fields, a JSON body. Seen
# first when a connection is joined mid-exchange: a worker replaying from a held offset
# whose first calls end an exchange already reported, or a probe attached mid-stream.
_SNIFF_BODY = re.compile(
    rb"[0-9a-fA-F]{1,8}(?:;[^\r\n]*)?\r\n|(?:data|event|id|retry):|[ \t\r\n]*[{\[]"
)


def sniff(payload: bytes) -> Verdict:
    """Judges a connection by the first bytes of its first record."""
    if not payload:
        return Verdict.UNKNOWN
    if payload[:5] == b"HTTP/"[: len(payload)]:
        return Verdict.RESPONSE
    if payload.startswith(b"PRI * HTTP/2.0"):  # HTTP/2's client preface: http2.py reads it
        return Verdict.OTHER
    if _SNIFF_REQUEST.match(payload):
        return Verdict.REQUEST
    # Content type (change_cipher_spec .. application_data), then version 3.x.
    if len(payload) >= 3 and 0x14 <= payload[0] <= 0x17 and payload[1] == 3 and payload[2] <= 4:
        return Verdict.TLS
    if _SNIFF_BODY.match(payload):
        return Verdict.BODY
    return Verdict.OTHER
