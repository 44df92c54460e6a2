"""HTTP/2 for the redactor (pure): one direction of one HTTP/2 connection, masked in place
so that the result is still a valid HTTP/2 stream whose header blocks decode.

What is masked, as for HTTP/1.1 (`redaction`): the value of every header field whose name is
a credential header, token-shaped values and credential query parameters in every other
value (`:path` included), by `redaction_hpack`; DATA payloads through the same body masking
as HTTP/1 bodies (JSON credentials, and prompt and completion text unless kept), one body
per stream id.

Compressed bodies, as for HTTP/1: the scanner cannot read a compressed body, so cannot mask
it. A stream whose HEADERS block (with its CONTINUATIONs) names a content-encoding other than
identity (`HeaderBlocks.compressed`, read at END_HEADERS) has, unless content is kept, every
later DATA payload byte overwritten with FILL, padding and frame headers kept, until the
stream ends in this direction (END_STREAM, RST_STREAM); counted once per stream in
`RedactionCounts.content`. Either direction: a request body may be compressed too. While the
framing is lost (below) and such a stream is open, what follows is filled whole, not scanned:
the lost bytes may be its body.

How, without changing one length: frames are walked (9-byte header; padding, priority and
promised-id fields skipped) with their state carried from call to call, so a frame may be
cut anywhere; the header block fragments of HEADERS, PUSH_PROMISE and CONTINUATION go to the
direction's `HeaderBlocks`, each DATA payload to its stream's body scanner.

Limits, on purpose:
- A connection is taken for HTTP/2 from its first call (the client preface, or frames that
  look like HTTP/2 in every field checked), from a later call that starts with the preface
  (h2c by prior knowledge), or after a `101` upgrade to h2c (`redaction.StreamRedactor`).
- A gap (a call captured in part) or a frame that cannot be loses the framing: what follows
  is masked as text (`redaction`'s scanner) until a call starts with frames again; the
  dynamic table is then emptied (its newest entries may be among the lost bytes). Counted in
  `RedactionCounts.h2_resync`.
- At most MAX_STREAMS bodies are followed at once; past it they all start afresh (counted in
  `h2_resync` too). At most MAX_STREAMS compressed streams are followed at once; past it the
  oldest is forgotten (its later DATA then scanned as text; counted in `h2_resync` too): the
  ends of streams reset by the other direction are not seen here, so these can pile up.
- A compressed stream is known by its own header block only: one whose content-encoding is a
  dynamic entry the redactor does not hold (a connection joined midway, a table forgotten
  after lost bytes) is not told, and its DATA is scanned as text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from zerotrace_collector.redaction_hpack import (
    FILL,
    MAX_TABLE_BYTES,
    CallBytes,
    Counts,
    HeaderBlocks,
    TextRedactor,
)

__all__ = ["MAX_STATE_BYTES", "PREFACE", "H2Redactor", "after_h2c_upgrade", "looks_h2"]

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# A frame's length may reach 2^24-1 once a peer raised SETTINGS_MAX_FRAME_SIZE (Go's server
# takes 1 MiB); until then, and for frames of unknown types, 16,384 (RFC 9113 4.2).
MAX_FRAME: Final = (1 << 24) - 1
DEFAULT_MAX_FRAME: Final = 16_384
# Concurrent streams whose DATA is followed (SETTINGS_MAX_CONCURRENT_STREAMS is 100 in
# nghttp2, 128 in nginx): past it every body starts afresh, and it is counted.
MAX_STREAMS: Final = 128
# What one direction's state may hold: the HPACK table, the bodies (a text scanner and its
# tail each, ~300 bytes: 1 KiB allowed), the compressed streams' ids (a dict entry and an int,
# 128 bytes allowed), the name being read and the fields. The fuzz target's bound is made of it.
MAX_STATE_BYTES: Final = MAX_TABLE_BYTES + MAX_STREAMS * (1024 + 128) + 16 * 1024

_DATA, _HEADERS, _PRIORITY, _RST, _SETTINGS, _PUSH, _PING, _GOAWAY, _WINDOW, _CONT = range(10)
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIO = 0x1, 0x1, 0x4, 0x8, 0x20
# Flags each type defines (RFC 9113 6): others set make a frame "not HTTP/2" when sniffing.
_FLAGS: Final = (0x09, 0x2D, 0, 0, 0x01, 0x0C, 0x01, 0, 0, 0x04)
_ON_STREAM: Final = frozenset({_DATA, _HEADERS, _PRIORITY, _RST, _PUSH, _CONT})
_ON_CONNECTION: Final = frozenset({_SETTINGS, _PING, _GOAWAY})
_FIXED_LENGTH: Final = {_PRIORITY: 5, _RST: 4, _PING: 8, _WINDOW: 4}
_UPGRADE_H2C: Final = re.compile(rb"\n(?i:upgrade)[ \t]*:[ \t]*(?i:h2c)\r?\n")


def _frame_ok(length: int, kind: int, flags: int, stream: int, strict: bool) -> bool:
    """Could this be a frame header? *strict* when sniffing a stream not known to be HTTP/2
    (a frame within the default size, of a known type, with only flags it defines)."""
    if kind > _CONT:
        return not strict and length <= DEFAULT_MAX_FRAME
    if length > (DEFAULT_MAX_FRAME if strict else MAX_FRAME):
        return False
    if strict and (flags & ~_FLAGS[kind] or stream & 0x80000000):
        return False
    stream &= 0x7FFFFFFF
    if (kind in _ON_STREAM and not stream) or (kind in _ON_CONNECTION and stream):
        return False
    fixed = _FIXED_LENGTH.get(kind)
    if fixed is not None and length != fixed:
        return False
    if kind == _SETTINGS:
        return length % 6 == 0 and not (flags & _ACK and length)
    return kind != _GOAWAY or length >= 8


def after_h2c_upgrade(data: bytes) -> int:
    """Where HTTP/2 starts in a call that starts with a 101 to h2c (after its head), or -1."""
    end = data.find(b"\r\n\r\n") + 4
    return end if end >= 4 and _UPGRADE_H2C.search(data, 0, end) else -1


def looks_h2(data: bytes) -> bool:
    """Does a call start with HTTP/2: the client preface (or its first bytes), or frames
    whose every header in the call passes the strict checks?"""
    if data[:5] == PREFACE[:5]:
        return PREFACE.startswith(data[:24])
    pos, size = 0, len(data)
    while pos + 9 <= size:
        length = int.from_bytes(data[pos : pos + 3], "big")
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big")
        if not _frame_ok(length, data[pos + 3], data[pos + 4], stream, strict=True):
            return False
        pos += 9 + length
    return pos > 0


class H2Redactor:
    """One direction of an HTTP/2 connection: `redact` its calls' payloads in order, as
    `redaction.StreamRedactor.redact` (which hands a stream over to this one)."""

    __slots__ = (
        "_block_stream",
        "_blocks",
        "_bodies",
        "_body",
        "_counts",
        "_fallback",
        "_filled",
        "_flags",
        "_head",
        "_in_frame",
        "_keep_content",
        "_kind",
        "_length",
        "_lost",
        "_offset",
        "_pad",
        "_pre",
        "_preface",
        "_stream",
    )

    def __init__(
        self,
        text: Callable[[], TextRedactor],
        body: Callable[[], TextRedactor],
        names: frozenset[bytes],
        counts: Counts,
        keep_content: bool = False,
    ) -> None:
        """*text*: a scanner for header values (credentials only); *body*: one for a stream's
        DATA, and for bytes whose framing was lost (content masked unless kept);
        *keep_content*: compressed bodies pass as captured (else they are filled whole)."""
        self._body = body
        self._counts = counts
        self._keep_content = keep_content
        self._blocks = HeaderBlocks(names, text, counts)
        self._bodies: dict[int, TextRedactor] = {}
        # Streams whose DATA is filled whole (compressed), oldest first; the stream whose
        # HEADERS block is being read (0: none, a PUSH_PROMISE's, or one that ended with it).
        self._filled: dict[int, None] = {}
        self._block_stream = 0
        self._fallback = body()
        self._head = bytearray()  # a frame header cut by a call's end
        self._in_frame = False
        self._kind = self._flags = self._stream = self._length = self._offset = 0
        self._pad = self._pre = 0
        self._preface = 0  # preface bytes seen; -1 once frames began
        self._lost = False

    def redact(self, data: bytes, complete: bool = True) -> bytes:
        if not data:
            self._lose(complete)
            return data
        out = CallBytes(data)
        at = 0
        if self._lost:
            if not looks_h2(data):
                if self._filled:  # perhaps a compressed body's bytes: the safe side
                    return bytes((FILL,)) * len(data)
                return self._fallback.redact(data, complete)
            self._resync()
        if self._preface >= 0:
            at = self._skip_preface(data)
        self._blocks.begin_call()
        stop = self._frames(data, at, out)
        if stop < len(data):  # not a frame: from here on, text
            self._counts.h2_resync += 1
            self._lost = True
            piece = data[stop:]
            masked = (
                bytes((FILL,)) * len(piece)
                if self._filled
                else self._fallback.redact(piece, complete)
            )
            if masked is not piece:
                out.write(stop, masked)
        else:
            self._blocks.end_call(out)
            self._lose(complete)
        return out.result()

    def _lose(self, complete: bool) -> None:
        if not complete and not self._lost:  # bytes after this call were not seen
            self._counts.h2_resync += 1
            self._lost = True

    def _resync(self) -> None:
        """A call starts with frames again: read them from here, the table emptied (its
        newest entries may be among the lost bytes), every body told of the gap."""
        self._lost = False
        self._head.clear()
        self._in_frame = False
        self._preface = 0  # a call that starts with the preface: a connection anew
        self._block_stream = 0
        self._blocks.reset()
        self._blocks.forget_table()
        for body in self._bodies.values():
            body.redact(b"", complete=False)

    def _skip_preface(self, data: bytes) -> int:
        seen = self._preface
        take = min(len(PREFACE) - seen, len(data))
        if data[:take] != PREFACE[seen : seen + take]:
            self._preface = -1  # the server's side, or a connection joined midway
            return 0
        self._preface = seen + take if seen + take < len(PREFACE) else -1
        return take

    def _frames(self, data: bytes, at: int, out: CallBytes) -> int:
        """Walks the frames from data[at]; returns where a header that cannot be was (or
        len(data))."""
        size = len(data)
        while at < size:
            if not self._in_frame:
                begin = at
                if not self._head and size - at >= 9:
                    head = data[at : at + 9]
                    at += 9
                else:
                    take = 9 - len(self._head)
                    self._head += data[at : at + take]
                    at += min(take, size - at)
                    if len(self._head) < 9:
                        break
                    head = bytes(self._head)
                    self._head.clear()
                if not self._frame_start(head):
                    return begin
                continue
            take = min(size - at, self._length - self._offset)
            if not self._payload(data, at, take, out):
                return at
            at += take
            self._offset += take
            if self._offset == self._length:
                self._frame_end()
        return size

    def _frame_start(self, head: bytes) -> bool:
        length = int.from_bytes(head[:3], "big")
        kind, flags = head[3], head[4]
        stream = int.from_bytes(head[5:], "big") & 0x7FFFFFFF
        if not _frame_ok(length, kind, flags, stream, strict=False):
            return False
        self._length, self._kind, self._flags, self._stream = length, kind, flags, stream
        self._offset = self._pad = 0
        self._pre = 0
        if kind == _HEADERS:  # a block that ends the stream is followed by no DATA
            self._block_stream = 0 if flags & _END_STREAM else stream
        elif kind == _PUSH:  # a promised request's headers: it has no body
            self._block_stream = 0
        if kind in (_DATA, _HEADERS, _PUSH):
            padded = flags & _PADDED != 0
            self._pre = padded + (5 if kind == _HEADERS and flags & _PRIO else 0)
            self._pre += 4 if kind == _PUSH else 0
            self._pad = -1 if padded else 0
            if self._pre > length:
                return False
        self._in_frame = True
        if not length:
            self._frame_end()
        return True

    def _payload(self, data: bytes, at: int, size: int, out: CallBytes) -> bool:
        """data[at:at + size] is the frame's payload from `_offset` on: its content (a DATA
        body's bytes, a header block fragment) goes to what reads it."""
        kind = self._kind
        if kind not in (_DATA, _HEADERS, _PUSH, _CONT) or not size:
            return True
        low = self._offset
        if self._pad < 0:  # PADDED: the pad length is the payload's first byte
            self._pad = data[at]
            if self._pre + self._pad > self._length:
                return False
        first = max(low, self._pre)
        last = min(low + size, self._length - self._pad)
        if first >= last:
            return True
        begin, end = at + first - low, at + last - low
        if kind != _DATA:
            return self._blocks.feed(data, begin, end, out)
        if self._filled and self._stream in self._filled:  # compressed: filled whole
            out.write(begin, bytes((FILL,)) * (end - begin))
            return True
        body = self._bodies.get(self._stream)
        if body is None:
            if len(self._bodies) >= MAX_STREAMS:
                self._counts.h2_resync += 1
                self._bodies.clear()
            body = self._bodies[self._stream] = self._body()
        piece = data[begin:end]
        masked = body.redact(piece)
        if masked is not piece:
            out.write(begin, masked)
        return True

    def _frame_end(self) -> None:
        self._in_frame = False
        kind, flags = self._kind, self._flags
        if kind in (_HEADERS, _PUSH, _CONT) and flags & _END_HEADERS:
            if self._blocks.compressed and self._block_stream and not self._keep_content:
                self._fill(self._block_stream)
            self._block_stream = 0
            self._blocks.block_end()
        if (kind in (_DATA, _HEADERS) and flags & _END_STREAM) or kind == _RST:
            self._bodies.pop(self._stream, None)
            if self._filled:
                self._filled.pop(self._stream, None)

    def _fill(self, stream: int) -> None:
        """From now on, *stream*'s DATA is filled whole (its body is compressed)."""
        if stream in self._filled:
            return
        if len(self._filled) >= MAX_STREAMS:
            self._counts.h2_resync += 1
            del self._filled[next(iter(self._filled))]
        self._filled[stream] = None
        self._bodies.pop(stream, None)
        self._counts.content += 1
