"""PostgreSQL spans of one connection (frontend/backend protocol v3). Pure.

One span per query execution: a simple Query ('Q') from its first byte to its ReadyForQuery,
an extended-protocol Execute ('E') from the first message of its group (Parse, Bind, Describe
sent since the last Execute, Sync or Flush) to its CommandComplete, EmptyQueryResponse or
PortalSuspended. A Query holding several statements ("BEGIN; UPDATE ...; COMMIT") is ONE span:
it is one call of the client and one round trip, answered by one ReadyForQuery; OpenTelemetry
names such a call a batch (db.operation.name "BATCH UPDATE" when every statement has the same
operation, else "BATCH"; db.operation.batch.size the number of statements). Startup, auth and
Parse/Bind/Describe/Close/Sync give no span of their own, save a failed login (an error span
carrying the SQLSTATE) and a failed Parse, Bind or Describe with no Execute after it.

Prepared statements and portals are tracked per connection, so an Execute of a statement
prepared long before carries its SQL. After an ErrorResponse the server skips every message
up to the next Sync; so does the parser, giving the error to the first Execute it skipped.
SSLRequest answered 'S' is followed by TLS records, or, where the TLS probes hand over the
plaintext of the same connection, by its StartupMessage in clear: TLS records (and everything
after a GSSENCRequest answered 'G') are counted (`encrypted_bytes`), plaintext is read on.

Bounded: per direction, only the prefix of a message that postgres_wire.KEEP names is held
(rows, copy data, parameter values and passwords are stepped over, never buffered); at most
MAX_PENDING requests wait for answers, and postgres_statements caps the prepared statements and
portals remembered; each limit hit is counted in `counters`.
Garbage (an unknown type byte, an impossible length) puts the parser in the error state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from zerotrace import names
from zerotrace_correlator import postgres_wire as wire
from zerotrace_correlator.postgres_statements import Sql, Statements, describe, mask_message
from zerotrace_correlator.protocol_span import REQUEST, AttributeValue, ProtoSpan, Side, Status

# Requests waiting for their answers. Drivers pipeline a batch of Bind/Execute pairs before
# reading (asyncpg executemany, psycopg pipeline mode, pgjdbc batches of a few hundred), and
# a waiting request costs ~200 bytes; past this the rest of a batch, up to its next Sync, is
# dropped (counted in `dropped_requests`) and its answers skipped.
MAX_PENDING = 1024
_STARTUP, _QUERY, _PARSE, _BIND, _DESCRIBE, _EXECUTE, _CLOSE, _SYNC, _FUNCTION, _SKIP = range(10)
_SPANS = (_QUERY, _EXECUTE)  # what a span is made of
_ENDS_AT_READY = frozenset({_STARTUP, _QUERY, _SYNC, _FUNCTION, _SKIP})  # ReadyForQuery ends
_EXTENDED = frozenset({_PARSE, _BIND, _DESCRIBE, _EXECUTE, _CLOSE})
_SKIPPED_TO_SYNC = _EXTENDED | {_QUERY, _FUNCTION}
_ANSWER = {_PARSE: b"1", _BIND: b"2", _CLOSE: b"3", _DESCRIBE: b"Tn", _FUNCTION: b"V"}
# Answers that add nothing: EmptyQueryResponse (to a Query), RowDescription,
# ParameterDescription, copy in/out/both, copy data and done (counted in the span's bytes),
# authentication, BackendKeyData, protocol negotiation. NoticeResponse, NotificationResponse
# and ParameterStatus come at any time.
_PASSING = {_QUERY: b"ITHGWdc", _EXECUTE: b"HGWdc", _DESCRIBE: b"t", _STARTUP: b"RKv"}
_ASYNC = frozenset(b"NAS")
_OPENS_GROUP = frozenset(b"QPBDECF")  # client messages a span's group starts with
_CHANGES_ROWS = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "COPY"})
# Type bytes as ints (what indexing bytes gives), for the comparisons on every message.
_ROW, _DONE, _ERROR, _READY, _COPY_OUT = b"DCEZH"
_QUERY_MSG, _EXECUTE_MSG, _PARSE_MSG, _BIND_MSG, _DESCRIBE_MSG, _SYNC_MSG = b"QEPBDS"

# Counter names (`counters`).
CUT_SQL = "cut_sql"  # a Query or Parse text longer than MAX_SQL_BYTES: its start was kept
DROPPED_REQUESTS = "dropped_requests"  # MAX_PENDING: not paired, no span
# and postgres_statements' EVICTED_STATEMENTS, EVICTED_PORTALS, UNKNOWN_STATEMENTS.
SKIPPED_AFTER_ERROR = "skipped_after_error"  # Executes the server skipped after an error
UNMATCHED_RESPONSES = "unmatched_responses"  # no request waits (joined mid-connection)
UNEXPECTED_RESPONSES = "unexpected_responses"  # not an answer to the request waiting
UNANSWERED_REQUESTS = "unanswered_requests"  # passed by a ReadyForQuery without an answer
ENCRYPTED_BYTES = "encrypted_bytes"  # after SSL or GSSAPI encryption was accepted


@dataclass(slots=True)
class _Waiting:
    """A request the server will answer, and what its answers said so far."""

    kind: int
    sql: Sql | None
    start_ns: int
    request_bytes: int
    statement: str = ""  # Parse: the name it defined, forgotten again if the Parse fails
    rows: int = 0  # DataRow messages (and COPY TO rows)
    returns_rows: bool = False  # a SELECT/FETCH tag or COPY TO: rows returned, even 0
    affected: int | None = None  # rows the INSERT/UPDATE/DELETE/MERGE/COPY FROM tags counted
    command: str = ""  # the last CommandComplete's command, named when the SQL is unknown
    copy_out: bool = False
    error: wire.ServerError | None = None
    readies: int = 0  # _SKIP: ReadyForQuery messages still to pass


class PostgresParser:
    """One connection. `keep_text=True` keeps SQL text as sent instead of masking literals."""

    protocol = names.PROTOCOL_POSTGRESQL

    def __init__(self, keep_text: bool = False) -> None:
        self.keep_text = keep_text
        self.user = ""
        self.database = ""
        self._error = ""
        self._closed = False
        self._counters: dict[str, int] = {}
        self._version = ""
        self._client = wire.Framer(client=True)
        self._server = wire.Framer(client=False)
        self._waiting: deque[_Waiting] = deque()
        self._dropping = False  # MAX_PENDING hit: dropping requests up to the next Sync
        self._discarding = False  # the server skips requests up to the next Sync (an error)
        self._group_start = -1  # first byte of the Parse/Bind/Describe before an Execute
        self._group_bytes = 0
        self._response_bytes = 0  # answers since the last span
        self._statements = Statements(self._count)
        self._out: list[ProtoSpan] = []  # spans of the feed in progress

    @property
    def error(self) -> str:
        return self._error

    @property
    def counters(self) -> Mapping[str, int]:
        return self._counters

    @property
    def encrypted(self) -> bool:
        """TLS or GSSAPI was accepted: the rest of the connection is not readable here."""
        return self._client.stopped == wire.ENCRYPTED

    def buffered_bytes(self) -> int:
        """Bytes held for messages in progress: at most a header and the largest KEEP."""
        return self._client.held() + self._server.held()

    def held_requests(self) -> tuple[int, int, int, int]:
        """Requests waiting, prepared statements, the characters of their text, portals."""
        return (len(self._waiting), *self._statements.held())

    def feed(self, side: Side, data: bytes, start_ns: int, end_ns: int) -> list[ProtoSpan]:
        if self._closed or self._error:
            return []
        out: list[ProtoSpan] = []
        self._out = out
        if side == REQUEST:
            left = self._client.feed(data, start_ns, end_ns, self._request)
        else:
            left = self._server.feed(data, start_ns, end_ns, self._response)
        if wire.ENCRYPTED in (self._client.stopped, self._server.stopped):
            self._client.stop(wire.ENCRYPTED)
            self._server.stop(wire.ENCRYPTED)
            self._count(ENCRYPTED_BYTES, left)
        elif self._client.stopped or self._server.stopped:
            self._fail(self._client.stopped or self._server.stopped)
        return out

    def close(self, now_ns: int) -> list[ProtoSpan]:
        """Every query still waiting, as an incomplete span ending now; the error state, if
        any, does not hide requests read before it."""
        out = [self._span(w, now_ns, "incomplete") for w in self._waiting if w.kind in _SPANS]
        self._waiting.clear()
        self._client.stop("closed")
        self._server.stop("closed")
        self._closed = True
        return out

    # -- requests -------------------------------------------------------------------------

    def _request(self, kind: int, body: bytes, size: int, start_ns: int, end_ns: int) -> None:
        if kind == 0:
            return self._startup(body, size, start_ns)
        if kind in b"SH":  # Sync, Flush: a group without an Execute (a prepare) ends here
            self._group_start, self._group_bytes = -1, 0
            if kind == _SYNC_MSG:
                self._discarding = False
                self._enqueue(_Waiting(_SYNC, None, start_ns, size))
            return
        if kind not in _OPENS_GROUP:
            # Copy data, passwords, SASL and GSS messages: only their size is counted, with
            # the request they follow. Terminate: nothing.
            if self._waiting:
                self._waiting[-1].request_bytes += size
            return
        if self._discarding:
            if kind in b"QE":
                self._count(SKIPPED_AFTER_ERROR)
            return
        if self._group_start < 0:
            self._group_start = start_ns
        self._group_bytes += size
        if kind in b"QEF":  # Query, Execute, FunctionCall end the group
            if kind == _QUERY_MSG:
                waiting = _Waiting(_QUERY, self._sql(body, 0), self._group_start, 0)
            elif kind == _EXECUTE_MSG:
                sql = self._statements.portal(wire.cstring(body, 0)[0])
                waiting = _Waiting(_EXECUTE, sql, self._group_start, 0)
            else:
                waiting = _Waiting(_FUNCTION, None, self._group_start, 0)
            waiting.request_bytes = self._group_bytes
            self._group_start, self._group_bytes = -1, 0
            return self._enqueue(waiting)
        name, pos = wire.cstring(body, 1 if kind in b"DC" else 0)
        if kind == _PARSE_MSG:
            sql = self._sql(body, pos)
            self._statements.parse(name, sql)
            return self._enqueue(_Waiting(_PARSE, sql, start_ns, size, statement=name))
        if kind == _BIND_MSG:  # the portal, then the statement it binds
            sql = self._statements.bind(name, wire.cstring(body, pos)[0])
            return self._enqueue(_Waiting(_BIND, sql, start_ns, size))
        # Describe or Close, of a statement ('S') or a portal ('P')
        sql = self._statements.described(body[:1], name)
        if kind != _DESCRIBE_MSG:
            self._statements.close(body[:1], name)
        self._enqueue(_Waiting(_DESCRIBE if kind == _DESCRIBE_MSG else _CLOSE, sql, start_ns, size))

    def _startup(self, body: bytes, size: int, start_ns: int) -> None:
        code = int.from_bytes(body[:4], "big")
        if code in (wire.SSL_REQUEST, wire.GSSENC_REQUEST):
            self._server.answer_next = True
            self._client.tls_next = code == wire.SSL_REQUEST
        elif code >> 16 == wire.PROTOCOL_MAJOR:
            found = wire.startup_parameters(body)
            self.user = found.get("user", "")
            self.database = found.get("database") or self.user  # the server's default
            self._version = f"{code >> 16}.{code & 0xFFFF}"
            self._client.untyped = False
            self._enqueue(_Waiting(_STARTUP, None, start_ns, size))
        elif code != wire.CANCEL_REQUEST:  # a cancel is answered by closing the connection
            self._client.stop(f"unsupported protocol version {code >> 16}.{code & 0xFFFF}")

    def _sql(self, body: bytes, start: int) -> Sql:
        text, end = wire.cstring(body, start)
        if end > len(body):
            self._count(CUT_SQL)
        return describe(text, self.keep_text)

    def _enqueue(self, waiting: _Waiting) -> None:
        if self._dropping or len(self._waiting) >= MAX_PENDING:
            # Drop to the end of the batch (its Sync), so that its answers, passed over by
            # one placeholder, never pair with a later request.
            tail = self._waiting[-1] if self._waiting else None
            if tail is None or tail.kind != _SKIP:
                tail = _Waiting(_SKIP, None, 0, 0)
                self._waiting.append(tail)
            self._count(DROPPED_REQUESTS)
            self._dropping = waiting.kind not in _ENDS_AT_READY
            tail.readies += not self._dropping
            return
        self._waiting.append(waiting)

    # -- responses ------------------------------------------------------------------------

    def _response(self, kind: int, body: bytes, size: int, start_ns: int, end_ns: int) -> None:
        self._response_bytes += size
        if kind == 0:  # the answer to SSLRequest ('S' or 'N') or GSSENCRequest ('G' or 'N')
            if body == b"S":
                # TLS records follow (ciphertext: a capture, or syscalls), or the connection
                # goes on in plaintext read by the TLS probes: its StartupMessage next.
                self._server.tls_next = True
            elif body == b"G":  # GSSAPI encryption: no probe reads its plaintext
                self._server.stop(wire.ENCRYPTED)
            elif body != b"N":
                self._server.stop(f"answer {body!r} to an encryption request")
            return
        if kind in _ASYNC:
            return
        if not self._waiting:
            return self._count(UNMATCHED_RESPONSES)
        w = self._waiting[0]
        if kind == _ERROR:
            return self._server_error(w, wire.server_error(body), end_ns)
        if kind == _READY:
            return self._ready(end_ns)
        if kind == _ROW and w.kind in _SPANS:
            w.rows += 1
        elif kind == _DONE and w.kind in _SPANS:
            self._done(w, wire.command_tag(body))
            if w.kind == _EXECUTE:
                self._finish(end_ns)
        elif w.kind == _EXECUTE and kind in b"Is":  # empty query, portal suspended
            self._finish(end_ns)
        elif kind in _ANSWER.get(w.kind, b""):
            if w.kind != _FUNCTION:
                self._waiting.popleft()
        elif kind in _PASSING.get(w.kind, b""):
            w.copy_out = w.copy_out or kind == _COPY_OUT
        elif w.kind != _SKIP:
            self._count(UNEXPECTED_RESPONSES)

    def _done(self, w: _Waiting, tag: wire.CommandTag) -> None:
        w.command = tag.command
        if tag.command in ("SELECT", "FETCH") or (tag.command == "COPY" and w.copy_out):
            w.returns_rows = True
            if tag.command == "COPY":  # COPY TO sends CopyData, not DataRow, messages
                w.rows += tag.rows or 0
        elif tag.rows is not None and tag.command in _CHANGES_ROWS:
            w.affected = (w.affected or 0) + tag.rows

    def _ready(self, end_ns: int) -> None:
        """ReadyForQuery ends a Query, a Sync, a function call or the startup. Requests it
        passes without their answers (the stream lost bytes) end incomplete."""
        if not any(w.kind in _ENDS_AT_READY for w in self._waiting):
            return self._count(UNMATCHED_RESPONSES)
        while self._waiting[0].kind not in _ENDS_AT_READY:
            w = self._waiting.popleft()
            self._count(UNANSWERED_REQUESTS)
            if w.kind == _EXECUTE:
                self._out.append(self._span(w, end_ns, "incomplete"))
        w = self._waiting[0]
        if w.kind == _QUERY:
            return self._finish(end_ns)
        # The answers to a Sync, a function call or the startup are no span's.
        self._response_bytes = 0
        w.readies -= 1
        if w.kind != _SKIP or w.readies <= 0:
            self._waiting.popleft()

    def _server_error(self, w: _Waiting, error: wire.ServerError, end_ns: int) -> None:
        if w.kind in (_QUERY, _FUNCTION):
            w.error = w.error or error  # a Query stops at its first error; Ready ends it
        elif w.kind == _STARTUP:
            w.error = error  # a failed login: a span, and the server closes the connection
            self._finish(end_ns)
        elif w.kind in _EXTENDED:
            self._skip_to_sync(error, end_ns)
        # An error at a Sync (a deferred constraint failing the implicit commit) comes after
        # the Executes were answered: it has no span to go to. Under _SKIP it is passed over.

    def _skip_to_sync(self, error: wire.ServerError, end_ns: int) -> None:
        """The server skips every message up to the next Sync: the first Execute among them
        carries the error, or the failing message itself when the batch had no Execute."""
        failed = self._waiting[0]
        blamed: _Waiting | None = None
        while self._waiting and self._waiting[0].kind in _SKIPPED_TO_SYNC:
            w = self._waiting.popleft()
            if w.kind == _PARSE:
                self._statements.parse_failed(w.statement, w.sql)
            if w.kind == _EXECUTE and blamed is None:
                blamed = w
            elif w.kind in _SPANS:
                self._count(SKIPPED_AFTER_ERROR)
        self._discarding = not self._waiting  # its Sync is still to come
        blamed = blamed or failed
        blamed.error = error
        self._waiting.appendleft(blamed)
        self._finish(end_ns)

    # -- spans ----------------------------------------------------------------------------

    def _finish(self, end_ns: int) -> None:
        w = self._waiting.popleft()
        self._out.append(self._span(w, end_ns, "error" if w.error else "ok"))
        self._response_bytes = 0

    def _span(self, w: _Waiting, end_ns: int, status: Status) -> ProtoSpan:
        attributes: dict[str, AttributeValue] = {names.ATTR_DB_SYSTEM_NAME: self.protocol}
        if self.database:
            attributes[names.ATTR_DB_NAMESPACE] = self.database
        if self._version:
            attributes[names.ATTR_NETWORK_PROTOCOL_VERSION] = self._version
        sql = w.sql
        operation, collection = (sql.operation, sql.collection) if sql else (w.command, "")
        if operation:
            attributes[names.ATTR_DB_OPERATION_NAME] = operation
        if collection:
            attributes[names.ATTR_DB_COLLECTION_NAME] = collection
        if sql is not None:
            attributes[names.ATTR_DB_QUERY_TEXT] = sql.text
            if sql.batch_size:
                attributes[names.ATTR_DB_OPERATION_BATCH_SIZE] = sql.batch_size
        if w.rows or w.returns_rows:
            attributes[names.ATTR_DB_RESPONSE_RETURNED_ROWS] = w.rows
        if w.affected is not None:
            attributes[names.ATTR_DB_AFFECTED_ROWS] = w.affected
        error_type = ""
        if w.error is not None:
            # OpenTelemetry: error.type is the database's status code when it gave one.
            error_type = w.error.code or "_OTHER"
            if w.error.code:
                attributes[names.ATTR_DB_RESPONSE_STATUS_CODE] = w.error.code
            message = w.error.message if self.keep_text else mask_message(w.error.message)
            attributes[names.ATTR_ERROR_MESSAGE] = f"{w.error.severity}: {message}"
        # OpenTelemetry's span name: "{operation} {table}", the operation, the database, or
        # the system, the first that is known.
        name = f"{operation} {collection}" if collection else operation
        return ProtoSpan(
            protocol=self.protocol,
            name=name or self.database or self.protocol,
            start_ns=w.start_ns,
            end_ns=end_ns,
            status=status,
            attributes=attributes,
            error_type=error_type,
            request_bytes=w.request_bytes,
            response_bytes=0 if status == "incomplete" else self._response_bytes,
        )

    def _count(self, name: str, n: int = 1) -> None:
        if n:
            self._counters[name] = self._counters.get(name, 0) + n

    def _fail(self, reason: str) -> None:
        self._error = reason
        self._client.stop(reason)
        self._server.stop(reason)


def recognise(first_request_bytes: bytes) -> bool:
    """Does a connection's first request start like PostgreSQL? (postgres_wire.looks_like_first)"""
    return wire.looks_like_first(first_request_bytes)
