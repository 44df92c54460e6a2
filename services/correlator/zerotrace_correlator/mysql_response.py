"""What answers a MySQL command, read packet by packet until it is whole. Pure.

A command's byte says the shape of its response (`SHAPES`): nothing (COM_QUIT,
COM_STMT_CLOSE), one packet (OK, ERR, EOF or a string: COM_PING, COM_INIT_DB ...), an auth
exchange (COM_CHANGE_USER and the login: switches and more data until OK or ERR), a
COM_STMT_PREPARE_OK and its parameter and column definitions, or results: OK, ERR, a LOCAL
INFILE request (the client sends the file, then OK or ERR), or a resultset (a column count,
the definitions, an EOF, rows, then EOF or OK; another result follows while the status says
SERVER_MORE_RESULTS_EXISTS). ERR ends any of them.

Whether EOF packets appear depends on CLIENT_DEPRECATE_EOF, which a connection joined after
its login does not show. The packets do: an EOF is exactly 5 bytes, an OK standing in for
one at least 7, and only EOF mode puts a packet between the definitions and the rows. A
COM_STMT_PREPARE_OK alone leaves it open (its last definition may or may not be followed by
an EOF): `Response.read` then answers ENDED_BEFORE when the next packet is not that EOF.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto

from zerotrace_correlator import mysql_wire as wire

# A COM_STMT_PREPARE_OK counts columns in 2 bytes; a resultset claiming more is garbage.
MAX_COLUMNS = 0xFFFF
MARIADB_PROGRESS = 0xFFFF  # the error code of MariaDB's progress reports: not an error


class Shape(Enum):
    NONE = auto()
    SIMPLE = auto()
    RESULTS = auto()
    FETCH = auto()  # rows of an open cursor
    FIELDS = auto()  # COM_FIELD_LIST: column definitions until EOF
    PREPARE = auto()
    AUTH = auto()
    STREAM = auto()  # replication or clone: no request/response any more


SHAPES = {
    0x01: Shape.NONE,
    0x18: Shape.NONE,
    0x19: Shape.NONE,
    0x03: Shape.RESULTS,
    0x0A: Shape.RESULTS,
    0x17: Shape.RESULTS,
    0xFA: Shape.RESULTS,
    0x1C: Shape.FETCH,
    0x04: Shape.FIELDS,
    0x16: Shape.PREPARE,
    0x11: Shape.AUTH,
    0x12: Shape.STREAM,
    0x13: Shape.STREAM,
    0x1E: Shape.STREAM,
    0x20: Shape.STREAM,
}  # fmt: skip  (any other command: SIMPLE)


class Verdict(Enum):
    MORE = auto()  # the response goes on
    DONE = auto()  # this packet ended it
    ENDED_BEFORE = auto()  # it ended with the packet before; this one answers the next command
    PROGRESS = auto()  # a MariaDB progress report: the response goes on
    BROKEN = auto()  # cannot be this response (`Response.broken` says why)


@dataclass(slots=True)
class EofMode:
    """A connection's CLIENT_DEPRECATE_EOF: from its login, else from the first result."""

    deprecated: bool | None = None

    def saw(self, eof: bool) -> None:
        if self.deprecated is None:
            self.deprecated = not eof


class _State(Enum):
    FIRST = auto()  # the first packet of the response, or of the next result
    DEFS = auto()
    AFTER_DEFS = auto()  # an EOF, or (CLIENT_DEPRECATE_EOF) what comes next
    ROWS = auto()
    LIST = auto()
    DONE = auto()


