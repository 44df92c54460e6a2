"""HPACK header blocks masked in place (redaction_hpack.py): credential values starred under
every kind of name (static, literal, dynamic, unknown), keys in other values masked from
where they start, the table followed as the sender's; every block read back with
python-hyper's `hpack` decoder. A block naming a content-encoding other than identity, in
every HPACK form, is told (`compressed`)."""

from __future__ import annotations

import itertools

import pytest
from hpack import Encoder
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hyperframe.frame import SettingsFrame
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.h2_wire import (
    KEY,
    PREFACE,
    Headers,
    block,
    headers_frames,
    headers_of,
    read_wire,
    starred,
)
from zerotrace_collector.redaction import CREDENTIAL_HEADERS, RedactionCounts, StreamRedactor
from zerotrace_collector.redaction_hpack import CallBytes, HeaderBlocks

pytestmark = pytest.mark.unit

CREDENTIALS = {n.decode() for n in CREDENTIAL_HEADERS}


def masked_block(data: bytes, blocks: HeaderBlocks | None = None) -> bytes:
    """*data* as one whole header block through a HeaderBlocks of its own (or *blocks*)."""
    counts = RedactionCounts()
    if blocks is None:
        blocks = HeaderBlocks(
            CREDENTIAL_HEADERS, lambda: StreamRedactor(True, counts, http2=False), counts
        )
    out = CallBytes(data)
    blocks.begin_call()
    assert blocks.feed(data, 0, len(data), out)
    blocks.end_call(out)
    blocks.block_end()
    return out.result()


# Header values that no token, scheme or query rule can touch (any change to one is a bug),
# and values with a key in them.
PLAIN = st.text(alphabet="abcdefg0123 ;/.", max_size=40)
VALUES = PLAIN | st.builds(lambda a, b: f"{a} {KEY}{b}", PLAIN, PLAIN)
NAMES = st.sampled_from(
    [
        *("authorization", "cookie", "set-cookie", "proxy-authorization", "x-api-key", "api-key"),
        *("accept", "content-type", "content-encoding", "x-trace"),
        "x-a-rather-long-header-name-" + "z" * 60,
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.tuples(NAMES, VALUES), min_size=1, max_size=8), min_size=1, max_size=4),
    st.booleans(),
    st.data(),
)
def test_decoded_headers_have_credentials_starred_and_the_rest_unchanged(
    blocks: list[Headers], huffman: bool, data: st.DataObject
) -> None:
    """Any fields, any table use (one encoder for every block), a block cut into a
    CONTINUATION anywhere, the stream cut into calls anywhere: what one call gives, and it
    decodes."""
    encoder = Encoder()
    wire = PREFACE + SettingsFrame(0).serialize()
    for k, headers in enumerate(blocks):
        encoded = block(encoder, headers, huffman)
        cut = data.draw(st.none() | st.integers(0, len(encoded)))
        wire += headers_frames(2 * k + 1, encoded, cut, pad=k % 2, end=True)
    cuts = data.draw(st.lists(st.integers(1, len(wire) - 1), max_size=6))
    redactor = StreamRedactor()
    edges = [0, *sorted(set(cuts)), len(wire)]
    out = b"".join(redactor.redact(wire[a:b]) for a, b in itertools.pairwise(edges))
    assert out == StreamRedactor().redact(wire)
    for sent, seen in zip(blocks, headers_of(read_wire(out)), strict=True):
        for (name, value), (name_seen, masked) in zip(sent, seen, strict=True):
            assert name_seen == name
            if name in CREDENTIALS and value:
                assert starred(masked) and len(masked) <= len(value)
            elif KEY in value:  # kept up to the key's kind, masked from there
                assert masked.startswith(value[: value.index(KEY) + 3])
                assert KEY[3:8] not in masked
            else:
                assert masked == value


def literal(index: int, value: bytes, indexed: bool) -> bytes:
    """A literal field with an indexed name (RFC 7541 6.2.1, 6.2.2), raw value."""
    bits, flag = (6, 0x40) if indexed else (4, 0x00)
    top = (1 << bits) - 1
    head = bytes((flag | index,)) if index < top else bytes((flag | top, index - top))
    return head + bytes((len(value),)) + value


