from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_correlator.ndjson import NdjsonDecoder

pytestmark = pytest.mark.unit


def test_lines_are_timed_by_the_piece_holding_their_newline() -> None:
    decoder = NdjsonDecoder()
    assert decoder.feed(b'{"a": 1}\n{"b"', 10)[0].data == b'{"a": 1}'
    assert decoder.buffered_bytes() == 4
    [line] = decoder.feed(b": 2}\r\n\n  \n", 20)
    assert (line.data, line.time_ns, line.truncated) == (b'{"b": 2}', 20, False)
    assert decoder.feed(b"", 30) == [] and decoder.buffered_bytes() == 0


def test_a_long_line_is_cut_flagged_and_counted() -> None:
    decoder = NdjsonDecoder(max_line_bytes=8)
    out = decoder.feed(b"0123456789", 1) + decoder.feed(b"abc\nok\n", 2)
    assert [(o.data, o.truncated) for o in out] == [(b"01234567", True), (b"ok", False)]
    assert decoder.truncated_lines == 1 and decoder.buffered_bytes() == 0


def test_resync_drops_the_cut_line_unless_an_object_starts() -> None:
    decoder = NdjsonDecoder()
    decoder.feed(b'{"partial', 1)
    decoder.resync()
    assert decoder.buffered_bytes() == 0
    assert [o.data for o in decoder.feed(b'rest"}\n{"x": 1}\n', 2)] == [b'{"x": 1}']
    decoder.resync()
    assert [o.data for o in decoder.feed(b'{"y": 2}\n', 3)] == [b'{"y": 2}']


LINES = st.lists(st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")), max_size=8)


@given(LINES, st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_any_split_gives_the_same_lines(lines: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(line + b"\n" for line in lines)
    bounds = sorted({0, len(wire), *(min(c, len(wire)) for c in cuts)})
    decoder = NdjsonDecoder()
    out = []
    for a, b in pairwise(bounds):
        out += decoder.feed(wire[a:b], b)
    expected = [line.removesuffix(b"\r") for line in lines if line.removesuffix(b"\r").strip()]
    assert [o.data for o in out] == expected
    ends, pos = [], 0
    for line in lines:
        pos += len(line) + 1
        if line.removesuffix(b"\r").strip():
            ends.append(pos)
    assert [o.time_ns for o in out] == [min(b for b in bounds if b >= end) for end in ends]
