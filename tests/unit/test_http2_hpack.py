"""HPACK header blocks with a dynamic table (http2_hpack.py), checked against python-hyper's
`hpack` encoder and decoder: the same fields for any headers, Huffman or not, any table size
and size updates; joined mid-way, unseen entries are unknown and the rest stays right."""

from __future__ import annotations

import contextlib

import pytest
from hpack import Decoder, Encoder, NeverIndexedHeaderTuple
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator.http2_hpack import (
    DEFAULT_TABLE_BYTES,
    MAX_TABLE_BYTES,
    MAX_VALUE_BYTES,
    SYNC_LOST,
    TABLE_SIZE_CLAMPED,
    TABLE_SIZE_OVER_SETTING,
    UNKNOWN_REFERENCES,
    HpackDecoder,
    HpackError,
)

pytestmark = pytest.mark.unit


class Everything:
    def __contains__(self, name: object) -> bool:
        return True


ALL = Everything()
NAMES = st.sampled_from(
    [":method", ":path", ":authority", ":status", "content-type", "grpc-status", "x-id", "te"]
)
VALUES = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
BLOCKS = st.lists(st.lists(st.tuples(NAMES, VALUES), max_size=8), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(BLOCKS, st.booleans(), st.sampled_from([0, 64, 256, 4096]))
def test_decodes_what_hpack_encodes_with_its_table_and_size_updates(
    blocks: list[list[tuple[str, str]]], huffman: bool, table_size: int
) -> None:
    encoder, reference = Encoder(), Decoder()
    ours = HpackDecoder({})
    for k, headers in enumerate(blocks):
        if k == 1:
            encoder.header_table_size = table_size  # a size update in the next block
        fields = [NeverIndexedHeaderTuple(n, v) if n == "x-id" else (n, v) for n, v in headers]
        block = encoder.encode(fields, huffman=huffman)
        want = [(bytes(n), bytes(v)) for n, v in reference.decode(block, raw=True)]
        assert ours.decode(block, ALL) == want


def test_only_wanted_fields_are_given_and_values_are_cut() -> None:
    encoder = Encoder()
    block = encoder.encode([(":path", "/" + "a" * 5000), ("cookie", "secret"), (":method", "GET")])
    fields = HpackDecoder({}).decode(block, {b":path", b":method"})
    assert fields == [(b":path", b"/" + b"a" * (MAX_VALUE_BYTES - 1)), (b":method", b"GET")]


def test_joined_mid_way_unseen_entries_are_unknown_and_later_ones_right() -> None:
    encoder, counters = Encoder(), dict[str, int]()
    encoder.encode([(":authority", "api"), ("x-old", "1")])  # before we looked
    ours = HpackDecoder(counters, joined_late=True)
    assert ours.max_size == MAX_TABLE_BYTES
    block = encoder.encode([(":authority", "api"), ("x-new", "2"), ("x-old", "3")])
    assert ours.decode(block, ALL) == [(None, None), (b"x-new", b"2"), (None, b"3")]
    assert counters[UNKNOWN_REFERENCES] == 2
    # x-new was inserted where we saw it: its index is right from here on.
    assert ours.decode(encoder.encode([("x-new", "2")]), ALL) == [(b"x-new", b"2")]


def test_a_lost_block_clears_the_table_and_size_updates_are_bounded() -> None:
    encoder, counters = Encoder(), dict[str, int]()
    ours = HpackDecoder(counters)
    assert ours.max_size == DEFAULT_TABLE_BYTES
    ours.decode(encoder.encode([("x-a", "1")]), ALL)
    ours.lose_sync()
    assert ours.decode(encoder.encode([("x-a", "1")]), ALL) == [(None, None)]
    assert counters[SYNC_LOST] == 1
    ours.setting = 1024
    ours.decode(b"\x3f\xe1\x1f", ALL)  # a size update to 4096 + ... over the setting
    assert counters[TABLE_SIZE_OVER_SETTING] == 1
    ours.decode(b"\x3f\xe1\xff\x07", ALL)  # 131,072: over MAX_TABLE_BYTES
    assert counters[TABLE_SIZE_CLAMPED] == 1 and ours.max_size == MAX_TABLE_BYTES


@pytest.mark.parametrize(
    "block",
    [
        b"\x80",  # index 0
        b"\xff",  # an integer cut
        b"\xff\xff\xff\xff\xff\xff\x7f",  # an integer over 2^32
        b"\x40\x05ab",  # a string past the block
        b"\x00",  # a name string missing
        b"\x40\x84\xff\xff\xff\xff\x00",  # EOS inside a Huffman string
    ],
)
def test_broken_blocks_raise_hpack_error(block: bytes) -> None:
    with pytest.raises(HpackError):
        HpackDecoder({}).decode(block, ALL)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_hpack_error(block: bytes) -> None:
    with contextlib.suppress(HpackError):
        HpackDecoder({}, joined_late=True).decode(block, ALL)
