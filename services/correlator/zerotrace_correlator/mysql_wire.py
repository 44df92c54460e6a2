"""The MySQL client/server wire format: packet framing and the fields mysql.py reads. Pure.

A packet is a 3-byte little-endian payload length, a 1-byte sequence id and the payload; a
payload of 16 MiB - 1 (MAX_PAYLOAD) continues in the next packet, so a `Packet` here is the
logical one, its pieces joined. Once CLIENT_COMPRESS is negotiated, packets travel inside
compressed packets: a 3-byte compressed length, a sequence id, a 3-byte inflated length (0
when the payload is stored as is) and a zlib stream; their payloads, joined, are the packet
stream, and a packet may straddle two of them.

A `PacketReader` frames one direction. It never builds a payload: it keeps the first
MAX_HEAD_BYTES of each packet (every field read here sits at a payload's start) and counts
the rest through, so a 1 GiB row costs what a 10-byte one does. Inflating is streamed in
INFLATE_CHUNK_BYTES pieces and stops as soon as the output passes the declared length, so a
zlib bomb gets no further than a compressed packet's 16 MiB - 1. What a reader holds between
feeds: at most 7 header bytes, MAX_HEAD_BYTES of one packet and one zlib window (32 KiB).
Corrupt zlib data or a length that disagrees sets `error` (one line) and the reader stops.

The field readers below never raise either: a field that does not read gives None (or 0).
`starts_connection` judges a connection's first bytes (mysql.recognise).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass

MAX_PAYLOAD = 0xFFFFFF
HEADER_BYTES = 4
COMPRESSED_HEADER_BYTES = 7
# What is kept of a packet. Everything read sits at a payload's start: a command and up to
# mysql.MAX_QUERY_TEXT_BYTES of its SQL behind at most a few KiB of query attributes, a
# login (user names are at most 32 characters, auth data 255 bytes, a schema 64 characters).
MAX_HEAD_BYTES = 16 * 1024
# Inflated bytes handled per zlib call: the only transient buffer, whatever the ratio.
INFLATE_CHUNK_BYTES = 64 * 1024

# Capability flags (MySQL's CLIENT_*).
CLIENT_CONNECT_WITH_DB = 0x8
CLIENT_COMPRESS = 0x20
CLIENT_PROTOCOL_41 = 0x200
CLIENT_SSL = 0x800
CLIENT_SECURE_CONNECTION = 0x8000
CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA = 0x200000
CLIENT_DEPRECATE_EOF = 0x1000000
CLIENT_ZSTD_COMPRESSION_ALGORITHM = 0x4000000
CLIENT_QUERY_ATTRIBUTES = 0x8000000
# Server status flags, in OK and EOF packets.
SERVER_MORE_RESULTS_EXISTS = 0x8
SERVER_STATUS_CURSOR_EXISTS = 0x40

OK, EOF, ERR, LOCAL_INFILE, GREETING = 0x00, 0xFE, 0xFF, 0xFB, 0x0A
EOF_PAYLOAD_BYTES = 5  # 0xFE, warnings, status: an OK packet with 0xFE has at least 7

# Commands a client sends (MySQL 8 and MariaDB); the internal ones (COM_SLEEP, COM_TIME ...)
# never cross the wire, so their bytes mark something else than MySQL.
COMMANDS = {
    0x01: "COM_QUIT", 0x02: "COM_INIT_DB", 0x03: "COM_QUERY", 0x04: "COM_FIELD_LIST",
    0x05: "COM_CREATE_DB", 0x06: "COM_DROP_DB", 0x07: "COM_REFRESH", 0x08: "COM_SHUTDOWN",
    0x09: "COM_STATISTICS", 0x0A: "COM_PROCESS_INFO", 0x0C: "COM_PROCESS_KILL",
    0x0D: "COM_DEBUG", 0x0E: "COM_PING", 0x11: "COM_CHANGE_USER", 0x12: "COM_BINLOG_DUMP",
    0x13: "COM_TABLE_DUMP", 0x15: "COM_REGISTER_SLAVE", 0x16: "COM_STMT_PREPARE",
    0x17: "COM_STMT_EXECUTE", 0x18: "COM_STMT_SEND_LONG_DATA", 0x19: "COM_STMT_CLOSE",
    0x1A: "COM_STMT_RESET", 0x1B: "COM_SET_OPTION", 0x1C: "COM_STMT_FETCH",
    0x1E: "COM_BINLOG_DUMP_GTID", 0x1F: "COM_RESET_CONNECTION", 0x20: "COM_CLONE",
    0xFA: "COM_STMT_BULK_EXECUTE",
}  # fmt: skip
COM_QUIT, COM_INIT_DB, COM_QUERY, COM_CHANGE_USER = 0x01, 0x02, 0x03, 0x11
COM_STMT_PREPARE, COM_STMT_EXECUTE, COM_STMT_CLOSE, COM_STMT_FETCH = 0x16, 0x17, 0x19, 0x1C
COM_RESET_CONNECTION, COM_STMT_BULK_EXECUTE = 0x1F, 0xFA
# Payload lengths fixed by the protocol, and the least others need (a statement id, or the
# id, flags and iteration count of an execute); a packet that breaks them is not MySQL.
_EXACT_LENGTH = {0x01: 1, 0x09: 1, 0x0A: 1, 0x0C: 5, 0x0D: 1, 0x0E: 1, 0x19: 5, 0x1A: 5,
                 0x1B: 3, 0x1C: 9, 0x1F: 1}  # fmt: skip
_LEAST_LENGTH = {0x17: 10, 0x18: 7, 0xFA: 7}
_STRING_COMMANDS = frozenset((0x02, 0x03, 0x04, 0x05, 0x06, 0x16))


class Packet:
    """A logical packet: `head` is its payload's first MAX_HEAD_BYTES, `first` their first
    byte (-1 for an empty payload), `start_ns` the time of the feed with its first byte."""

    __slots__ = ("first", "head", "length", "seq", "start_ns", "wire_bytes")

    def __init__(self, seq: int, length: int, head: bytes, start_ns: int) -> None:
        self.seq, self.length, self.head, self.start_ns = seq, length, head, start_ns
        self.first = head[0] if head else -1
        self.wire_bytes = length + HEADER_BYTES * (length // MAX_PAYLOAD + 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Packet) and (self.seq, self.length, self.head, self.start_ns) == (
            other.seq, other.length, other.head, other.start_ns
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"Packet({self.seq}, {self.length}, {self.head[:32]!r}, {self.start_ns})"


Emit = Callable[[Packet], bool]  # False: stop framing (the reader returns where it stopped)


class PacketReader:
    """Frames the packets of one direction, plain or (once `compressed` is set) compressed."""

    def __init__(self) -> None:
        self.compressed = False
        self.error = ""
        self.reset()

    def reset(self) -> None:
        """Drops a packet in progress: its bytes belonged to no exchange we follow."""
        self._header = bytearray()
        self._left = -1  # payload bytes of the current piece still to come; -1: at a header
        self._open = False  # a logical packet is in progress
        self._more = False  # the current piece is MAX_PAYLOAD long: another follows
        self._seq = self._length = self._start_ns = 0
        self._head = bytearray()
        self._zheader = bytearray()
        self._zleft = -1
        self._inflater: zlib._Decompress | None = None
        self._declared = self._inflated = 0
        self._stop = False

    def at_boundary(self) -> bool:
        return not (self._header or self._open or self._zheader) and self._zleft < 0

    def buffered_bytes(self) -> int:
        return len(self._header) + len(self._head) + len(self._zheader)

    def feed(self, data: bytes, pos: int, time_ns: int, emit: Emit) -> int:
        """Frames data[pos:]; returns where it stopped: the end, or after the packet `emit`
        declined (compressed input is consumed whole: a decline there only drops the rest
        of what inflated, which the caller then resets)."""
        self._stop = False
        if self.compressed:
            return self._unwrap(data, pos, time_ns, emit)
        return self._frame(data, pos, time_ns, emit)

    def _frame(self, data: bytes, pos: int, t: int, emit: Emit) -> int:
        end = len(data)
        while pos < end and not self._stop:
            if self._left < 0:
                if not self._header and not self._open and end - pos > HEADER_BYTES:
                    size = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
                    body = pos + HEADER_BYTES
                    if size < MAX_PAYLOAD and body + size <= end:
                        # A whole packet in this piece, the usual case: one slice, no copy.
                        head = data[body : body + min(size, MAX_HEAD_BYTES)]
                        pos = body + size
                        self._stop = not emit(Packet(data[pos - size - 1], size, head, t))
                        continue
                piece = data[pos : pos + HEADER_BYTES - len(self._header)]
                self._header += piece
                pos += len(piece)
                if len(self._header) < HEADER_BYTES:
                    return pos
                header = self._header
                if not self._open:
                    self._open, self._seq, self._length, self._start_ns = True, header[3], 0, t
                self._left = header[0] | header[1] << 8 | header[2] << 16
                self._more = self._left == MAX_PAYLOAD
                self._length += self._left
                header.clear()
            take = min(self._left, end - pos)
            room = MAX_HEAD_BYTES - len(self._head)
            if room > 0 and take:
                self._head += data[pos : pos + min(take, room)]
            pos += take
            self._left -= take
            if self._left == 0:
                self._left = -1
                if not self._more:
                    packet = Packet(self._seq, self._length, bytes(self._head), self._start_ns)
                    self._open = False
                    self._head.clear()
                    self._stop = not emit(packet)
        return pos

    def _unwrap(self, data: bytes, pos: int, t: int, emit: Emit) -> int:
        end = len(data)
        while pos < end and not self._stop and not self.error:
            if self._zleft < 0:
                piece = data[pos : pos + COMPRESSED_HEADER_BYTES - len(self._zheader)]
                self._zheader += piece
                pos += len(piece)
                if len(self._zheader) < COMPRESSED_HEADER_BYTES:
                    return pos
                h = self._zheader
                self._zleft = h[0] | h[1] << 8 | h[2] << 16
                self._declared = h[4] | h[5] << 8 | h[6] << 16
                self._inflated = 0
                self._inflater = zlib.decompressobj() if self._declared else None
                h.clear()
            take = min(self._zleft, end - pos)
            chunk = data[pos : pos + take]
            pos += take
            self._zleft -= take
            if self._inflater is None:
                self._frame(chunk, 0, t, emit)
            else:
                self._inflate(self._inflater, chunk, t, emit)
            if self._zleft == 0 and not self.error:
                self._zleft = -1
                if self._inflater is not None:
                    self._check_inflated(self._inflater)
        return pos

    def _inflate(self, inflater: zlib._Decompress, chunk: bytes, t: int, emit: Emit) -> None:
        while not self._stop:
            try:
                out = inflater.decompress(chunk, INFLATE_CHUNK_BYTES)
            except zlib.error as exc:
                self.error = f"corrupt compressed packet ({exc})"
                return
            self._inflated += len(out)
            if self._inflated > self._declared:
                self.error = f"compressed packet inflates past its declared {self._declared} bytes"
                return
            self._frame(out, 0, t, emit)
            chunk = inflater.unconsumed_tail
            if not out or (not chunk and len(out) < INFLATE_CHUNK_BYTES):
                return

    def _check_inflated(self, inflater: zlib._Decompress) -> None:
        if self._stop:
            return
        if not inflater.eof or inflater.unused_data or self._inflated != self._declared:
            self.error = (
                f"compressed packet inflates to {self._inflated} bytes, "
                f"its header says {self._declared}"
            )


# -- fields ---------------------------------------------------------------------------------


def lenenc(buf: bytes, pos: int) -> tuple[int, int] | None:
    """A length-encoded integer at pos and the position after it; None if cut or invalid
    (0xFB is NULL, 0xFF is no integer)."""
    if pos >= len(buf):
        return None
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first, 0)
    if not width or pos + 1 + width > len(buf):
        return None
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def _cstring(buf: bytes, pos: int) -> tuple[str, int] | None:
    nul = buf.find(b"\0", pos)
    return None if nul < 0 else (buf[pos:nul].decode("utf-8", "replace"), nul + 1)


def greeting(payload: bytes) -> tuple[str, int] | None:
    """The server version and capabilities of an Initial Handshake v10."""
    version = _cstring(payload, 1) if payload[:1] == bytes((GREETING,)) else None
    if version is None or len(payload) < version[1] + 15:
        return None
    text, pos = version  # then thread id 4, scramble 8, filler 1, capabilities' low half
    caps = int.from_bytes(payload[pos + 13 : pos + 15], "little")
    if len(payload) >= pos + 20:  # charset 1, status 2, capabilities' high half
        caps |= int.from_bytes(payload[pos + 18 : pos + 20], "little") << 16
    return text, caps


@dataclass(frozen=True, slots=True)
class Login:
    capabilities: int
    ssl_request: bool  # the 32-byte SSLRequest: TLS starts next
    user: str | None = None
    database: str | None = None


def login(payload: bytes, length: int) -> Login | None:
    """A HandshakeResponse41 or SSLRequest. The auth response is stepped over, never kept."""
    if len(payload) < 32 or any(payload[9:28]):  # filler: MariaDB's capabilities in 28..31
        return None
    caps = int.from_bytes(payload[:4], "little")
    if not caps & CLIENT_PROTOCOL_41:
        return None
    if length == 32:
        return Login(caps, True) if caps & CLIENT_SSL else None
    user, database = user_and_database(payload, 32, caps, login=True)
    return Login(caps, False, user, database)


def user_and_database(
    payload: bytes, pos: int, caps: int, login: bool
) -> tuple[str | None, str | None]:
    """User, auth response (stepped over) and schema, as a login carries them (the schema
    only with CLIENT_CONNECT_WITH_DB) and a COM_CHANGE_USER (payload after its byte)."""
    user = _cstring(payload, pos)
    if user is None:
        return None, None
    name, pos = user
    if login and caps & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA:
        size = lenenc(payload, pos)
        pos = -1 if size is None else size[1] + size[0]
    elif caps & CLIENT_SECURE_CONNECTION:
        pos = pos + 1 + payload[pos] if pos < len(payload) else -1
    else:
        auth = _cstring(payload, pos)
        pos = -1 if auth is None else auth[1]
    with_schema = caps & CLIENT_CONNECT_WITH_DB or not login
    schema = _cstring(payload, pos) if pos >= 0 and with_schema else None
    return name, (schema[0] or None) if schema else None


@dataclass(frozen=True, slots=True)
class Err:
    code: int
    sqlstate: str
    message: str


def err(payload: bytes) -> Err:
    code = int.from_bytes(payload[1:3], "little")
    if payload[3:4] == b"#":
        return Err(code, payload[4:9].decode("ascii", "replace"), _text(payload[9:]))
    return Err(code, "", _text(payload[3:]))  # errors sent before the handshake: no SQLSTATE


def _text(raw: bytes) -> str:
    return raw[:512].decode("utf-8", "replace")  # MySQL's MYSQL_ERRMSG_SIZE


def status_flags(payload: bytes, length: int) -> int:
    """The server status of an OK or EOF packet (0 when it does not read)."""
    if length == EOF_PAYLOAD_BYTES:
        return int.from_bytes(payload[3:5], "little")
    affected = lenenc(payload, 1)
    insert_id = None if affected is None else lenenc(payload, affected[1])
    if insert_id is None:
        return 0
    return int.from_bytes(payload[insert_id[1] : insert_id[1] + 2], "little")


def prepare_ok(payload: bytes) -> tuple[int, list[int]] | None:
    """A COM_STMT_PREPARE_OK: the statement id and the definition blocks that follow (params,
    then columns; none when its optional metadata_follows byte says so)."""
    if len(payload) < 12 or payload[0] != OK:
        return None
    statement = int.from_bytes(payload[1:5], "little")
    columns, params = (int.from_bytes(payload[i : i + 2], "little") for i in (5, 7))
    if len(payload) > 12 and payload[12] == 0:
        return statement, []
    return statement, [n for n in (params, columns) if n]


def column_count(payload: bytes, length: int) -> tuple[int, bool] | None:
    """A resultset's column count and whether definitions follow (MySQL's optional metadata
    and MariaDB's metadata cache add one byte to the packet saying so)."""
    count = lenenc(payload, 0)
    if count is None or length > count[1] + 1:
        return None
    return count[0], not (length == count[1] + 1 and payload[count[1]] == 0)


