"""HPACK header blocks masked in place (pure), for the HTTP/2 redactor (`redaction_h2`):
the fragments of one direction's header blocks in, the values of credential headers and the
keys in other values overwritten byte for byte, so the block still decodes; and, per block,
whether it names a compressed body (`compressed`: a content-encoding other than identity).

A block is read as RFC 7541 says: integers, representations, the dynamic table (names only,
and the sizes that decide eviction), so a reference to a dynamic entry names the right
header. A value is overwritten in place:

- a raw value with `*`, by the text scanner (`redaction.StreamRedactor`, credentials only)
  for a value that is not a credential: what it masks (a token, `key=` in `:path`);
- a Huffman-coded one with the code of `*` (0xf9, 8 bits): a credential value becomes all
  0xf9, which decodes to as many `*`; in another value the code is kept up to the first
  character the scanner masks and `*` codes follow from that bit to the value's end, then
  fewer than 8 one bits (valid padding). The rest of such a value is masked too (a code
  cannot be cut in the middle), and it decodes to fewer characters than before.

Why the dynamic table stays right for a decoder of the masked stream: a masked value never
decodes to more characters than the original (a `*` costs 8 bits, no code is shorter than
5), so its entries are no larger, it evicts no sooner, and every index the sender used names
the same entry on both sides. The redactor's own table is bounded (MAX_TABLE_SIZE); a
reference past what it holds (evicted by that bound, a connection joined midway, bytes lost)
names an unknown header, whose literal value is masked whole: the safe side.

Compressed bodies: a block whose content-encoding field (a literal under the static name,
under a literal name, plain or Huffman, or under a dynamic entry's name; or an indexed field
whose dynamic entry was inserted as such) has a value other than "" or "identity" (case and
surrounding whitespace aside) sets `compressed`, which the redactor reads at END_HEADERS: any
other value, an unknown coding, one longer than MAX_CODING or one that does not decode counts
as compressed (the safe side). Only such a field's value bytes are kept, and only that many.
A reference to a dynamic entry the redactor does not hold (a connection joined midway, a
table forgotten after lost bytes) cannot be told: it does not set `compressed`.

Why split calls give what one call gives: a Huffman value's code can only be rewritten in the
call that holds it, so the rewrite starts where the first masked character's code starts,
which the scanner says as soon as it is read: when a call ends on a trigger (`key=`, a
token's prefix) the next character's code, begun in that call, is where it starts.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Final, Protocol

from zerotrace.hpack_codes import STAR_CODE, STATIC_NAMES, huffman_decode

__all__ = ["FILL", "MAX_TABLE_BYTES", "CallBytes", "Counts", "HeaderBlocks", "TextRedactor"]

FILL: Final = b"*"[0]  # what a masked byte becomes (`redaction`'s too)
# The dynamic table's size as HPACK counts it (32 bytes per entry and its name and value):
# 4,096 unless the decoder's SETTINGS allows more and the encoder says so. Past this bound
# older entries are forgotten sooner than the peer forgets them: references to them are then
# unknown, and masked whole. An entry is kept as one 8-byte int: at most 2,048 (16 KiB).
MAX_TABLE_SIZE: Final = 65_536
DEFAULT_TABLE_SIZE: Final = 4_096
MAX_TABLE_BYTES: Final = MAX_TABLE_SIZE // 32 * 8
MAX_NAME: Final = 64  # a literal name longer than this is no credential name: skipped, not kept
# A content-encoding value's bytes kept to read it: the longest coding list a server sends
# ("gzip, deflate" is 13) fits; a longer value is taken for compressed unread.
MAX_CODING: Final = 32
_CODING_NAME: Final = b"content-encoding"
_CODING_INDEX: Final = STATIC_NAMES.index(_CODING_NAME) + 1  # 26 (RFC 7541 Appendix A)
_STATIC_COUNT: Final = len(STATIC_NAMES)
_NOT_COMPRESSED: Final = frozenset((b"", b"identity"))
# A dynamic table entry, one int: size << _SIZE_SHIFT | name length << _NAME_SHIFT | flags.
# Flags: a credential name; the name content-encoding; a compressed content-encoding field.
_CRED, _CODING, _ZIPPED = 1, 2, 4
_NAME_SHIFT: Final = 3
_SIZE_SHIFT: Final = _NAME_SHIFT + 16

# Header block reader states, and what an integer being read is for.
_FIELD, _NAME_LEN, _NAME, _VALUE_LEN, _VALUE = range(5)
_K_INDEXED, _K_LITERAL, _K_SIZE, _K_NAME_LEN, _K_VALUE_LEN = range(5)


class TextRedactor(Protocol):
    """`redaction.StreamRedactor` as used here: the HTTP/1 scanner over a byte stream."""

    def redact(self, data: bytes, complete: bool = True) -> bytes: ...

    @property
    def open(self) -> bool:
        """The last call ended inside a value being masked, or on a trigger (`key=`)."""
        ...


class Counts(Protocol):
    """`redaction.RedactionCounts`, shared by every stream of a redactor."""

    credentials: int  # values masked
    content: int  # bodies masked (a compressed stream's DATA filled whole: `redaction_h2`)
    h2_resync: int  # HTTP/2 framing lost (`redaction_h2`)


class CallBytes:
    """A call's bytes, copied on the first write."""

    __slots__ = ("buf", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.buf: bytearray | None = None

    def write(self, at: int, piece: bytes) -> None:
        if self.buf is None:
            self.buf = bytearray(self.data)
        self.buf[at : at + len(piece)] = piece

    def result(self) -> bytes:
        return self.data if self.buf is None else bytes(self.buf)


def _code_byte(orig: int, first_bit: int, fill_from: int, star_bits: int) -> int:
    """A Huffman value's byte whose first bit is the value's bit *first_bit*: the original
    bits before *fill_from*, `*` codes for *star_bits* bits from it, then one bits."""
    if first_bit >= fill_from and first_bit + 8 <= fill_from + star_bits:
        phase = (first_bit - fill_from) % 8
        return ((STAR_CODE << 8 | STAR_CODE) >> (8 - phase)) & 0xFF
    out = 0
    for k in range(8):
        bit = first_bit + k
        if bit < fill_from:
            one = orig >> (7 - k) & 1
        elif bit - fill_from < star_bits:
            one = STAR_CODE >> (7 - (bit - fill_from) % 8) & 1
        else:
            one = 1
        out = out << 1 | one
    return out


class HeaderBlocks:
    """The HPACK side of one direction: header block fragments in, credential values masked
    in the call's `CallBytes`. Fed only the fragment bytes (no frame headers, padding or
    priority fields), in order, across frames and calls."""

    __slots__ = (
        "_call_bits",
        "_coding",
        "_counts",
        "_cred",
        "_cvalue",
        "_entries",
        "_fill_from",
        "_first_end",
        "_hstate",
        "_huff",
        "_ikind",
        "_index_new",
        "_int",
        "_last_end",
        "_left",
        "_max",
        "_name",
        "_name_len",
        "_names",
        "_scanner",
        "_segs",
        "_shift",
        "_size",
        "_state",
        "_text",
        "_vchars",
        "_vdone",
        "_vhuff",
        "_vlen",
        "_zipped",
    )

    def __init__(
        self, names: frozenset[bytes], text: Callable[[], TextRedactor], counts: Counts
    ) -> None:
        self._names = names
        self._text = text
        self._counts = counts
        self._entries = array("q")  # newest last, packed as _SIZE_SHIFT and _NAME_SHIFT say
        self._size = 0
        self._max = DEFAULT_TABLE_SIZE
        self.reset()

    @property
    def compressed(self) -> bool:
        """The block read so far names a content-encoding other than identity: read at
        END_HEADERS, before `block_end`."""
        return self._zipped

    def reset(self) -> None:
        """Between blocks: a block ended (or was lost) here."""
        self._zipped = False
        self._field_reset()

    def _field_reset(self) -> None:
        """Between fields."""
        self._state = _FIELD
        self._shift = -1  # >= 0 while an integer's continuation bytes are read
        self._int = 0
        self._ikind = _K_INDEXED
        self._index_new = False
        self._huff = False
        self._cred = False
        self._coding = False  # the field's name is content-encoding
        self._cvalue: bytearray | None = None  # its value's bytes (raw or Huffman) so far
        self._name_len = 0
        self._name: bytearray | None = None
        self._left = 0  # bytes of the name or value still to come
        self._scanner: TextRedactor | None = None
        # The value being read: its size, bytes read, characters decoded, Huffman state,
        # the bit where its last whole code ended, the bit `*` codes start from (-1: none).
        self._vlen = self._vdone = self._vchars = self._hstate = self._last_end = 0
        self._vhuff = False
        self._fill_from = -1
        # Its parts in this call (value offset, call offset, size), the first code end in
        # this call and the value's bit this call began at: what can still be rewritten.
        self._segs: list[tuple[int, int, int]] = []
        self._first_end = -1
        self._call_bits = 0

    def forget_table(self) -> None:
        del self._entries[:]
        self._size = 0

    def begin_call(self) -> None:
        self._segs = []
        self._first_end = -1  # the first code end in this call's part of the value
        self._call_bits = self._vdone * 8 if self._state == _VALUE else 0

    def end_call(self, out: CallBytes) -> None:
        """A Huffman value goes on in the next call: if its scanner waits on a trigger (`key=`
        just read) the next character is masked, and it begins in this call's bits."""
        scanner = self._scanner
        huffman_open = self._state == _VALUE and self._vhuff and self._fill_from < 0
        if huffman_open and scanner is not None and scanner.open:
            self._start_fill(self._last_end, out)
        self._segs = []  # bytes of a call gone by cannot be rewritten: not kept

    def block_end(self) -> None:
        """END_HEADERS: a block ends between fields; a field cut short leaves the table unsure."""
        if self._state != _FIELD or self._shift >= 0:
            self.forget_table()
        self.reset()

    def feed(self, data: bytes, at: int, end: int, out: CallBytes) -> bool:
        """Reads data[at:end]; False when it cannot be HPACK (the framing is then lost)."""
        while at < end:
            state = self._state
            if state == _VALUE:
                take = min(end - at, self._left)
                self._value(data, at, take, out)
                at += take
                self._left -= take
                if not self._left:
                    self._value_end()
                continue
            if state == _NAME:
                take = min(end - at, self._left)
                if self._name is not None:
                    self._name += data[at : at + take]
                at += take
                self._left -= take
                if not self._left:
                    self._name_end()
                continue
            byte = data[at]
            at += 1
            if self._shift >= 0:  # an integer's continuation (RFC 7541 5.1)
                self._int += (byte & 0x7F) << self._shift
                self._shift += 7
                if byte & 0x80:
                    if self._shift > 28:
                        return False  # past 2^28: no real length or index is
                    continue
                self._shift = -1
                if not self._int_done(self._int):
                    return False
                continue
            if state == _FIELD:
                if byte & 0x80:
                    kind, bits = _K_INDEXED, 7
                elif byte & 0x40:
                    kind, bits, self._index_new = _K_LITERAL, 6, True
                elif byte & 0x20:
                    kind, bits = _K_SIZE, 5
                else:
                    kind, bits, self._index_new = _K_LITERAL, 4, False
            else:  # a string's length, after its Huffman bit
                kind = _K_NAME_LEN if state == _NAME_LEN else _K_VALUE_LEN
                bits, self._huff = 7, bool(byte & 0x80)
            self._ikind = kind
            top = (1 << bits) - 1
            if byte & top == top:
                self._int, self._shift = top, 0
            elif not self._int_done(byte & top):
                return False
        return True

    def _int_done(self, value: int) -> bool:
        kind = self._ikind
        if kind == _K_INDEXED:  # an indexed field: no bytes of its value are on the wire
            if value > _STATIC_COUNT:  # a dynamic entry: a compressed content-encoding?
                back = value - _STATIC_COUNT
                if back <= len(self._entries) and self._entries[-back] & _ZIPPED:
                    self._zipped = True
            return value > 0
        if kind == _K_SIZE:
            self._max = min(value, MAX_TABLE_SIZE)
            self._evict()
        elif kind == _K_LITERAL:
            if value:
                self._cred, self._coding, self._name_len = self._lookup(value)
                self._state = _VALUE_LEN
            else:
                self._state = _NAME_LEN
        elif kind == _K_NAME_LEN:
            self._left = value
            self._name = bytearray() if value <= MAX_NAME else None
            self._name_len = value if not self._huff else value * 8 // 30  # at least this
            self._state = _NAME
            if not value:
                self._name_end()
        else:
            self._value_start(value)
        return True

    def _lookup(self, index: int) -> tuple[bool, bool, int]:
        """(credential?, content-encoding?, name length) of a table entry's name; an unknown
        one is taken for a credential (its value is masked whole) of a name no longer than
        any."""
        if index <= _STATIC_COUNT:
            name = STATIC_NAMES[index - 1]
            return name in self._names, index == _CODING_INDEX, len(name)
        back = index - _STATIC_COUNT
        if back > len(self._entries):
            return True, False, 0
        entry = self._entries[-back]
        return bool(entry & _CRED), bool(entry & _CODING), entry >> _NAME_SHIFT & 0xFFFF

    def _name_end(self) -> None:
        name = self._name
        self._cred = False
        if name is not None:
            if self._huff:
                decoded, _, state = huffman_decode(bytes(name))
                name = bytearray(decoded) if state >= 0 else None
                self._cred = name is None  # not a name a peer would accept: the safe side
            if name is not None:
                self._name_len = len(name)
                low = bytes(name).lower()
                self._cred = low in self._names
                self._coding = low == _CODING_NAME
        self._name = None
        self._state = _VALUE_LEN

    def _value_start(self, size: int) -> None:
        self._state = _VALUE
        self._left = self._vlen = size
        self._vdone = self._vchars = 0
        self._vhuff = self._huff
        self._hstate = 0
        self._last_end = self._call_bits = 0
        self._fill_from = -1
        self._segs = []
        self._first_end = -1
        self._scanner = None
        if self._coding and size <= MAX_CODING:  # a longer one is left unread: compressed
            self._cvalue = bytearray()
        if self._cred:
            self._counts.credentials += size > 0
            if self._vhuff:
                self._fill_from = 0
        else:
            self._scanner = self._text()
        if not size:
            self._value_end()

    def _value(self, data: bytes, at: int, size: int, out: CallBytes) -> None:
        """*size* bytes of the value being read, at data[at]."""
        if self._cvalue is not None:  # a content-encoding's, kept to be read at its end
            self._cvalue += data[at : at + size]
        offset = self._vdone
        self._vdone += size
        if not self._vhuff:
            self._vchars += size
            if self._cred:
                out.write(at, bytes((FILL,)) * size)
            else:
                assert self._scanner is not None
                piece = data[at : at + size]
                masked = self._scanner.redact(piece)
                if masked is not piece:
                    out.write(at, masked)
            return
        self._segs.append((offset, at, size))
        if self._hstate >= 0 and (self._fill_from < 0 or self._index_new):
            base = offset * 8
            chars, ends, self._hstate = huffman_decode(data[at : at + size], self._hstate)
            self._vchars += len(chars)
            if ends and self._first_end < 0:
                self._first_end = base + ends[0]
            start = self._last_end
            if ends:
                self._last_end = base + ends[-1]
            if self._hstate < 0:  # EOS: the peer refuses this value; mask what is left
                self._start_fill(max(self._last_end, self._call_bits), out)
            elif self._fill_from < 0 and chars:
                assert self._scanner is not None
                masked = self._scanner.redact(chars)
                if masked is not chars:
                    first = next(
                        (i for i, (a, b) in enumerate(zip(chars, masked, strict=True)) if a != b),
                        -1,
                    )
                    if first >= 0:
                        self._start_fill(base + ends[first - 1] if first else start, out)
        if self._fill_from >= 0:
            self._fill(offset, at, size, out)

    def _start_fill(self, bit: int, out: CallBytes) -> None:
        """`*` codes from the value's *bit* (a code's end) to its end. Bits of an earlier call
        are gone: then from the first code end in this one (found so far)."""
        if bit < self._call_bits:
            bit = self._first_end if self._first_end >= 0 else self._vdone * 8
        self._fill_from = bit
        for offset, at, size in self._segs:
            self._fill(offset, at, size, out)

    def _fill(self, offset: int, at: int, size: int, out: CallBytes) -> None:
        start = self._fill_from
        stars = (self._vlen * 8 - start) // 8 * 8
        first = max(offset, start // 8)
        if first >= offset + size:
            return
        data = out.data
        at += first - offset
        if start == 0:  # a whole value: every byte is the code of `*`
            out.write(at, bytes((STAR_CODE,)) * (offset + size - first))
            return
        piece = bytes(
            _code_byte(data[at + k], (first + k) * 8, start, stars)
            for k in range(offset + size - first)
        )
        out.write(at, piece)

    def _value_end(self) -> None:
        zipped = self._coding and self._coding_compressed()
        self._zipped |= zipped
        if self._index_new:
            flags = _CRED if self._cred else 0
            if self._coding:
                flags |= _CODING | (_ZIPPED if zipped else 0)
            self._insert(flags, self._name_len, self._vchars)
        self._field_reset()

    def _coding_compressed(self) -> bool:
        """Does the content-encoding value just read name a coding (not identity)?"""
        value = self._cvalue
        if value is None:
            return True  # longer than MAX_CODING: unread
        if self._vhuff:
            decoded, _, state = huffman_decode(bytes(value))
            if state < 0:
                return True  # not a value a peer would accept: the safe side
            value = bytearray(decoded)
        return bytes(value).strip(b" \t").lower() not in _NOT_COMPRESSED

    def _insert(self, flags: int, name_len: int, value_len: int) -> None:
        size = 32 + name_len + value_len
        if size > self._max:  # RFC 7541 4.4: the table is emptied, the entry not added
            self.forget_table()
            return
        self._entries.append(size << _SIZE_SHIFT | min(name_len, 0xFFFF) << _NAME_SHIFT | flags)
        self._size += size
        self._evict()

    def _evict(self) -> None:
        entries = self._entries
        while self._size > self._max:
            self._size -= entries[0] >> _SIZE_SHIFT
            del entries[0]
