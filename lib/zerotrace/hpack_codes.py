"""HPACK's fixed tables (RFC 7541 appendices A and B) and a Huffman decoder that can stop and
go on anywhere, for the collector's HTTP/2 redactor (`redaction_h2`) and the correlator's
HTTP/2 parser (`http2_hpack`); here because services do not import each other. Pure.

Why a decoder of its own and not the `hpack` package: the redactor decodes a value in the
pieces the calls cut it into and needs the bit where each character's code ends (to rewrite
a value's code from a character on, in place); `hpack` decodes whole strings only. `hpack`
is a test dependency: the tests check these tables and this decoder against it.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "EOS",
    "HUFFMAN_CODES",
    "STAR_CODE",
    "STATIC_NAMES",
    "STATIC_VALUES",
    "huffman_decode",
]

# RFC 7541 Appendix A: the names of static table entries 1-61 (the redactor needs no values:
# nothing in the static table is a secret; the parser does, from STATIC_VALUES).
STATIC_NAMES: Final = (
    b":authority", b":method", b":method", b":path", b":path", b":scheme", b":scheme",
    b":status", b":status", b":status", b":status", b":status", b":status", b":status",
    b"accept-charset", b"accept-encoding", b"accept-language", b"accept-ranges", b"accept",
    b"access-control-allow-origin", b"age", b"allow", b"authorization", b"cache-control",
    b"content-disposition", b"content-encoding", b"content-language", b"content-length",
    b"content-location", b"content-range", b"content-type", b"cookie", b"date", b"etag",
    b"expect", b"expires", b"from", b"host", b"if-match", b"if-modified-since",
    b"if-none-match", b"if-range", b"if-unmodified-since", b"last-modified", b"link",
    b"location", b"max-forwards", b"proxy-authenticate", b"proxy-authorization", b"range",
    b"referer", b"refresh", b"retry-after", b"server", b"set-cookie",
    b"strict-transport-security", b"transfer-encoding", b"user-agent", b"vary", b"via",
    b"www-authenticate",
)  # fmt: skip
# RFC 7541 Appendix A: the values of static table entries 1-61 ("" where the RFC has none).
STATIC_VALUES: Final = (
    b"", b"GET", b"POST", b"/", b"/index.html", b"http", b"https", b"200", b"204", b"206",
    b"304", b"400", b"404", b"500", b"", b"gzip, deflate",
) + (b"",) * 45  # fmt: skip
assert len(STATIC_VALUES) == len(STATIC_NAMES) == 61

# RFC 7541 Appendix B, the code length of each symbol 0-256 (256 is EOS). The code is
# canonical (codes given in order of length, then symbol), so the lengths alone define it.
_LENGTHS: Final = (
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30,
    28, 28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5,
    7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22,
    22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23,
    22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22,
    21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26,
    26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20,
    24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27,
    27, 28, 27, 27, 27, 27, 27, 26, 30,
)  # fmt: skip
EOS: Final = 256


def _canonical(lengths: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    codes = [(0, 0)] * len(lengths)
    code, previous = -1, 0
    for symbol in sorted(range(len(lengths)), key=lambda s: (lengths[s], s)):
        code = (code + 1) << (lengths[symbol] - previous)
        previous = lengths[symbol]
        codes[symbol] = (code, previous)
    return tuple(codes)


HUFFMAN_CODES: Final = _canonical(_LENGTHS)  # (code, bit length) per symbol
# `*` is 8 bits, 11111001: n bytes of 0xf9 decode to n `*` exactly, no padding, so a coded
# value is masked in place by overwriting its bytes, its length prefix left as it is.
STAR_CODE: Final = HUFFMAN_CODES[0x2A][0]
assert HUFFMAN_CODES[0x2A] == (0xF9, 8)


def _nibble_table(codes: tuple[tuple[int, int], ...]) -> list[tuple[int, int, int]]:
    """The decoder as a state machine over 4-bit steps: entry [state * 16 + nibble] is (next
    state, symbol completed or -1, bits of the nibble used up to that symbol's end). States
    are the code tree's inner nodes, 0 its root; no code is shorter than 5 bits, so a nibble
    completes at most one symbol."""
    children: list[list[int | None]] = [[None, None]]
    for symbol, (code, length) in enumerate(codes):
        node = 0
        for shift in range(length - 1, -1, -1):
            bit = (code >> shift) & 1
            if shift == 0:
                children[node][bit] = ~symbol  # a leaf: negative
                break
            child = children[node][bit]
            if child is None:
                children.append([None, None])
                child = children[node][bit] = len(children) - 1
            node = child
    table = []
    for state in range(len(children)):
        for nibble in range(16):
            node, symbol, used = state, -1, 0
            for k in range(4):
                child = children[node][(nibble >> (3 - k)) & 1]
                assert child is not None  # the code is complete: every bit string leads on
                if child < 0:
                    symbol, used, node = ~child, k + 1, 0
                else:
                    node = child
            table.append((node, symbol, used))
    return table


_TABLE: Final = _nibble_table(HUFFMAN_CODES)


def huffman_decode(data: bytes, state: int = 0) -> tuple[bytes, list[int], int]:
    """Decodes *data* going on from *state* (0: a string's start). Returns the symbols
    completed, the bit (counted from *data*'s first) where each one's code ends, and the state
    to go on from; state -1 when EOS was decoded (a decoding error, RFC 7541 5.2). Padding is
    not checked: a string's last bits are whatever state is left."""
    out = bytearray()
    ends: list[int] = []
    table = _TABLE
    bit = 0
    for byte in data:
        state, symbol, used = table[state << 4 | byte >> 4]
        if symbol >= 0:
            if symbol == EOS:
                return bytes(out), ends, -1
            out.append(symbol)
            ends.append(bit + used)
        state, symbol, used = table[state << 4 | byte & 15]
        if symbol >= 0:
            if symbol == EOS:
                return bytes(out), ends, -1
            out.append(symbol)
            ends.append(bit + 4 + used)
        bit += 8
    return bytes(out), ends, state