def query_sql(payload: bytes, attributes: bool | None) -> bytes | None:
    """The SQL of a COM_QUERY, after its query attributes when CLIENT_QUERY_ATTRIBUTES is on
    (None: not known, as when we joined after the login; SQL never starts with a control
    byte then 0x01, which the attributes' counts do)."""
    if attributes is None:
        attributes = payload[1:2] < b" " and payload[1:2] not in b"\t\n\r" and payload[2:3] == b"\1"
    if not attributes:
        return payload[1:]
    end = _skip_attributes(payload, 1)
    return None if end is None else payload[end:]


_FIXED_WIDTH = {1: 1, 2: 2, 13: 2, 3: 4, 4: 4, 9: 4, 5: 8, 8: 8, 6: 0}  # by MYSQL_TYPE_*
_TEMPORAL = frozenset((7, 10, 11, 12))  # a 1-byte length, then that many bytes


def _skip_attributes(buf: bytes, pos: int) -> int | None:
    count = lenenc(buf, pos)
    sets = None if count is None else lenenc(buf, count[1])
    if count is None or sets is None:
        return None
    n, pos = count[0], sets[1]
    if n == 0:
        return pos
    if 2 * n > len(buf):  # each needs at least a type: a bigger count is not real
        return None
    nulls, pos = buf[pos : pos + (n + 7) // 8], pos + (n + 7) // 8
    if buf[pos : pos + 1] != b"\1":  # types not sent: values cannot be stepped over
        return None
    pos += 1
    types: list[int] = []
    for _ in range(n):
        name = lenenc(buf, pos + 2)
        if name is None:
            return None
        types.append(buf[pos])
        pos = name[1] + name[0]
    for i, kind in enumerate(types):
        if nulls[i // 8 : i // 8 + 1] and nulls[i // 8] >> (i % 8) & 1:
            continue
        if kind in _FIXED_WIDTH:
            pos += _FIXED_WIDTH[kind]
        elif kind in _TEMPORAL:
            pos += 1 + buf[pos] if pos < len(buf) else 1
        else:
            size = lenenc(buf, pos)
            if size is None:
                return None
            pos = size[1] + size[0]
        if pos > len(buf):
            return None
    return pos


# -- recognising a connection ---------------------------------------------------------------


def plausible_command(payload: bytes, length: int) -> bool:
    """Could this payload start be a command a client sends? Its byte is one, its length fits
    it, and text commands start like text (or like query attributes)."""
    command = payload[0] if payload else -1
    if command not in COMMANDS:
        return False
    if command in _EXACT_LENGTH:
        return length == _EXACT_LENGTH[command]
    if command in _STRING_COMMANDS:
        second = payload[1:2]
        texty = not second or second >= b" " or second in b"\t\n\r" or payload[2:3] == b"\1"
        return length >= 2 and texty
    return length >= _LEAST_LENGTH.get(command, 1)


def looks_compressed(prefix: bytes) -> bool:
    """Does a stream start with a compressed packet carrying a command? Stored (inflated
    length 0): a plain command packet follows the 7-byte header; deflated: a zlib header
    (RFC 1950: CMF 0x78, the check bits) and a ratio zlib can reach (at most 1032:1)."""
    if len(prefix) < COMPRESSED_HEADER_BYTES + HEADER_BYTES + 1 or prefix[3] != 0:
        return False
    size = int.from_bytes(prefix[:3], "little")
    inflated = int.from_bytes(prefix[4:7], "little")
    if inflated == 0:
        inner = int.from_bytes(prefix[7:10], "little")
        return (
            prefix[10] == 0
            and inner + HEADER_BYTES <= size
            and plausible_command(prefix[11:], inner)
        )
    return prefix[7] == 0x78 and (prefix[7] << 8 | prefix[8]) % 31 == 0 and inflated <= 1032 * size


def starts_connection(data: bytes) -> bool:
    """Do a connection's first bytes look like MySQL: a login or SSLRequest (sequence id 1, or
    2 in the plaintext of TLS), a command (joined after the login; compressed or not), or the
    server's first packet: its greeting, or the ERR that refuses a client?"""
    if len(data) < HEADER_BYTES + 1:
        return False
    length, seq, payload = int.from_bytes(data[:3], "little"), data[3], data[4:]
    if seq in (1, 2):
        return login(payload, length) is not None
    if seq != 0:
        return False
    if payload[0] == GREETING:
        return payload[1:2].isdigit()
    if payload[0] == ERR:
        code = int.from_bytes(payload[1:3], "little")
        return code >= 1000 and _REFUSAL.fullmatch(payload[3:67]) is not None
    return plausible_command(payload, length) or looks_compressed(data)


_REFUSAL = re.compile(rb"[#A-Za-z][\x20-\x7e]*")  # a SQLSTATE or a message, printable


def sent_by_server(first: bytes) -> bool:
    """Were a connection's first bytes (starts_connection said MySQL) the server's: its
    greeting or its refusal? Otherwise they are a client's login or command (joined late)."""
    return len(first) > HEADER_BYTES and first[3] == 0 and first[4] in (GREETING, ERR)
