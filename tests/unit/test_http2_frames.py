"""HTTP/2 frames read across calls (http2_frames.py): the frames hyperframe writes, whole or cut
anywhere, DATA streamed without its padding, payloads kept within their bounds, RFC 9113's
header rules, and a direction joined mid-frame skipping calls until a frame starts."""

from __future__ import annotations

import pytest
from hyperframe.frame import DataFrame, GoAwayFrame, HeadersFrame, PingFrame, SettingsFrame
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator import http2_frames as f

pytestmark = pytest.mark.unit


def wire() -> bytes:
    padded = DataFrame(1, b"hello world", flags={"PADDED"})
    padded.pad_length = 20
    return (
        SettingsFrame(0, settings={1: 4096, 5: 32768}).serialize()
        + HeadersFrame(1, b"\x82\x84", flags={"END_HEADERS"}).serialize()
        + padded.serialize()
        + DataFrame(1, b"!", flags={"END_STREAM"}).serialize()
        + GoAwayFrame(0, last_stream_id=1, additional_data=b"d" * 100).serialize()
        + PingFrame(0, opaque_data=b"12345678").serialize()
    )


def read(pieces: list[bytes]) -> tuple[list[tuple[int, int, int, bytes]], bytes]:
    reader = f.FrameReader({})
    frames, data = [], b""
    for piece in pieces:
        for item in reader.feed(piece, 0):
            if isinstance(item, f.DataPiece):
                data += item.data
            else:
                frames.append((item.type, item.flags, item.stream, item.payload))
    assert not reader.error
    return frames, data


def test_frames_and_data_without_padding() -> None:
    frames, data = read([wire()])
    assert data == b"hello world!"
    assert [(kind, stream) for kind, _, stream, _ in frames] == [
        (f.SETTINGS, 0), (f.HEADERS, 1), (f.DATA, 1), (f.DATA, 1), (f.GOAWAY, 0), (f.PING, 0),
    ]  # fmt: skip
    assert frames[1][3] == b"\x82\x84"
    assert frames[4][3] == b"\x00\x00\x00\x01\x00\x00\x00\x00"  # the debug data is not kept


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_cut_reads_the_same(data: st.DataObject) -> None:
    whole = wire()
    cuts = sorted(data.draw(st.sets(st.integers(1, len(whole) - 1), max_size=20)))
    pieces = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
    assert read(pieces) == read([whole])


def test_a_header_block_fragment_is_kept_to_its_bound_and_marked_cut() -> None:
    big = HeadersFrame(1, b"\x00" * (f.MAX_HEADER_BLOCK_BYTES + 100)).serialize()
    [frame] = f.FrameReader({}).feed(big, 7)
    assert isinstance(frame, f.Frame) and frame.cut and frame.start_ns == 7
    assert len(frame.payload) == f.MAX_HEADER_BLOCK_BYTES + 6


@pytest.mark.parametrize(
    ("head", "error"),
    [
        ((0, f.DATA, 0), "frame type 0 on stream 0"),
        ((0, f.PING, 3), "frame type 6 on stream 3"),
        ((7, f.PING, 0), "frame type 6 of 7 bytes"),
        ((4, f.GOAWAY, 0), "frame type 7 of 4 bytes"),
        ((7, f.SETTINGS, 0), "SETTINGS of 7 bytes"),
        ((3, 0x42, 9), ""),  # an unknown type is allowed (and skipped)
    ],
)
def test_header_rules(head: tuple[int, int, int], error: str) -> None:
    assert f.header_error(*head) == error


def test_joined_mid_frame_a_call_is_skipped_until_a_plausible_header() -> None:
    counters: dict[str, int] = {}
    reader = f.FrameReader(counters, synced=False)
    assert reader.feed(b"\x00\x10" + b"garbage-garbage!", 0) == []
    assert counters[f.SKIPPED_BYTES] == 18 and not reader.synced
    [frame] = reader.feed(PingFrame(0, opaque_data=b"12345678").serialize(), 1)
    assert isinstance(frame, f.Frame) and frame.type == f.PING and reader.synced


def test_plausible_refuses_undefined_flags_and_big_first_frames() -> None:
    assert f.plausible(HeadersFrame(1, b"", flags={"END_HEADERS"}).serialize()[:9])
    assert not f.plausible(bytes.fromhex("000000014000000001"))  # undefined flag
    assert not f.plausible(bytes.fromhex("00800000000000000001"))  # 32 KiB: over the default
    assert not f.plausible(bytes.fromhex("000000000080000001"))  # the reserved bit
