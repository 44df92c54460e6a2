"""HTTP/2 frames (RFC 9113 section 4) of one direction, read across calls. Pure.

`FrameReader.feed` gives, in wire order, a `Frame` for each frame once its last byte came,
and for DATA frames also `DataPiece`s as their bytes come (padding left out), so a long body
streams through and is never held. What a frame keeps of its payload is bounded by type: a
header block fragment up to MAX_HEADER_BLOCK_BYTES (the caller adds CONTINUATIONs and checks
the total), SETTINGS up to MAX_SETTINGS entries, GOAWAY its first 8 bytes (the debug data is
skipped), the fixed-size frames whole, unknown types nothing.

A frame may be as long as 16 MiB (the 24-bit length: SETTINGS_MAX_FRAME_SIZE's ceiling);
frames longer than the receiver announced (16384 until its SETTINGS say more) are read anyway
and counted. A frame header that breaks RFC 9113's rules (a stream frame on stream 0, a
connection frame on a stream, a fixed-size frame of another size) is a protocol error: the
reader stops with a reason. Joined mid-connection, a direction's first bytes may start inside
a frame: until one plausible frame header is read (`synced`), a call whose bytes do not start
with one is skipped whole (counted) and the next call is tried.
"""

from __future__ import annotations

from dataclasses import dataclass

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0, 1, 2, 3, 4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 5, 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20

HEADER_BYTES = 9
MAX_FRAME_BYTES = (1 << 24) - 1  # 16 MiB: the wire's ceiling
DEFAULT_MAX_FRAME_BYTES = 16384  # SETTINGS_MAX_FRAME_SIZE's initial value
# A header block (HEADERS or PUSH_PROMISE and its CONTINUATIONs), compressed. Servers accept
# 16-64 KiB of headers (nghttp2 64 KiB, Go 1 MiB decoded); past this the block is skipped.
MAX_HEADER_BLOCK_BYTES = 65536
MAX_SETTINGS = 32  # RFC 9113 defines 7 (plus extensions); more are not read
_KEEP_FIXED = {PRIORITY: 5, RST_STREAM: 4, PING: 8, WINDOW_UPDATE: 4, GOAWAY: 8}
_FLAGS = {DATA: 0x09, HEADERS: 0x2D, SETTINGS: 0x01, PUSH_PROMISE: 0x0C, PING: 0x01,
          CONTINUATION: 0x04}  # fmt: skip
_ON_STREAM = frozenset({DATA, HEADERS, PRIORITY, RST_STREAM, PUSH_PROMISE, CONTINUATION})
_ON_CONNECTION = frozenset({SETTINGS, PING, GOAWAY})
_BLOCKS = frozenset({HEADERS, PUSH_PROMISE, CONTINUATION})

# Counter names.
OVERSIZED_FRAMES = "h2_oversized_frames"  # longer than the receiver's SETTINGS allow
SKIPPED_BYTES = "h2_bytes_skipped_to_sync"  # joined mid-frame: calls skipped until a frame


@dataclass(frozen=True, slots=True)
class Frame:
    type: int
    flags: int
    stream: int
    length: int  # on the wire, without the 9-byte header
    payload: bytes  # what the reader keeps (see the module doc); b"" for DATA
    start_ns: int  # the time of the call that carried its first byte
    cut: bool = False  # a header block fragment longer than MAX_HEADER_BLOCK_BYTES


@dataclass(frozen=True, slots=True)
class DataPiece:
    stream: int
    data: bytes


def unpack_header(head: bytes) -> tuple[int, int, int, int]:
    """(length, type, flags, stream) of a 9-byte frame header; the reserved bit dropped."""
    return (
        int.from_bytes(head[:3], "big"),
        head[3],
        head[4],
        int.from_bytes(head[5:9], "big") & 0x7FFFFFFF,
    )


def header_error(length: int, kind: int, stream: int) -> str:
    """Why a frame header breaks RFC 9113's rules, or "" (unknown types are allowed)."""
    if kind in _ON_STREAM and stream == 0:
        return f"frame type {kind} on stream 0"
    if kind in _ON_CONNECTION and stream != 0:
        return f"frame type {kind} on stream {stream}"
    fixed = _KEEP_FIXED.get(kind)
    if (kind == GOAWAY and length < 8) or (kind != GOAWAY and fixed and length != fixed):
        return f"frame type {kind} of {length} bytes"
    if kind == SETTINGS and length % 6:
        return f"SETTINGS of {length} bytes"
    return ""


