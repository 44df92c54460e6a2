from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator.sse import SseDecoder, SseEvent


def decode(pieces: list[tuple[bytes, int]]) -> list[SseEvent]:
    decoder = SseDecoder()
    out: list[SseEvent] = []
    for data, t in pieces:
        out += decoder.feed(data, t)
    return out


@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n", b"\n\r\n", b"\r\n\n", b"\r\r", b"\r\n\r"])
def test_every_blank_line_form_ends_an_event(end: bytes) -> None:
    line = end[: 2 if end.startswith(b"\r\n") else 1]
    wire = b"data: one" + line + b"data: two" + end + b"data: three" + end
    events = decode([(wire, 5)])
    assert [e.data for e in events] == ["one\ntwo", "three"]
    assert all(e.time_ns == 5 for e in events)


def test_fields_comments_and_event_names() -> None:
    wire = (
        b": keep-alive comment\n\n"  # a comment alone dispatches nothing
        b'event: response.output_text.delta\ndata:{"a":1}\nid: 7\nretry: 10\n\n'
        b"data\n\n"  # a bare field name: empty data
        b"data:  two spaces\n\n"
        b"\xef\xbb\xbfdata: not a BOM here\n\n"
    )
    events = decode([(wire, 1)])
    assert [(e.event, e.data) for e in events] == [
        ("response.output_text.delta", '{"a":1}'),
        ("", ""),
        ("", " two spaces"),
    ]


def test_bom_at_the_start_is_dropped() -> None:
    assert [e.data for e in decode([(b"\xef\xbb\xbfdata: x\n\n", 1)])] == ["x"]


def test_cr_and_lf_split_across_pieces_are_one_line_end() -> None:
    events = decode([(b"data: a\r", 1), (b"\ndata: b\r", 2), (b"\n\r", 3), (b"\n", 4)])
    assert events == [SseEvent("a\nb", "", 3)]


def test_data_and_json_in_separate_pieces_time_of_the_completing_piece() -> None:
    events = decode([(b"data: ", 10), (b'{"choices": []}', 20), (b"\n", 30), (b"\n", 40)])
    assert events == [SseEvent('{"choices": []}', "", 40)]


WIRE = (
    b'data: {"x": 1}\r\n\r\n'
    b": ping\n\n"
    b"event: e\ndata: line1\ndata: line2\n\n"
    b"data: cr\r\rdata: last\r\n\n"
)
EXPECTED = [("", '{"x": 1}'), ("e", "line1\nline2"), ("", "cr"), ("", "last")]


def test_split_at_every_offset_same_events() -> None:
    for cut in range(1, len(WIRE)):
        events = decode([(WIRE[:cut], 1), (WIRE[cut:], 2)])
        assert [(e.event, e.data) for e in events] == EXPECTED, cut


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, len(WIRE) - 1), max_size=12))
def test_any_split_same_events_timed_by_their_completing_piece(cuts: list[int]) -> None:
    bounds = sorted({0, len(WIRE), *cuts})
    events = decode([(WIRE[a:b], b - 1) for a, b in pairwise(bounds)])
    assert [(e.event, e.data) for e in events] == EXPECTED
    # The byte that completes each event ends its blank line; a CR does, even before an LF.
    completing = [16, 59, 69, 82]
    expected_times = [min(b for b in bounds if b > i) - 1 for i in completing]
    assert [e.time_ns for e in events] == expected_times


def test_oversized_event_is_cut_and_flagged_with_bounded_memory() -> None:
    decoder = SseDecoder(max_event_bytes=1000)
    for i in range(50):
        decoder.feed(b"data: " + b"x" * 100, i)
        assert decoder.buffered_bytes() <= 2000
    [event] = decoder.feed(b"\n\ndata: ok\n\n", 99)[:1]
    assert event.truncated and len(event.data) <= 1000
    assert decoder.truncated_events == 1
    assert decoder.feed(b"data: ok\n\n", 100) == [SseEvent("ok", "", 100)]


def test_resync_drops_the_damaged_event_and_resumes_at_the_next() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b'data: {"partial', 1) == []
    decoder.resync()
    assert decoder.feed(b'lost"}\n\ndata: next\n\n', 2) == [SseEvent("next", "", 2)]
    # A loss that ended on a line boundary: the next event is kept.
    decoder.feed(b"data: a\n", 3)
    decoder.resync()
    assert decoder.feed(b"data: fresh\n\n", 4) == [SseEvent("fresh", "", 4)]


SSE_PARTS = st.sampled_from(
    [
        b'data: {"t": 1}\n\n',  # a whole event in one piece: the decoder's fast path
        b"data: " + b"y" * 40 + b"\n\n",  # past the small limit below
        b"data: two\n",
        b"event: named\n",
        b"event: " + b"z" * 40 + b"\n",  # a line cut at the limit flags the next event
        b": comment\n",
        b"\n",
        b"data: cr\r\n\r\n",
        b"data:  spaced\n\n",
        b"\xef\xbb\xbfdata: bom\n\n",
        b"data: cut",
        b"RESYNC",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(SSE_PARTS, max_size=16))
def test_whole_event_pieces_decode_as_the_same_bytes_fed_one_at_a_time(
    parts: list[bytes],
) -> None:
    by_piece, by_byte = SseDecoder(max_event_bytes=30), SseDecoder(max_event_bytes=30)
    got: list[SseEvent] = []
    want: list[SseEvent] = []
    for t, part in enumerate(parts):
        if part == b"RESYNC":
            by_piece.resync()
            by_byte.resync()
            continue
        got += by_piece.feed(part, t)
        for i in range(len(part)):
            want += by_byte.feed(part[i : i + 1], t)
    assert got == want
    assert by_piece.truncated_events == by_byte.truncated_events