def test_dynamic_table_names_are_followed_and_unknown_ones_masked_whole() -> None:
    block = (
        b"\x40\x09x-api-key\x02v1"  # a new name, added: index 62
        + literal(62, b"v2", indexed=False)  # x-api-key again: masked
        + b"\x40\x05x-abc\x02ok"  # added: now 62, x-api-key 63
        + literal(62, b"ok", indexed=False)
        + literal(63, b"v3", indexed=False)
        + literal(64, b"v4", indexed=False)  # no such entry: unknown, masked
    )
    frames = headers_frames(1, block, None, 0, end=True)
    out = StreamRedactor().redact(PREFACE + frames)
    assert out.endswith(
        b"x-api-key\x02**\x0f\x2f\x02**"
        + b"\x40\x05x-abc\x02ok"
        + b"\x0f\x2f\x02ok\x0f\x30\x02**\x0f\x31\x02**"
    )
    # A connection joined midway: the table before it is unknown, so are its names.
    joined = StreamRedactor().redact(headers_frames(3, literal(62, b"v5", False), None, 0, True))
    assert joined.endswith(b"\x02**")


def test_a_huffman_value_is_masked_from_the_token_on_and_still_decodes() -> None:
    headers = [(":method", "GET"), ("user-agent", f"client/1 {KEY} end")]
    frames = headers_frames(1, Encoder().encode(headers, huffman=True), None, 0, True)
    [seen] = headers_of(read_wire(StreamRedactor().redact(PREFACE + frames)))
    agent = dict(seen)["user-agent"]
    assert agent.startswith("client/1 sk-") and starred(agent[len("client/1 sk-") :])


def test_a_size_update_evicts_and_what_it_evicted_is_unknown() -> None:
    # x-abc added (62), then the table shrunk to nothing: 62 names no known entry any more.
    data = b"\x40\x05x-abc\x02ok" + literal(62, b"ok", False) + b"\x20" + literal(62, b"v", False)
    assert masked_block(data).endswith(b"\x0f\x2f\x02ok\x20\x0f\x2f\x01*")
    # A 40-byte table holds x-abc: ok (39 bytes); x-api-key: v1 (43) empties it (RFC 7541
    # 4.4), so 62 is unknown after it.
    small = b"\x3f\x09" + b"\x40\x05x-abc\x02ok" + literal(62, b"ok", False)
    assert masked_block(small).endswith(b"\x0f\x2f\x02ok")
    data = small + b"\x40\x09x-api-key\x02v1" + literal(62, b"ok", False)
    assert masked_block(data).endswith(b"\x0f\x2f\x02**")


def test_an_integer_past_2_to_the_28_is_refused() -> None:
    counts = RedactionCounts()
    blocks = HeaderBlocks(CREDENTIAL_HEADERS, lambda: StreamRedactor(True, counts), counts)
    data = b"\x7f" + b"\xff" * 5
    assert not blocks.feed(data, 0, len(data), CallBytes(data))


# -- content-encoding: does a block name a compressed body? ---------------------------------

HUFFMAN = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)


def string(value: bytes, huffman: bool) -> bytes:
    """An HPACK string literal (RFC 7541 5.2), shorter than 127 bytes."""
    data = HUFFMAN.encode(value) if huffman else value
    assert len(data) < 127
    return bytes((0x80 * huffman | len(data),)) + data


def coding_field(form: str, value: bytes, huffman: bool) -> bytes:
    """A content-encoding field as a literal: under the static name (26) without indexing or
    with it, never indexed, or under a literal name (plain or Huffman too)."""
    if form == "static":
        return b"\x0f\x0b" + string(value, huffman)  # 4-bit prefix: 15 + 11
    if form == "static-indexed":
        return b"\x5a" + string(value, huffman)
    if form == "never-indexed":
        return b"\x1f\x0b" + string(value, huffman)
    assert form in ("name", "name-indexed")
    flag = b"\x40" if form == "name-indexed" else b"\x00"
    return flag + string(b"content-encoding", huffman) + string(value, huffman)


def blocks_of(counts: RedactionCounts | None = None) -> HeaderBlocks:
    counts = counts or RedactionCounts()
    return HeaderBlocks(
        CREDENTIAL_HEADERS, lambda: StreamRedactor(True, counts, http2=False), counts
    )


def compressed(
    data: bytes, blocks: HeaderBlocks | None = None, step: int = 0, kept: bool = True
) -> bool:
    """Is *data*, one whole header block fed in calls of *step* bytes (0: one call), read as
    naming a compressed body? The block ends after (the flag is then cleared); *kept*: its
    bytes are left as they are (a content-encoding value is no secret)."""
    blocks = blocks or blocks_of()
    out = b""
    step = step or len(data) or 1
    for at in range(0, len(data), step):
        piece = CallBytes(data[at : at + step])
        blocks.begin_call()
        assert blocks.feed(piece.data, 0, len(piece.data), piece)
        blocks.end_call(piece)
        out += piece.result()
    seen = blocks.compressed
    blocks.block_end()
    assert not blocks.compressed
    assert (out == data) == kept
    return seen