def plausible(head: bytes) -> bool:
    """Is this 9-byte header one a peer would send first on a synced stream: a known type,
    only defined flags, reserved bit clear, within the default frame size, by the rules?"""
    length, kind, flags, stream = unpack_header(head)
    return (
        kind <= CONTINUATION
        and not head[5] & 0x80
        and not flags & ~_FLAGS.get(kind, 0)
        and length <= DEFAULT_MAX_FRAME_BYTES
        and not header_error(length, kind, stream)
        and not (kind == SETTINGS and flags & ACK and length)
    )


class FrameReader:
    def __init__(self, counters: dict[str, int], synced: bool = True) -> None:
        self._counters = counters
        self.synced = synced
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES  # what the receiver announced
        self.error = ""
        self._head = bytearray()
        self._kind = self._flags = self._stream = self._length = 0
        self._left = 0  # payload bytes still to come
        self._kept = bytearray()
        self._keep = 0
        self._start_ns = 0
        self._data_left = -1  # DATA bytes (not padding) still to come; -1: pad length due

    def buffered_bytes(self) -> int:
        return len(self._head) + len(self._kept)

    def feed(self, data: bytes, start_ns: int) -> list[Frame | DataPiece]:
        out: list[Frame | DataPiece] = []
        at, end = 0, len(data)
        while at < end and not self.error:
            if len(self._head) < HEADER_BYTES:
                if not self._head:
                    self._start_ns = start_ns
                take = min(HEADER_BYTES - len(self._head), end - at)
                self._head += data[at : at + take]
                at += take
                if len(self._head) == HEADER_BYTES and not self._begin():
                    self._count(SKIPPED_BYTES, end - at + HEADER_BYTES)
                    self._head.clear()
                    return out
                if self._left:
                    continue
            else:
                take = min(self._left, end - at)
                piece = data[at : at + take]
                at += take
                self._left -= take
                if self._kind == DATA:
                    self._data(piece, out)
                elif len(self._kept) < self._keep:
                    self._kept += piece[: self._keep - len(self._kept)]
            if len(self._head) == HEADER_BYTES and not self._left:
                out.append(self._end())
        return out

    def _begin(self) -> bool:
        """A whole header read: False to skip the call (not synced and not plausible)."""
        head = bytes(self._head)
        if not self.synced and not plausible(head):
            return False
        self.synced = True
        length, kind, flags, stream = unpack_header(head)
        self._length = self._left = length
        self._kind, self._flags, self._stream = kind, flags, stream
        self.error = header_error(length, kind, stream)
        if length > self.max_frame_bytes:
            self._count(OVERSIZED_FRAMES)
        if kind in _BLOCKS:
            self._keep = MAX_HEADER_BLOCK_BYTES + 6  # + pad length, priority or promised id
        elif kind == SETTINGS:
            self._keep = 6 * MAX_SETTINGS
        else:
            self._keep = _KEEP_FIXED.get(kind, 0)
        self._data_left = -1 if kind == DATA and flags & PADDED else length
        return True

    def _data(self, piece: bytes, out: list[Frame | DataPiece]) -> None:
        if self._data_left < 0 and piece:  # the pad length, first byte of a padded frame
            self._data_left = self._length - 1 - piece[0]
            if self._data_left < 0:
                self.error = "DATA padding longer than the frame"
                return
            piece = piece[1:]
        body = piece[: self._data_left]
        if body:
            self._data_left -= len(body)
            out.append(DataPiece(self._stream, body))

    def _end(self) -> Frame:
        cut = self._kind in _BLOCKS and self._length > self._keep
        if self._kind == DATA and self._length == 0 and self._flags & PADDED:
            self.error = "padded DATA of 0 bytes"
        frame = Frame(
            self._kind, self._flags, self._stream, self._length, bytes(self._kept),
            self._start_ns, cut,
        )  # fmt: skip
        self._head.clear()
        self._kept.clear()
        return frame

    def _count(self, name: str, by: int = 1) -> None:
        self._counters[name] = self._counters.get(name, 0) + by
