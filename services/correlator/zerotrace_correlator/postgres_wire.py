"""The PostgreSQL frontend/backend protocol v3 on the wire: message kinds, limits, the framer
that cuts one direction's bytes into messages, and the decoders of the few message bodies
whose fields a span needs. Pure.

Every message but the first ones of a connection is a type byte, a 4-byte big-endian length
that counts itself, and a body. The first ones (StartupMessage, SSLRequest, GSSENCRequest,
CancelRequest) have no type byte: a length, then a 4-byte code. Strings are NUL-terminated.
https://www.postgresql.org/docs/current/protocol-message-formats.html

The framer keeps a prefix of each body, sized per kind (KEEP), and steps over the rest;
decoders take that prefix and never raise: a field cut off by it, or garbage, reads as "".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# A startup packet longer than this is refused by the server itself (MAX_STARTUP_PACKET_LENGTH
# in PostgreSQL's postmaster), so no real client sends one.
MAX_STARTUP_BYTES = 10_000
# The server allocates nothing past MaxAllocSize (1 GiB - 1), so neither side sends a message
# longer: a declared length past it is not PostgreSQL. Bodies are stepped over, never
# buffered, so a message this long costs no memory; only the prefix each kind keeps is held.
MAX_MESSAGE_BYTES = 0x3FFF_FFFF
# SQL text kept from a Query or a Parse. ORMs' ordinary statements are well under a few KiB;
# past 16 KiB a statement is a bulk load (a long VALUES or IN list) whose operation and
# table are in its first bytes. A longer text is cut here (counted) and masked as it stands.
MAX_SQL_BYTES = 16 * 1024
# A prepared-statement or portal name. Drivers use short generated ones: asyncpg
# "__asyncpg_stmt_1__", psycopg "_pg3_0", JDBC "S_1", pgx "stmtcache_" + 64 hex digits.
MAX_NAME_BYTES = 256
# ErrorResponse fields kept. The server writes severity, code and message first (S, V, C,
# M), then detail, hint and context; 2 KiB holds the first four of any real error.
MAX_ERROR_BYTES = 2048
# A CommandComplete tag: the longest with a count, "INSERT 0 " and 20 digits, is 29 bytes.
MAX_TAG_BYTES = 64

SSL_REQUEST = 80877103  # 1234 << 16 | 5679
GSSENC_REQUEST = 80877104  # 1234 << 16 | 5680
CANCEL_REQUEST = 80877102  # 1234 << 16 | 5678
PROTOCOL_MAJOR = 3  # 3.0, and 3.2 since PostgreSQL 18

# Message kinds by type byte: what the client sends, what the server sends.
FRONTEND = frozenset(b"BCcdDEfFHpPQSX")
BACKEND = frozenset(b"RKSZENATDCI123ntsGHWdcVv")
# Kinds whose length is fixed: a different one is garbage, caught on its header.
FIXED_LENGTH = {
    True: {ord("S"): 4, ord("H"): 4, ord("X"): 4, ord("c"): 4},
    False: {ord("Z"): 5, ord("1"): 4, ord("2"): 4, ord("3"): 4, ord("n"): 4, ord("I"): 4},
}
# Body bytes kept per kind (everything else is counted and stepped over: rows, copy data,
# parameter values, and passwords and SASL payloads, which are never held at all).
KEEP = {
    True: {
        ord("Q"): MAX_SQL_BYTES + 1,
        ord("P"): MAX_NAME_BYTES + 1 + MAX_SQL_BYTES + 1,
        ord("B"): 2 * (MAX_NAME_BYTES + 1),  # portal, statement; then the parameters
        ord("D"): 1 + MAX_NAME_BYTES + 1,
        ord("E"): MAX_NAME_BYTES + 1,
        ord("C"): 1 + MAX_NAME_BYTES + 1,
    },
    False: {ord("E"): MAX_ERROR_BYTES, ord("C"): MAX_TAG_BYTES, ord("Z"): 1},
}


# A message: (kind, kept body, size on the wire, time of its first byte, of its last byte).
# kind is the type byte; 0 on the client side for the untyped startup family, 0 on the
# server side for the one-byte answer to SSLRequest or GSSENCRequest (the body is the byte).
OnMessage = Callable[[int, bytes, int, int, int], None]
TLS_HANDSHAKE = 0x16  # a TLS record's first byte: the client's ClientHello after 'S'
ENCRYPTED = "encrypted"  # Framer.stopped after TLS or GSSAPI encryption was accepted


class Framer:
    """Cuts one direction's bytes into messages, whatever the pieces they come in. Holds at
    most a header and the kept prefix of one body, whatever length a peer declares.

    The parser steers it between messages (from inside `on_message`): `untyped` (the client's
    next message is of the startup family), `answer_next` (the server's next byte answers an
    encryption request), `tls_next` (TLS may start: a TLS record next stops framing as
    encrypted), `stop` (an error, or encryption: nothing more is framed)."""

    __slots__ = (
        "_body", "_head", "_keep", "_kind", "_left", "_size", "_start_ns", "answer_next",
        "client", "stopped", "tls_next", "untyped",
    )  # fmt: skip

    def __init__(self, client: bool) -> None:
        self.client = client
        self.untyped = client  # a connection starts with the startup family
        self.answer_next = False
        # After SSLRequest (client) or its 'S' (server): a TLS record next means ciphertext
        # follows; anything else is the plaintext the TLS probes read, framed on as usual.
        self.tls_next = False
        self.stopped = ""  # why framing stopped: a reason, or "encrypted"
        self._head = bytearray()  # header bytes of a message begun in an earlier piece
        self._body = bytearray()  # the kept prefix of its body
        self._kind = self._left = self._keep = self._size = self._start_ns = 0

    def held(self) -> int:
        return len(self._head) + len(self._body)

    def stop(self, reason: str) -> None:
        self.stopped = self.stopped or reason
        self._head.clear()
        self._body.clear()
        self._left = 0

    def feed(self, data: bytes, start_ns: int, end_ns: int, on_message: OnMessage) -> int:
        """Frames `data`; returns how many of its bytes were left unread (after a stop)."""
        pos, size = 0, len(data)
        while pos < size and not self.stopped:
            if self._left:  # inside a body
                take = min(self._left, size - pos)
                if self._keep:
                    kept = min(self._keep, take)
                    self._body += data[pos : pos + kept]
                    self._keep -= kept
                self._left -= take
                pos += take
                if not self._left:
                    body = bytes(self._body)
                    self._body.clear()
                    on_message(self._kind, body, self._size, self._start_ns, end_ns)
                continue
            if not self._head:
                self._start_ns = start_ns
                first = data[pos]
                if self.answer_next:
                    self.answer_next = False
                    if first != ord("E"):  # else an ErrorResponse came instead
                        pos += 1
                        on_message(0, data[pos - 1 : pos], 1, start_ns, end_ns)
                        continue
                if self.tls_next:  # only the first message after the encryption request
                    self.tls_next = False
                    if first == TLS_HANDSHAKE:
                        self.stop(ENCRYPTED)
                        break
                if self.untyped and first != 0:  # a length under 16 MiB starts with 0
                    self.untyped = False  # a typed message first: joined mid-connection
            header = 4 if self.untyped else 5
            if self._head or size - pos < header:
                take = min(header - len(self._head), size - pos)
                self._head += data[pos : pos + take]
                pos += take
                if len(self._head) < header:
                    break
                raw = bytes(self._head)
                self._head.clear()
            else:
                raw = data[pos : pos + header]
                pos += header
            kind = 0 if header == 4 else raw[0]
            length = int.from_bytes(raw[header - 4 :], "big")
            reason = self._check(kind, length)
            if reason:
                self.stop(reason)
                break
            limit = MAX_STARTUP_BYTES if kind == 0 else KEEP[self.client].get(kind, 0)
            keep = min(length - 4, limit)
            if size - pos >= length - 4:  # the whole body is here: no copy into the framer
                body = data[pos : pos + keep] if keep else b""
                pos += length - 4
                on_message(kind, body, length + header - 4, self._start_ns, end_ns)
                continue
            self._kind, self._left, self._keep = kind, length - 4, keep
            self._size = length + header - 4
        return size - pos

    def _check(self, kind: int, length: int) -> str:
        """Why a header cannot be PostgreSQL's ("" when it can)."""
        if kind == 0:
            if 8 <= length <= MAX_STARTUP_BYTES:
                return ""
            return f"startup message length {length} out of range"
        if kind not in (FRONTEND if self.client else BACKEND):
            return f"unknown {'client' if self.client else 'server'} message type 0x{kind:02x}"
        fixed = FIXED_LENGTH[self.client].get(kind)
        if not 4 <= length <= MAX_MESSAGE_BYTES or (fixed is not None and length != fixed):
            return f"message {chr(kind)!r} length {length} out of range"
        return ""