FORMS = ["static", "static-indexed", "never-indexed", "name", "name-indexed"]
ZIPPED = [b"gzip", b"GZIP", b" br ", b"gzip, deflate", b"x-unknown", b"identity, gzip"]
PLAIN_CODINGS = [b"", b"identity", b"Identity", b" identity\t"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("huffman", [True, False], ids=["huffman", "raw"])
def test_a_content_encoding_other_than_identity_marks_the_block(form: str, huffman: bool) -> None:
    before = b"\x88" + b"\x0f\x10" + string(b"text/event-stream", huffman)  # :status 200
    for value in ZIPPED:
        block = before + coding_field(form, value, huffman)
        assert all(compressed(block, step=step) for step in (0, 1, 2, 3)), value
    for value in PLAIN_CODINGS:
        assert not compressed(before + coding_field(form, value, huffman)), value
    assert not compressed(before)


def test_a_value_too_long_to_read_or_not_decoding_counts_as_compressed() -> None:
    assert compressed(coding_field("static", b" " * 40 + b"identity", False))
    assert not compressed(coding_field("static", b" " * 20 + b"identity", False))
    # An EOS code inside a Huffman value (30 one bits): no peer accepts it, the safe side.
    assert compressed(b"\x0f\x0b\x84\xff\xff\xff\xff", kept=False)  # masked: the scanner's rule


def test_other_fields_named_like_it_do_not_mark_the_block() -> None:
    for name in (b"accept-encoding", b"content-encodings", b"x-content-encoding"):
        assert not compressed(b"\x00" + string(name, False) + string(b"gzip", False))
    assert not compressed(b"\x8f")  # accept-encoding: gzip, deflate (static entry 16)
    assert not compressed(b"\x10" + string(b"accept-encoding", True) + string(b"gzip", True))


def test_a_dynamic_entry_inserted_as_compressed_marks_the_blocks_that_refer_to_it() -> None:
    blocks = blocks_of()
    encoder = Encoder()
    first = encoder.encode([(":status", "200"), ("content-encoding", "gzip")], huffman=True)
    assert first.endswith(b"\x5a" + string(b"gzip", True))  # inserted: entry 62
    assert compressed(first, blocks)
    again = encoder.encode([(":status", "200"), ("content-encoding", "gzip")], huffman=True)
    assert again == b"\x88\xbe"  # indexed from the dynamic table
    assert compressed(again, blocks)
    assert not compressed(b"\x88", blocks)  # the flag is per block
    # A literal under that entry's name (62) with another value, and entries inserted with a
    # literal name, plain and Huffman, identity or not.
    assert not compressed(b"\x0f\x2f" + string(b"identity", False), blocks)
    assert compressed(b"\x0f\x2f" + string(b"br", True), blocks)
    for huffman in (False, True):
        fresh = blocks_of()
        assert not compressed(coding_field("name-indexed", b"identity", huffman), fresh)
        assert not compressed(b"\xbe", fresh)
        assert compressed(b"\x0f\x2f" + string(b"zstd", huffman), fresh)  # its name kept
        assert compressed(coding_field("name-indexed", b"deflate", huffman), fresh)
        assert compressed(b"\xbe", fresh) and not compressed(b"\xbf", fresh)
        assert compressed(b"\x0f\x30" + string(b"br", huffman), fresh)  # 63: identity's


def test_an_evicted_or_unknown_entry_does_not_mark_the_block() -> None:
    """A reference the redactor cannot resolve cannot be told (redaction_h2's limits)."""
    blocks = blocks_of()
    assert compressed(coding_field("static-indexed", b"gzip", False), blocks)
    assert not compressed(b"\x20" + b"\xbe", blocks)  # table emptied: 62 unknown
    assert not compressed(b"\xbe", blocks_of())


def test_table_sizes_still_evict_with_the_flags_packed_in() -> None:
    """content-encoding: gzip is 32 + 16 + 4 = 52 bytes: a 104-byte table holds two."""
    blocks = blocks_of()
    field = coding_field("static-indexed", b"gzip", False)
    assert compressed(b"\x3f\x49" + field + field, blocks)  # size update to 104
    assert compressed(b"\xbf", blocks)  # the older one, still there
    assert compressed(coding_field("static-indexed", b"br", False), blocks)  # 50: evicts
    assert not compressed(b"\xc0", blocks)  # 64 is gone
