"""HPACK's tables and the resumable Huffman decoder (hpack_codes.py), checked against
python-hyper's `hpack`, itself written from RFC 7541."""

from __future__ import annotations

import pytest
from hpack import huffman_constants
from hpack.huffman import HuffmanEncoder
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable
from hypothesis import given
from hypothesis import strategies as st

from zerotrace.hpack_codes import (
    HUFFMAN_CODES,
    STAR_CODE,
    STATIC_NAMES,
    STATIC_VALUES,
    huffman_decode,
)

pytestmark = pytest.mark.unit

ENCODER = HuffmanEncoder(huffman_constants.REQUEST_CODES, huffman_constants.REQUEST_CODES_LENGTH)


def test_the_tables_are_rfc_7541s() -> None:
    assert tuple(name for name, _ in HeaderTable.STATIC_TABLE) == STATIC_NAMES
    assert tuple(value for _, value in HeaderTable.STATIC_TABLE) == STATIC_VALUES
    assert (
        tuple(
            zip(
                huffman_constants.REQUEST_CODES, huffman_constants.REQUEST_CODES_LENGTH, strict=True
            )
        )
        == HUFFMAN_CODES
    )
    # Appendix B: '*' (42) |11111001 f9 [8]: bytes of it decode to as many stars, no padding.
    assert STAR_CODE == 0xF9 and HUFFMAN_CODES[ord("*")] == (0xF9, 8)
    assert decode_huffman(bytes([STAR_CODE]) * 7) == b"*" * 7


@given(st.binary(max_size=200), st.integers(min_value=0, max_value=200))
def test_decoding_in_two_pieces_gives_the_string_and_each_codes_end(text: bytes, cut: int) -> None:
    coded = ENCODER.encode(text)
    first, ends, state = huffman_decode(coded[:cut])
    rest, more, _ = huffman_decode(coded[cut:], state)
    assert first + rest == text
    ends += [min(cut, len(coded)) * 8 + e for e in more]
    lengths = [HUFFMAN_CODES[b][1] for b in text]
    assert ends == [sum(lengths[: k + 1]) for k in range(len(text))]


def test_eos_in_a_string_is_an_error() -> None:
    assert huffman_decode(b"\xff\xff\xff\xff")[2] == -1
