"""Incremental framing of one direction of a Redis connection: RESP2 and RESP3 values. Pure.

A reader is fed the bytes one side sent, in order, each piece with the times of the socket
call that carried it, and gives every whole top-level value as a `Message`: its type byte, a
short prefix of the strings that matter (a command's arguments, a push's kind, an error's
prefix) and its size and times. Values are framed, never built: a bulk string is counted
through and only its first KEEP_BYTES + 1 bytes are kept (the extra byte says "longer"), and
an aggregate is a counter on a stack, so a 512 MiB value or a million-element array costs the
same few hundred bytes. Only one line (a type byte and its header, a simple string, an inline
command) is ever buffered whole, capped at MAX_LINE_BYTES.

The request side (`requests=True`) reads what a Redis server accepts: arrays of bulk strings,
or inline commands (a line of words; what telnet and `nc` send). The reply side reads every
RESP2 and RESP3 type, streamed strings and aggregates included. An RESP3 attribute (`|`) is
not a value: it annotates the value that follows, so it is framed and skipped.

Never raises on input: anything a Redis peer would not send sets `error` (one line) and the
reader stops; its buffers are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Redis refuses inline requests past 64 KiB (PROTO_INLINE_MAX_SIZE) and its simple strings,
# errors and numbers are far shorter; a longer line is not Redis.
MAX_LINE_BYTES = 64 * 1024
# 512 MiB is Redis's largest string (proto-max-bulk-len's default); a larger declared length
# needs a server configured for it and is far likelier garbage than data.
MAX_BULK_BYTES = 512 * 1024 * 1024
# hiredis's default REDIS_READER_MAX_ARRAY_ELEMENTS. Elements are counted, not stored, so
# this bounds nonsense, not memory.
MAX_AGGREGATE_LEN = (1 << 32) - 1
# Redis's deepest own replies (COMMAND DOCS, XINFO STREAM FULL, CLUSTER SHARDS) nest under 8;
# 64 leaves room for Lua and module replies. Each level is one small stack entry.
MAX_DEPTH = 64
# What is kept of a string: command names (the longest is 20 characters), subcommands, a
# database index, a push's kind, an error's prefix, and arguments for db.query.text.
KEEP_BYTES = 128

INLINE = 0  # Message.type of an inline command: a line, not a RESP type byte
_ATTRIBUTE = ord("|")
_STREAMED_STRING = ord("$")  # a `$?` frame on the stack: chunks `;n` until `;0`
_SCALARS = frozenset(b"+-:,(_#")
_BULKS = frozenset(b"$!=")
_AGGREGATES = frozenset(b"*%~|>")
_PAIRED = frozenset(b"%|")  # maps and attributes count pairs
_CRLF = b"\r\n"
# Scalars are checked: a value that cannot be what its type byte says means we are not
# reading RESP (or lost sync), and failing there beats pairing garbage.
_SCALAR_FORMS = {
    ord(":"): re.compile(rb"[+-]?[0-9]{1,20}"),
    ord("("): re.compile(rb"[+-]?[0-9]+"),
    ord(","): re.compile(rb"[+-]?(?:inf|nan|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"),
    ord("#"): re.compile(rb"[tf]"),
    ord("_"): re.compile(rb""),
}
# Bytes an inline command never holds: they mark a binary protocol, not someone typing.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(slots=True)
class Message:
    type: int  # the top-level type byte (ord("*"), ord("-"), ...) or INLINE
    scalar: bytes  # a scalar value's line or bulk prefix; b"" for aggregates and nulls
    items: list[bytes | None] = field(default_factory=list)  # direct children kept: a
    # string's prefix, None for anything else (a nested aggregate, a null)
    count: int = 0  # direct children in all (a command's arguments, its name included)
    start_ns: int = 0  # start time of the call that carried the first byte
    end_ns: int = 0  # end time of the call that carried the last byte
    size: int = 0  # bytes on the wire


class RespReader:
    """Frames the top-level values of one direction (requests or replies)."""

    def __init__(self, requests: bool, keep_items: int) -> None:
        self.requests = requests
        self.keep_items = keep_items  # direct children of an aggregate to keep a prefix of
        # The most buffered_bytes() can be: a line, and the prefixes of a message's children.
        self.max_buffered = MAX_LINE_BYTES + 1 + (keep_items + 1) * (KEEP_BYTES + 1)
        self.error = ""
        self._line = bytearray()  # a line begun in an earlier piece
        self._stack: list[list[int]] = []  # per open aggregate: [left (-1: streamed), type]
        self._bulk_left = 0  # bulk payload bytes plus its CRLF still to come
        self._bulk_is_value = True  # False for the chunks of a streamed string
        self._keep: bytes | None = None  # the prefix of the bulk being read, if kept
        self._top = 0
        self._items: list[bytes | None] = []
        self._count = 0
        self._size = 0  # bytes of the message being read
        self._discard = False  # the current step read bytes that belong to no message
        self._start_ns = 0

    def buffered_bytes(self) -> int:
        """Bytes held: at most max_buffered (and a stack of MAX_DEPTH pairs of ints)."""
        kept = sum(len(item) for item in self._items if item is not None)
        return len(self._line) + kept + (len(self._keep) if self._keep is not None else 0)

    def feed(self, data: bytes, start_ns: int, end_ns: int) -> list[Message]:
        out: list[Message] = []
        pos, end = 0, len(data)
        while pos < end and not self.error:
            if self._size == 0:
                self._start_ns = start_ns
            before = len(out)
            if self._bulk_left:
                new = self._bulk(data, pos, end_ns, out)
            else:
                new = self._line_step(data, pos, end_ns, out)
            self._size += new - pos
            pos = new
            if self._discard:  # the step's bytes (and a line begun before) were no message
                self._discard, self._size = False, 0
            elif len(out) > before:  # a message ended with this step: it had these bytes
                out[-1].size, self._size = self._size, 0
        return out

    def _line_step(self, data: bytes, pos: int, t: int, out: list[Message]) -> int:
        newline = data.find(b"\n", pos, pos + MAX_LINE_BYTES + 2 - len(self._line))
        if newline < 0:
            if len(self._line) + len(data) - pos > MAX_LINE_BYTES + 1:
                self._fail("line longer than 64 KiB")
                return len(data)
            self._line += data[pos:]
            return len(data)
        line = data[pos:newline]
        if self._line:
            line = bytes(self._line) + line
            self._line.clear()
        if self.requests and not self._stack and line[:1] != b"*":
            self._inline(line, t, out)
        elif line[-1:] != b"\r":
            self._fail("line not ended by CRLF")
        else:
            self._typed(line[:-1], t, out)
            after = newline + 1
            if 0 < self._bulk_left <= len(data) - after:  # the whole bulk is here: read it now
                return self._bulk(data, after, t, out)
        return newline + 1

    def _inline(self, line: bytes, t: int, out: list[Message]) -> None:
        if _CONTROL.search(line):
            self._fail("not a Redis command")
            return
        words = line.split()
        if not words:  # Redis ignores empty lines between commands: they belong to none
            self._discard = True
            return
        self._top = INLINE
        self._count = len(words)
        self._items = [word[: KEEP_BYTES + 1] for word in words[: self.keep_items]]
        self._emit(b"", t, out)

    def _typed(self, line: bytes, t: int, out: list[Message]) -> None:
        kind, rest = line[0] if line else -1, line[1:]
        stack = self._stack
        if self.requests and stack and kind != ord("$"):
            self._fail("command argument is not a bulk string")
        elif stack and stack[-1] == [-1, _STREAMED_STRING] and kind != ord(";"):
            self._fail("streamed string chunk expected")
        elif kind in _SCALARS:
            form = _SCALAR_FORMS.get(kind)
            if form is not None and form.fullmatch(rest) is None:
                self._fail(f"invalid {chr(kind)} value")
                return
            self._start_value(kind)
            self._done(rest[: KEEP_BYTES + 1], t, out)
        elif kind in _BULKS:
            self._bulk_header(kind, rest, t, out)
        elif kind in _AGGREGATES:
            self._aggregate_header(kind, rest, t, out)
        elif kind == ord(";") and stack and stack[-1][1] == _STREAMED_STRING:
            size = self._length(rest, MAX_BULK_BYTES)
            if size == 0:
                stack.pop()
                self._done(None, t, out)
            elif size > 0:
                self._bulk_left, self._bulk_is_value, self._keep = size + 2, False, None
        elif kind == ord(".") and stack and stack[-1][0] == -1:
            if stack.pop()[1] != _ATTRIBUTE:
                self._done(None, t, out)
        else:
            self._fail(f"unexpected RESP type byte {line[:1]!r}")

    def _bulk_header(self, kind: int, rest: bytes, t: int, out: list[Message]) -> None:
        if rest == b"-1" and kind == ord("$") and not self.requests:  # RESP2 null bulk
            self._start_value(kind)
            self._done(None, t, out)
        elif rest == b"?" and kind == ord("$") and not self.requests:
            self._start_value(kind)
            self._push(_STREAMED_STRING, -1)
        else:
            size = self._length(rest, MAX_BULK_BYTES)
            if size < 0:
                return
            self._start_value(kind)
            self._bulk_left, self._bulk_is_value = size + 2, True
            wanted = not self._stack or (
                len(self._stack) == 1
                and self._stack[0][1] != _ATTRIBUTE
                and len(self._items) < self.keep_items
            )
            self._keep = b"" if wanted else None

    def _aggregate_header(self, kind: int, rest: bytes, t: int, out: list[Message]) -> None:
        if rest in (b"-1", b"0") and kind == ord("*") and self.requests:
            self._discard = True  # Redis ignores an empty command: it is no message
        elif rest == b"-1" and kind == ord("*"):  # RESP2 null array
            self._start_value(kind)
            self._done(None, t, out)
        elif rest == b"?" and not self.requests:
            self._start_value(kind)
            self._push(kind, -1)
        else:
            count = self._length(rest, MAX_AGGREGATE_LEN)
            if count < 0:
                return
            self._start_value(kind)
            if count:
                self._push(kind, 2 * count if kind in _PAIRED else count)
            elif kind != _ATTRIBUTE:  # an empty attribute annotates the next value: nothing
                self._done(None, t, out)

    def _bulk(self, data: bytes, pos: int, t: int, out: list[Message]) -> int:
        left = self._bulk_left
        end = min(len(data), pos + left)
        crlf = pos + left - 2  # where the CRLF after the payload starts
        keep = self._keep
        stop = min(end, crlf, pos + KEEP_BYTES + 1 - len(keep or b""))
        if keep is not None and stop > pos:  # (stop < pos once only the CRLF is left)
            keep += data[pos:stop]
            self._keep = keep
        if end > crlf:  # some of the CRLF is in this piece
            start = max(pos, crlf)
            if data[start:end] != _CRLF[start - crlf : end - crlf]:
                self._fail("bulk string not followed by CRLF")
                return end
        self._bulk_left = left - (end - pos)
        if self._bulk_left == 0 and self._bulk_is_value:
            self._keep = None
            self._done(keep, t, out)
        return end

    def _length(self, rest: bytes, limit: int) -> int:
        """A declared length, or -1 after failing on one that is malformed or over limit."""
        if not rest.isdigit() or len(rest) > 12:  # isdigit on bytes: ASCII digits only
            self._fail(f"invalid length {rest[:16]!r}")
            return -1
        value = int(rest)
        if value > limit:
            self._fail(f"declared length {value} over the limit of {limit}")
            return -1
        return value

    def _start_value(self, kind: int) -> None:
        if not self._stack and kind != _ATTRIBUTE:
            self._top = kind

    def _push(self, kind: int, left: int) -> None:
        if len(self._stack) >= MAX_DEPTH:
            self._fail(f"values nested deeper than {MAX_DEPTH}")
        else:
            self._stack.append([left, kind])

    def _done(self, value: bytes | None, t: int, out: list[Message]) -> None:
        """A value ended: count it in the aggregates it closes, and emit the top one."""
        stack = self._stack
        scalar = value or b""
        while stack:
            frame = stack[-1]
            if len(stack) == 1 and frame[1] != _ATTRIBUTE:
                self._count += 1
                if len(self._items) < self.keep_items:
                    self._items.append(value)
            if frame[0] < 0:  # streamed: it ends at its "." line
                return
            frame[0] -= 1
            if frame[0]:
                return
            stack.pop()
            if frame[1] == _ATTRIBUTE:  # not a value: the annotated value follows
                return
            value, scalar = None, b""
        self._emit(scalar, t, out)

    def _emit(self, scalar: bytes, t: int, out: list[Message]) -> None:
        # Its size is set by feed(), which knows the bytes this step consumed.
        out.append(Message(self._top, scalar, self._items, self._count, self._start_ns, t))
        self._items, self._count = [], 0

    def drop(self) -> None:
        """Forget the value being read (the connection ended, or the reader failed)."""
        self._line.clear()
        self._stack.clear()
        self._items = []
        self._keep = None
        self._bulk_left = self._count = self._size = 0

    def _fail(self, reason: str) -> None:
        self.error = reason
        self.drop()