@dataclass(slots=True)
class Response:
    shape: Shape
    rows: int = -1  # rows of its resultsets; -1: it had none
    affected: int = -1  # rows its OK packets say were changed; -1: it had none
    statement: int = -1  # a prepare's statement id
    error: wire.Err | None = None
    malformed: bool = False  # a COM_STMT_PREPARE_OK that did not read: ended there
    broken: str = ""
    bytes: int = 0
    _state: _State = _State.FIRST
    _defs: int = 0
    _blocks: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.shape is Shape.FETCH:
            self._state, self.rows = _State.ROWS, 0
        elif self.shape is Shape.FIELDS:
            self._state = _State.LIST

    @property
    def may_have_ended(self) -> bool:
        """A prepare read to its last definition, its EOF yet unseen: whole at close."""
        return self.shape is Shape.PREPARE and self._state is _State.AFTER_DEFS and not self._blocks

    def read(self, p: wire.Packet, mode: EofMode) -> Verdict:
        """What this packet (the next from the server) does to the response. A packet after
        DONE is not read: the caller has moved on to the next command."""
        verdict = self._read(p, mode)
        if verdict is Verdict.DONE:
            self._state = _State.DONE
        return verdict

    def _read(self, p: wire.Packet, mode: EofMode) -> Verdict:
        first, state = p.first, self._state
        if state is _State.ROWS and first < wire.EOF:  # a row: most packets, so first
            self.bytes += p.wire_bytes
            self.rows += 1
            return Verdict.MORE
        eof = first == wire.EOF and p.length == wire.EOF_PAYLOAD_BYTES
        if state is _State.AFTER_DEFS and self.may_have_ended and not eof:
            mode.saw(eof=False)
            return Verdict.ENDED_BEFORE
        self.bytes += p.wire_bytes
        if first == wire.ERR:
            error = wire.err(p.head)
            if error.code == MARIADB_PROGRESS:
                return Verdict.PROGRESS
            self.error = error
            return Verdict.DONE
        shape = self.shape
        if shape is Shape.SIMPLE or (shape is Shape.AUTH and first == wire.OK):
            return Verdict.DONE
        if shape is Shape.AUTH:
            return Verdict.MORE
        if state is _State.FIRST:
            return self._prepared(p, mode) if shape is Shape.PREPARE else self._first(p)
        if state is _State.DEFS:
            self._defs -= 1
            if self._defs:
                return Verdict.MORE
            self._state = _State.AFTER_DEFS
            if shape is Shape.PREPARE and mode.deprecated:
                return self._next_block(mode, eof_read=False)
            return Verdict.MORE
        end = first == wire.EOF and p.length < wire.MAX_PAYLOAD  # an EOF, or an OK as EOF
        if state is _State.LIST:
            return Verdict.DONE if end else Verdict.MORE
        if shape is Shape.PREPARE:  # between two blocks: an EOF or the next block's first
            mode.saw(eof)
            if eof:
                return self._next_block(mode, eof_read=True)
            self._defs = self._blocks.pop(0) - 1
            self._state = _State.DEFS if self._defs else _State.AFTER_DEFS
            return Verdict.MORE if self._defs else self._next_block(mode, eof_read=False)
        if not end:
            self.rows += 1
            self._state = _State.ROWS
            return Verdict.MORE
        mode.saw(eof)
        flags = wire.status_flags(p.head, p.length)
        if state is _State.ROWS or not eof:
            return self._result_end(flags)
        if flags & wire.SERVER_STATUS_CURSOR_EXISTS:  # the rows come by COM_STMT_FETCH
            return Verdict.DONE
        self._state = _State.ROWS
        return Verdict.MORE

    def _first(self, p: wire.Packet) -> Verdict:
        if p.first == wire.OK:
            affected = wire.lenenc(p.head, 1)
            self.affected = max(self.affected, 0) + (affected[0] if affected else 0)
        if p.first == wire.OK or (p.first == wire.EOF and p.length < 9):  # 9: a lenenc count
            return self._result_end(wire.status_flags(p.head, p.length))
        if p.first == wire.LOCAL_INFILE:
            return Verdict.MORE
        counted = wire.column_count(p.head, p.length)
        if counted is None or counted[0] > MAX_COLUMNS:
            self.broken = f"not a resultset's column count ({p.length} bytes)"
            return Verdict.BROKEN
        self.rows = max(self.rows, 0)
        self._defs = counted[0] if counted[1] else 0
        self._state = _State.DEFS if self._defs else _State.AFTER_DEFS
        return Verdict.MORE

    def _prepared(self, p: wire.Packet, mode: EofMode) -> Verdict:
        prepared = wire.prepare_ok(p.head)
        if prepared is None:
            self.malformed = True
            return Verdict.DONE
        self.statement, self._blocks = prepared
        return self._next_block(mode, eof_read=False)

    def _next_block(self, mode: EofMode, eof_read: bool) -> Verdict:
        """A prepare's next block of definitions; after its last, its EOF (EOF mode), none
        (CLIENT_DEPRECATE_EOF) or, the mode unknown, whichever the next packet shows."""
        if self._blocks:
            self._defs, self._state = self._blocks.pop(0), _State.DEFS
            return Verdict.MORE
        if eof_read or mode.deprecated or self._state is _State.FIRST:
            return Verdict.DONE
        self._state = _State.AFTER_DEFS
        return Verdict.MORE

    def _result_end(self, flags: int) -> Verdict:
        if flags & wire.SERVER_MORE_RESULTS_EXISTS:
            self._state = _State.FIRST
            return Verdict.MORE
        return Verdict.DONE
