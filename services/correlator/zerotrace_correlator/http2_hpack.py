"""HPACK (RFC 7541) header blocks of one direction of an HTTP/2 connection, decoded with that
direction's dynamic table, including on a connection joined mid-way. Pure.

One `HpackDecoder` per direction: the table is the encoder's (the sender's) as the receiver
keeps it. The static table and the Huffman code come from zerotrace.hpack_codes (shared with
the collector's redactor).

Joined mid-way, the table holds entries inserted before we looked. We keep the entries we saw
inserted, newest first, as the peer does; the peer's table is then a prefix of ours (it may
have evicted some we keep, never one we lack), so an index within what we saw is right and an
index past it names an entry we never saw: that field's name or value is None ("unknown") and
decoding goes on (`unknown_references` counts them). A block we could not read (`lose_sync`:
cut by a limit) may have inserted entries we do not know; the table is cleared and reads on the
same way.

Bounded: the table holds at most MAX_TABLE_BYTES (RFC 7541 entry sizes), whatever size update a
peer sends (clamped, counted); a string is at most a header block, and the caller bounds
blocks. Only the `wanted` fields' values are returned, each cut at MAX_VALUE_BYTES.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container

from zerotrace.hpack_codes import STATIC_NAMES, STATIC_VALUES, huffman_decode

# The most a table may hold. RFC 7540's default is 4096; servers raise it to 64 KiB at most in
# practice (nghttp2 and Go cap theirs at 64 KiB too). Past it, entries are evicted early: a
# later reference to one is "unknown", never wrong.
MAX_TABLE_BYTES = 65536
DEFAULT_TABLE_BYTES = 4096  # RFC 7540 6.5.2: SETTINGS_HEADER_TABLE_SIZE's initial value
# A kept value is cut here: a path or an authority longer than this is a query string or abuse.
MAX_VALUE_BYTES = 1024
_ENTRY_OVERHEAD = 32  # RFC 7541 4.1
_STATIC = len(STATIC_NAMES)
_MAX_INTEGER = 1 << 32

# Counter names.
UNKNOWN_REFERENCES = "hpack_unknown_references"  # dynamic entries never seen (joined late)
TABLE_SIZE_CLAMPED = "hpack_table_size_clamped"  # a size update over MAX_TABLE_BYTES
TABLE_SIZE_OVER_SETTING = "hpack_table_size_over_setting"  # over the receiver's setting
SYNC_LOST = "hpack_sync_lost"  # a block skipped: the table cleared

Field = tuple[bytes | None, bytes | None]  # None: a dynamic entry we never saw


class HpackError(Exception):
    """The block is not HPACK (index 0, an integer or string past the block, EOS in Huffman):
    a COMPRESSION_ERROR for the connection."""


class HpackDecoder:
    def __init__(self, counters: dict[str, int], joined_late: bool = False) -> None:
        """counters: shared with the parser. joined_late: the table's size was set before we
        looked; until a size update tells, keep up to MAX_TABLE_BYTES (keeping more than the
        peer is harmless, evicting early only makes unknowns)."""
        self._counters = counters
        self._entries: deque[tuple[Field, int]] = deque()  # newest first, with its size
        self._size = 0
        self.max_size = MAX_TABLE_BYTES if joined_late else DEFAULT_TABLE_BYTES
        self.setting = MAX_TABLE_BYTES  # the receiver's SETTINGS_HEADER_TABLE_SIZE, if sent

    def lose_sync(self) -> None:
        self._entries.clear()
        self._size = 0
        self._count(SYNC_LOST)

    def decode(self, block: bytes, wanted: Container[bytes]) -> list[Field]:
        """The fields of a whole header block whose names are in `wanted` (or unknown), in
        order, values cut at MAX_VALUE_BYTES. Raises HpackError."""
        out: list[Field] = []
        at, end = 0, len(block)
        while at < end:
            byte = block[at]
            if byte & 0x80:  # indexed field
                index, at = _integer(block, at, 7)
                name, value = self._lookup(index)
            elif byte & 0xE0 == 0x20:  # dynamic table size update
                size, at = _integer(block, at, 5)
                self._resize(size)
                continue
            else:  # literal: with incremental indexing (01), without (0000) or never (0001)
                indexing = byte & 0xC0 == 0x40
                index, at = _integer(block, at, 6 if indexing else 4)
                if index:
                    name = self._lookup(index)[0]
                else:
                    name, at = _string(block, at)
                value, at = _string(block, at)
                if indexing:
                    self._insert(name, value)
            if name is None or name in wanted:
                out.append((name, None if value is None else value[:MAX_VALUE_BYTES]))
        return out

    def _lookup(self, index: int) -> Field:
        if index == 0:
            raise HpackError("index 0")
        if index <= _STATIC:
            return STATIC_NAMES[index - 1], STATIC_VALUES[index - 1]
        if index - _STATIC <= len(self._entries):
            return self._entries[index - _STATIC - 1][0]
        self._count(UNKNOWN_REFERENCES)
        return None, None

    def _insert(self, name: bytes | None, value: bytes | None) -> None:
        # An unknown name's length is unknown: counted as 0, so we evict late, never early.
        size = len(name or b"") + len(value or b"") + _ENTRY_OVERHEAD
        self._entries.appendleft(((name, value), size))
        self._size += size
        self._evict()

    def _resize(self, size: int) -> None:
        if size > self.setting:
            self._count(TABLE_SIZE_OVER_SETTING)
        if size > MAX_TABLE_BYTES:
            self._count(TABLE_SIZE_CLAMPED)
        self.max_size = min(size, MAX_TABLE_BYTES)
        self._evict()

    def _evict(self) -> None:
        while self._size > self.max_size and self._entries:
            self._size -= self._entries.pop()[1]

    def _count(self, name: str) -> None:
        self._counters[name] = self._counters.get(name, 0) + 1


def _integer(block: bytes, at: int, prefix: int) -> tuple[int, int]:
    """RFC 7541 5.1: an integer with a `prefix`-bit prefix at `at`; (value, next offset)."""
    limit = (1 << prefix) - 1
    value = block[at] & limit
    at += 1
    if value < limit:
        return value, at
    shift = 0
    while True:
        if at >= len(block):
            raise HpackError("integer past the block")
        byte = block[at]
        at += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if value >= _MAX_INTEGER:
            raise HpackError("integer too large")
        if not byte & 0x80:
            return value, at


def _string(block: bytes, at: int) -> tuple[bytes, int]:
    """RFC 7541 5.2: a string literal, Huffman-coded or not; (bytes, next offset)."""
    if at >= len(block):
        raise HpackError("string past the block")
    huffman = block[at] & 0x80
    length, at = _integer(block, at, 7)
    if at + length > len(block):
        raise HpackError("string past the block")
    raw = block[at : at + length]
    if huffman:
        text, _, state = huffman_decode(raw)
        if state < 0:
            raise HpackError("EOS in a Huffman string")
        raw = text
    return raw, at + length
