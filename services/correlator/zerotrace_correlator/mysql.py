"""MySQL spans of one connection: the login, then one span per command. Pure.

The server speaks first (its greeting: version and capabilities), the client logs in
(HandshakeResponse41, or an SSLRequest and then TLS) and an auth exchange ends in OK or ERR.
From then on each command starts a sequence (id 0) and is answered in order, so commands wait
in a FIFO and response packets go to the oldest; a request packet with another id continues
the exchange under way (auth data, a LOCAL INFILE's contents). mysql_wire.py frames packets,
compressed ones included; mysql_response.py says when a response is whole; mysql_statements.py
keeps the SQL of prepared statements.

Joining a connection after its login works: its first request packet with id 0 starts the
commands (its first bytes tell whether compression is on), response bytes while nothing is
asked are skipped, and where the EOF mode matters and is unknown, the packets tell it.

Bounded: the readers hold what mysql_wire.py says, at most MAX_PENDING_COMMANDS commands
wait, each with at most MAX_QUERY_TEXT_BYTES of SQL. SQL and error messages go out with their
literals as `?` unless keep_text. Bytes that cannot be MySQL (an unknown command, TLS after an
SSLRequest, a broken compressed packet) stop the parser with a one-line `error`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, auto

from zerotrace import names
from zerotrace_correlator import mysql_wire as wire
from zerotrace_correlator.mysql_response import SHAPES, EofMode, Response, Shape, Verdict
from zerotrace_correlator.mysql_statements import Sql, Statements, describe, mask_message
from zerotrace_correlator.protocol_span import REQUEST, AttributeValue, ProtoSpan, Side, Status

# SQL kept per command: four times what MySQL's own performance_schema keeps of a statement
# (performance_schema_max_sql_text_length, 1024 by default); longer text is cut and counted.
MAX_QUERY_TEXT_BYTES = 4096
# Commands sent and not yet answered. Drivers wait for each answer; the MariaDB connectors
# pipeline (Connector/J's batches send 100 by default). Past this the responses cannot be
# paired any more, so the parser stops.
MAX_PENDING_COMMANDS = 256

# Counter names (`counters`): limits hit and things skipped.
CUT_QUERY_TEXTS = "cut_query_texts"  # SQL past MAX_QUERY_TEXT_BYTES (or the packet head)
PENDING_OVERFLOWS = "pending_overflows"  # MAX_PENDING_COMMANDS: the parser stopped
UNKNOWN_STATEMENTS = "unknown_statements"  # a statement id prepared before we joined
SKIPPED_RESPONSE_BYTES = "skipped_response_bytes"  # nothing asked: joined mid-exchange
UNMATCHED_RESPONSES = "unmatched_responses"  # response packets no command waits for
UNMATCHED_REQUESTS = "unmatched_requests"  # continuation packets with no exchange under way
MALFORMED_PACKETS = "malformed_packets"  # a login or query whose fields did not read
PROGRESS_REPORTS = "progress_reports"  # MariaDB's progress packets (ERR 0xFFFF)

CONNECT = "CONNECT"  # db.operation.name of the login
_TLS_RECORD = b"\x16\x03"  # a TLS handshake record, version 3.x
_SNIFF_BYTES = 12  # enough to tell a compressed packet's header from a plain command


class _Phase(Enum):
    START = auto()
    GREETED = auto()  # the login comes next
    TLS = auto()  # after an SSLRequest: TLS, or (fed from the TLS uprobes) the login
    LOGIN = auto()
    COMMANDS = auto()


_STATEMENT_COMMANDS = frozenset((0x17, 0x18, 0x19, 0x1A, 0x1C, 0xFA))


@dataclass(slots=True)
class _Command:
    command: int  # its byte; -1 for the login
    operation: str
    response: Response
    start_ns: int
    request_bytes: int
    sql: Sql | None = None
    collection: str = ""
    schema: str | None = None  # the db.namespace it sets when it succeeds
    user: str | None = None
    end_ns: int = 0


def recognise(first_request_bytes: bytes) -> bool:
    """Does a connection start like MySQL? See mysql_wire.starts_connection: the server's
    first packet counts too (protocols.py passes it for a server that speaks first)."""
    return wire.starts_connection(first_request_bytes)


class MySqlParser:
    """A ProtocolParser for MySQL and MariaDB: the client on REQUEST, the server on RESPONSE."""

    protocol = names.PROTOCOL_MYSQL

    def __init__(self, keep_text: bool = False) -> None:
        self.keep_text = keep_text
        self._error = ""
        self._counters: dict[str, int] = {}
        self._requests, self._responses = wire.PacketReader(), wire.PacketReader()
        self._phase = _Phase.START
        self._sniffing = True  # the first request bytes may show compression (joined late)
        self._held, self._held_ns = bytearray(), 0  # at most _SNIFF_BYTES - 1 (see _need)
        self._pending: deque[_Command] = deque()
        self._statements = Statements(self._count)
        self._server_caps: int | None = None
        self._caps: int | None = None
        self._eof = EofMode()
        self._system, self._namespace, self._user = names.DB_SYSTEM_MYSQL, "", ""
        self._out: list[ProtoSpan] = []
        self._end_ns = 0
        self._closed = False

    @property
    def error(self) -> str:
        return self._error

    @property
    def counters(self) -> Mapping[str, int]:
        return self._counters

    def buffered_bytes(self) -> int:
        return len(self._held) + self._requests.buffered_bytes() + self._responses.buffered_bytes()

    def pending_commands(self) -> int:
        return len(self._pending)

    def statements(self) -> int:
        return len(self._statements)

    def feed(self, side: Side, data: bytes, start_ns: int, end_ns: int) -> list[ProtoSpan]:
        out: list[ProtoSpan] = []
        self._out = out
        if self._error or self._closed or not data:
            return out
        self._end_ns = end_ns
        if side == REQUEST:
            self._feed_requests(bytes(data), start_ns)
        else:
            self._feed_responses(bytes(data), start_ns)
        return out

    def close(self, now_ns: int) -> list[ProtoSpan]:
        """Every command still waiting, as an incomplete span ending now (a prepare whose
        optional trailing EOF never came is complete); an error does not hide them."""
        out: list[ProtoSpan] = []
        self._out = out
        while self._pending:
            c = self._pending[0]
            if c.response.may_have_ended:
                self._finish(c)
            else:
                out.append(self._span(self._pending.popleft(), "incomplete", now_ns))
        self._requests.reset()
        self._responses.reset()
        self._held.clear()
        self._closed = True
        return out

    # -- framing --------------------------------------------------------------------------

    def _feed_requests(self, data: bytes, t: int) -> None:
        pos, reader = 0, self._requests
        while pos < len(data) and not self._error:
            need = self._need() if reader.at_boundary() else 0
            if need and (self._held or len(data) - pos < need):
                held = self._hold(data[pos:], t, need)
                if held is None:
                    return
                data, t, pos = held, self._held_ns, 0
            if need and not self._judge(data, pos):
                return
            pos = reader.feed(data, pos, t, self._on_request)
            if reader.error:
                self._fail(reader.error)

    def _need(self) -> int:
        """Bytes of the next request packet to see before framing it: enough to tell a
        compressed header (first bytes, joined late), TLS (after an SSLRequest), or a
        packet that cannot come now (its header and command byte)."""
        if self._sniffing:
            return _SNIFF_BYTES
        if self._phase is _Phase.TLS:
            return len(_TLS_RECORD) + 1
        plain = not self._requests.compressed
        return wire.HEADER_BYTES + 1 if plain and self._phase is not _Phase.START else 0

    def _hold(self, data: bytes, t: int, need: int) -> bytes | None:
        """Holds what is short of `need` (a whole packet being enough too) for the next feed."""
        if not self._held:
            self._held_ns = t
        self._held += data
        size = int.from_bytes(self._held[:3], "little")
        whole = len(self._held) >= max(wire.HEADER_BYTES, wire.HEADER_BYTES + size)
        if len(self._held) < need and not whole:
            return None
        held = bytes(self._held)
        self._held.clear()
        return held

    def _judge(self, data: bytes, pos: int) -> bool:
        if self._sniffing:
            self._sniffing = False
            if wire.looks_compressed(data[pos : pos + _SNIFF_BYTES]):
                self._compress()
            return True
        if self._phase is _Phase.TLS:
            if data[pos : pos + 2] == _TLS_RECORD and data[pos + 2] <= 4:
                self._fail("TLS after the SSLRequest: plaintext comes from uprobes")
            return not self._error
        length, seq = int.from_bytes(data[pos : pos + 3], "little"), data[pos + 3]
        if seq == 0 and not wire.plausible_command(data[pos + 4 : pos + 5], length):
            self._fail(
                f"not a MySQL command: byte 0x{data[pos + 4 : pos + 5].hex()}, {length} bytes"
            )
        elif seq != 0 and not self._pending and self._phase is not _Phase.GREETED:
            self._fail(f"not a MySQL packet: sequence id {seq} with no exchange under way")
        return not self._error

    def _feed_responses(self, data: bytes, t: int) -> None:
        pos, reader = 0, self._responses
        while pos < len(data) and not self._error:
            if not self._pending and self._phase is not _Phase.START:
                # Nothing asked: the end of an exchange from before we joined, or a server's
                # last words before it closes. Framing starts again with the next request.
                self._count(SKIPPED_RESPONSE_BYTES, len(data) - pos)
                reader.reset()
                return
            pos = reader.feed(data, pos, t, self._on_response)
            if reader.error:
                self._fail(reader.error)

    # -- requests -------------------------------------------------------------------------

    def _on_request(self, p: wire.Packet) -> bool:
        if p.seq in (1, 2) and self._phase in (_Phase.START, _Phase.GREETED, _Phase.TLS):
            return self._login(p)
        if p.seq != 0:
            if self._pending:  # auth data or a LOCAL INFILE's contents: never kept
                self._pending[-1].request_bytes += p.wire_bytes
            else:
                self._count(UNMATCHED_REQUESTS)
            return True
        self._phase = _Phase.COMMANDS
        return self._command(p)

    def _login(self, p: wire.Packet) -> bool:
        login = wire.login(p.head, p.length)
        if login is None:
            self._count(MALFORMED_PACKETS)
            return True
        self._sniffing = False
        self._caps = login.capabilities & (self._server_caps or -1)
        self._eof.deprecated = bool(self._caps & wire.CLIENT_DEPRECATE_EOF)
        if login.ssl_request:
            self._phase = _Phase.TLS
            return False  # what follows is judged before it is framed
        self._user, self._namespace = login.user or "", login.database or self._namespace
        self._phase = _Phase.LOGIN
        return self._enqueue(_Command(-1, CONNECT, Response(Shape.AUTH), p.start_ns, p.wire_bytes))

    def _command(self, p: wire.Packet) -> bool:
        head, byte = p.head, p.first
        name = wire.COMMANDS.get(byte)
        if name is None or not wire.plausible_command(head, p.length):
            self._fail(f"not a MySQL command: byte 0x{head[:1].hex()}, {p.length} bytes")
            return False
        shape = SHAPES.get(byte, Shape.SIMPLE)
        if shape is Shape.STREAM:
            self._fail(f"{name}: a replication or clone stream follows, not commands")
            return False
        c = _Command(byte, name, Response(shape), p.start_ns, p.wire_bytes)
        if byte in (wire.COM_QUERY, wire.COM_STMT_PREPARE):
            caps = self._caps
            attributes = None if caps is None else bool(caps & wire.CLIENT_QUERY_ATTRIBUTES)
            sql = head[1:] if byte == wire.COM_STMT_PREPARE else wire.query_sql(head, attributes)
            if sql is None:
                self._count(MALFORMED_PACKETS)
            else:
                self._sql(c, sql, cut=p.length > len(head))
        elif byte in _STATEMENT_COMMANDS:
            self._statement(c, int.from_bytes(head[1:5], "little"))
        elif byte == wire.COM_INIT_DB:
            c.schema = head[1:].decode("utf-8", "replace")
        elif byte == wire.COM_CHANGE_USER:
            caps = wire.CLIENT_SECURE_CONNECTION if self._caps is None else self._caps
            c.user, c.schema = wire.user_and_database(head, 1, caps, login=False)
        if shape is Shape.NONE:
            self._out.append(self._span(c, "ok", self._end_ns))
            return True
        return self._enqueue(c)

    def _sql(self, c: _Command, raw: bytes, cut: bool) -> None:
        if cut or len(raw) > MAX_QUERY_TEXT_BYTES:
            self._count(CUT_QUERY_TEXTS)
        c.sql = describe(raw[:MAX_QUERY_TEXT_BYTES].decode("utf-8", "replace"), self.keep_text)
        if c.command == wire.COM_STMT_PREPARE:
            self._statements.last = c.sql
        else:
            c.operation, c.collection = c.sql.operation or c.operation, c.sql.collection
            c.schema = c.sql.schema

    def _statement(self, c: _Command, statement: int) -> None:
        # MariaDB's pipelined prepare-and-execute names "the statement just prepared" -1.
        if statement == 0xFFFFFFFF:
            c.sql = self._statements.last
        else:  # a prepare may also still wait for an EOF that may not come
            waiting = (w.sql for w in self._pending if w.response.statement == statement)
            c.sql = self._statements.get(statement) or next(waiting, None)
            if c.sql is None:
                self._count(UNKNOWN_STATEMENTS)
        if c.sql is not None and c.command in (wire.COM_STMT_EXECUTE, wire.COM_STMT_BULK_EXECUTE):
            c.operation, c.collection = c.sql.operation or c.operation, c.sql.collection
        if c.command == wire.COM_STMT_CLOSE:
            self._statements.close(statement)

    def _enqueue(self, c: _Command) -> bool:
        if len(self._pending) >= MAX_PENDING_COMMANDS:
            self._count(PENDING_OVERFLOWS)
            self._fail(f"more than {MAX_PENDING_COMMANDS} commands wait for a response")
            return False
        if not self._pending:
            self._responses.reset()  # anything held there belonged to no command
        self._pending.append(c)
        return True

    # -- responses ------------------------------------------------------------------------

    def _on_response(self, p: wire.Packet) -> bool:
        if not self._pending:
            return self._unasked(p)
        c = self._pending[0]
        verdict = c.response.read(p, self._eof)
        if verdict is Verdict.ENDED_BEFORE:
            if self._finish(c):
                return self._on_response(p)
            self._count(UNMATCHED_RESPONSES)
            return False
        c.end_ns = self._end_ns
        if verdict is Verdict.PROGRESS:
            self._count(PROGRESS_REPORTS)
        elif verdict is Verdict.BROKEN:
            self._fail(c.response.broken)
            return False
        elif verdict is Verdict.DONE:
            return self._finish(c)
        return True

    def _unasked(self, p: wire.Packet) -> bool:
        greeting = wire.greeting(p.head) if self._phase is _Phase.START and p.seq == 0 else None
        if greeting is not None:
            self._server_caps, self._sniffing, self._phase = greeting[1], False, _Phase.GREETED
            if names.DB_SYSTEM_MARIADB in greeting[0].lower():
                self._system = names.DB_SYSTEM_MARIADB
            return False
        if self._phase is _Phase.START and p.seq == 0 and p.first == wire.ERR:
            # Refused before any handshake: too many connections, a blocked host.
            c = _Command(-1, CONNECT, Response(Shape.AUTH), p.start_ns, 0, end_ns=self._end_ns)
            c.response.read(p, self._eof)
            self._out.append(self._span(c, "error", self._end_ns))
        else:
            self._count(UNMATCHED_RESPONSES)
        self._phase = _Phase.COMMANDS
        return False

    def _finish(self, c: _Command) -> bool:
        """The command's response is whole: its span, and what it changed."""
        self._pending.popleft()
        r = c.response
        ok = r.error is None
        if r.malformed:
            self._count(MALFORMED_PACKETS)
        if ok and c.command in (-1, wire.COM_CHANGE_USER):
            self._user = c.user or self._user
            self._namespace = c.schema or self._namespace
        if ok and c.command in (wire.COM_CHANGE_USER, wire.COM_RESET_CONNECTION):
            self._statements.clear()
        elif ok and c.schema is not None:
            self._namespace = c.schema
        elif ok and r.statement >= 0 and c.sql is not None:
            self._statements.prepared(r.statement, c.sql)
        self._out.append(self._span(c, "ok" if ok else "error", c.end_ns))
        if c.command == -1 and self._phase is _Phase.LOGIN:
            self._phase = _Phase.COMMANDS
            if ok and self._caps is not None:
                self._compress()
            return False  # compression starts after this packet
        return bool(self._pending) and not self._error

    def _compress(self) -> None:
        caps = self._caps if self._caps is not None else wire.CLIENT_COMPRESS
        if caps & wire.CLIENT_COMPRESS:
            self._requests.compressed = self._responses.compressed = True
        elif caps & wire.CLIENT_ZSTD_COMPRESSION_ALGORITHM:
            self._fail("zstd-compressed protocol: not decoded")

    # -- spans ----------------------------------------------------------------------------

    def _span(self, c: _Command, status: Status, end_ns: int) -> ProtoSpan:
        attributes: dict[str, AttributeValue] = {
            names.ATTR_DB_SYSTEM_NAME: self._system,
            names.ATTR_DB_OPERATION_NAME: c.operation,
        }
        if self._namespace:
            attributes[names.ATTR_DB_NAMESPACE] = self._namespace
        if self._user:
            attributes[names.ATTR_USER_NAME] = self._user
        if c.collection:
            attributes[names.ATTR_DB_COLLECTION_NAME] = c.collection
        if c.sql is not None:
            attributes[names.ATTR_DB_QUERY_TEXT] = c.sql.text
            if c.sql.batch_size:
                attributes[names.ATTR_DB_OPERATION_BATCH_SIZE] = c.sql.batch_size
        r = c.response
        if r.rows >= 0:
            attributes[names.ATTR_DB_RESPONSE_RETURNED_ROWS] = r.rows
        if r.affected >= 0:
            attributes[names.ATTR_DB_AFFECTED_ROWS] = r.affected
        if r.error is not None:
            attributes[names.ATTR_DB_RESPONSE_STATUS_CODE] = str(r.error.code)
            if r.error.sqlstate:
                attributes[names.ATTR_MYSQL_SQLSTATE] = r.error.sqlstate
            message = r.error.message
            masked = message if self.keep_text else mask_message(message)
            attributes[names.ATTR_ERROR_MESSAGE] = masked
        return ProtoSpan(
            protocol=self.protocol,
            # OpenTelemetry's span name: "{operation} {table}", else the operation.
            name=f"{c.operation} {c.collection}" if c.collection else c.operation,
            start_ns=c.start_ns,
            end_ns=max(end_ns, c.start_ns),
            status=status,
            attributes=attributes,
            error_type=str(r.error.code) if r.error is not None else "",
            request_bytes=c.request_bytes,
            response_bytes=r.bytes,
        )

    def _count(self, name: str, by: int = 1) -> None:
        self._counters[name] = self._counters.get(name, 0) + by

    def _fail(self, reason: str) -> None:
        self._error = reason
        self._held.clear()
        self._requests.reset()
        self._responses.reset()
