"""HPACK header blocks masked in place (redaction_hpack.py): credential values starred under
every kind of name (static, literal, dynamic, unknown), keys in other values masked from
where they start, the table followed as the sender's; every block read back with
python-hyper's `hpack` decoder."""

from __future__ import annotations

import itertools

import pytest
from hpack import Encoder
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
        *("accept", "content-type", "x-trace", "x-a-rather-long-header-name-" + "z" * 60),
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