def cstring(body: bytes, start: int) -> tuple[str, int]:
    """The NUL-terminated string at `start`, and where the next field starts (past the end of
    `body` when the string was cut off)."""
    end = body.find(b"\0", start)
    if end < 0:
        return body[start:].decode("utf-8", "replace"), len(body) + 1
    return body[start:end].decode("utf-8", "replace"), end + 1


def startup_parameters(body: bytes) -> dict[str, str]:
    """A StartupMessage's name/value pairs (the body after its version code)."""
    found: dict[str, str] = {}
    pos = 4
    while pos < len(body) and body[pos] != 0:
        name, pos = cstring(body, pos)
        value, pos = cstring(body, pos)
        found[name] = value
    return found


@dataclass(frozen=True, slots=True)
class ServerError:
    code: str  # SQLSTATE, five characters ("42P01"); "" when missing
    severity: str  # ERROR, FATAL or PANIC (the non-localised V field when the server sends it)
    message: str


def server_error(body: bytes) -> ServerError:
    """An ErrorResponse's fields: a field-type byte and a string each, then a NUL."""
    fields: dict[int, str] = {}
    pos = 0
    while pos < len(body) and body[pos] != 0:
        kind = body[pos]
        fields[kind], pos = cstring(body, pos + 1)
    code = fields.get(ord("C"), "")
    if len(code) != 5 or not code.isascii() or not code.isalnum():
        code = ""
    severity = fields.get(ord("V")) or fields.get(ord("S"), "")
    return ServerError(code, severity, fields.get(ord("M"), ""))


@dataclass(frozen=True, slots=True)
class CommandTag:
    command: str  # "INSERT", "SELECT", "CREATE TABLE"
    rows: int | None  # the count the tag ends with, if it has one


def command_tag(body: bytes) -> CommandTag:
    tag, _ = cstring(body, 0)
    words = tag.split()
    if len(words) >= 2 and words[-1].isascii() and words[-1].isdigit():
        return CommandTag(words[0], int(words[-1]))
    return CommandTag(tag, None)


def looks_like_first(data: bytes) -> bool:
    """Does `data` start like a client's first message? A StartupMessage (length, version
    3.x, then a parameter name), an SSLRequest, GSSENCRequest or CancelRequest; or, joined
    mid-connection, a Query or Parse whose text starts in printable ASCII. This turns away
    HTTP (a method's letters make a length past 16 MiB), TLS (0x16 0x03), Redis ('*'), Kafka
    (an api key and version other than 3.0, or no letter after them), DNS over TCP and a
    MySQL handshake response (binary flags where the SQL text would start)."""
    if len(data) < 8:
        return False
    length = int.from_bytes(data[:4], "big")
    code = int.from_bytes(data[4:8], "big")
    if code in (SSL_REQUEST, GSSENC_REQUEST):
        return length == 8
    if code == CANCEL_REQUEST:
        return length == 16
    if code >> 16 == PROTOCOL_MAJOR and code & 0xFFFF < 16:
        # The parameter names: user, database, options, application_name, _pq_.*.
        named = len(data) == 8 or data[8] == 0x5F or 0x61 <= data[8] <= 0x7A
        return 9 < length <= MAX_STARTUP_BYTES and named
    if data[0] not in b"QP" or data[1] != 0:  # a length under 16 MiB
        return False
    body = data[5 : 1 + int.from_bytes(data[1:5], "big")]
    if data[0] == ord("P"):
        body = body[cstring(body, 0)[1] :]
    text = body[:16].rstrip(b"\0")
    return bool(text) and all(0x20 <= b < 0x7F or b in b"\t\r\n" for b in text)
