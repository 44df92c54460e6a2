"""One direction of a TCP connection (zerotrace_collector/packets/tcp_stream.py): sequence
numbers to offsets across wraparound, segments in any order with duplicates and overlaps
(the first copy kept, differing bytes counted), contiguous delivery with readable times,
gaps given up, the FIN as the end, segments held until the stream is anchored. The whole
reassembler over both directions is tested in test_tcp_reassembly.py."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.packets.tcp_stream import HALF, SEQ_MOD, Insert, Stream, seq_diff

pytestmark = pytest.mark.unit


def anchored(base: int = 1000) -> Stream:
    stream = Stream()
    stream.anchor(base)
    return stream


def test_seq_diff_is_the_signed_distance_across_wraparound() -> None:
    assert seq_diff(10, 3) == 7 and seq_diff(3, 10) == -7
    assert seq_diff(5, SEQ_MOD - 5) == 10  # 5 comes 10 after the wrap
    assert seq_diff(SEQ_MOD - 5, 5) == -10
    assert seq_diff(HALF, 0) == -HALF  # exactly half way round counts as behind
    assert seq_diff(HALF - 1, 0) == HALF - 1


@given(st.integers(0, SEQ_MOD - 1), st.integers(0, SEQ_MOD - 1))
def test_seq_diff_steps_from_b_to_a(a: int, b: int) -> None:
    d = seq_diff(a, b)
    assert -HALF <= d < HALF and (b + d) % SEQ_MOD == a


def test_offsets_count_on_across_the_wrap() -> None:
    stream = anchored(SEQ_MOD - 3)
    assert stream.offset(SEQ_MOD - 3) == 0
    assert stream.offset(2) == 5  # sequence numbers wrapped, offsets did not
    assert stream.seq_at(5) == 2
    stream.insert(0, b"0123456789")
    stream.take()
    assert stream.offset(7) == 10


def test_in_order_bytes_come_out_as_one_piece() -> None:
    stream = anchored()
    assert stream.insert(0, b"GET / ", ts_ns=5) == Insert(new_bytes=6)
    # Past the delivery point: "ahead" until the bytes before it are taken.
    assert stream.insert(6, b"HTTP/1.1", ts_ns=5) == Insert(new_bytes=8, ahead=True)
    assert stream.take() == [(0, b"GET / HTTP/1.1", 5)]
    assert stream.insert(14, b"\r\n", ts_ns=6) == Insert(new_bytes=2)
    assert stream.take() == [(14, b"\r\n", 6)]
    assert (stream.next_off, stream.buffered, stream.held) == (16, 0, 0)
    assert stream.take() == []


def test_a_segment_past_a_hole_waits_and_says_it_came_ahead() -> None:
    stream = anchored()
    late = stream.insert(4, b"4567", ts_ns=10)
    assert late.ahead and late.new_bytes == 4
    assert stream.take() == [] and stream.first_buffered() == 4
    assert not stream.insert(0, b"0123", ts_ns=20).ahead
    # The hole's bytes came at 20, so what follows is readable only then.
    assert stream.take() == [(0, b"01234567", 20)]
    assert stream.readable_ns == 20


def test_bytes_readable_at_different_times_are_separate_pieces() -> None:
    stream = anchored()
    stream.insert(0, b"ab", ts_ns=1)
    stream.insert(2, b"cd", ts_ns=2)
    stream.insert(4, b"ef", ts_ns=1)  # captured late with its true, older time
    assert stream.take() == [(0, b"ab", 1), (2, b"cdef", 2)]


def test_duplicates_keep_the_first_copy_and_count_what_differs() -> None:
    stream = anchored()
    stream.insert(2, b"cdef")
    result = stream.insert(0, b"abXdeZgh")  # overlaps cdef, two bytes differ
    assert result == Insert(new_bytes=4, dup_bytes=4, conflict_bytes=2)
    assert stream.take() == [(0, b"abcdefgh", 0)]
    again = stream.insert(0, b"abc")  # already delivered: all duplicate
    assert again == Insert(dup_bytes=3)


def test_take_stops_where_it_is_told() -> None:
    stream = anchored()
    stream.insert(0, b"aa", ts_ns=1)
    stream.insert(2, b"bb", ts_ns=2)
    assert stream.take(until=2) == [(0, b"aa", 1)]
    assert stream.take(until=2) == []
    assert stream.take() == [(2, b"bb", 2)]


def test_a_gap_given_up_skips_to_the_next_bytes() -> None:
    stream = anchored()
    stream.insert(3, b"345678")
    assert stream.skip_to(5) == 5  # 0-4 given up, the buffered 3 and 4 with them
    assert stream.buffered == 4 and stream.take() == [(5, b"5678", 0)]


def test_nothing_after_the_fin_and_finished_once_delivered() -> None:
    stream = anchored()
    stream.set_fin(4)
    assert stream.insert(2, b"23456").new_bytes == 2
    assert not stream.finished
    stream.insert(0, b"01")
    assert stream.take() == [(0, b"0123", 0)]
    assert stream.finished


def test_segments_wait_for_the_anchor_then_file_in_order() -> None:
    stream = Stream()
    assert not stream.anchored
    stream.hold(SEQ_MOD - 2 + 4, b"efgh", since=(2, 200))  # after the wrap
    stream.hold(SEQ_MOD - 2, b"abcd", since=(3, 100))
    stream.hold(SEQ_MOD - 2, b"", since=(4, 50))  # no bytes: nothing to hold
    assert (stream.held, stream.held_segments, stream.pending_since) == (8, 2, (2, 200))
    assert stream.earliest_pending_seq() % SEQ_MOD == SEQ_MOD - 2
    total = stream.anchor(stream.earliest_pending_seq())
    assert total.new_bytes == 8 and stream.pending == [] and stream.pending_since is None
    assert stream.take() == [(0, b"abcd", 100), (4, b"efgh", 200)]


def test_a_held_fin_is_placed_when_anchored() -> None:
    stream = Stream()
    stream.hold(100, b"xy", since=(1, 1))
    stream.pending_fin_seq = 102
    stream.anchor(100)
    assert stream.fin_off == 2 and stream.pending_fin_seq is None


def test_a_confirmed_hole_knows_since_when() -> None:
    stream = anchored()
    assert stream.confirmed_since() is None
    stream.confirm(5, since=(7, 700))  # the peer acknowledged bytes not seen here
    stream.confirm(3, since=(8, 800))  # older news: ignored
    assert (stream.confirmed, stream.confirmed_since()) == (5, (7, 700))
    stream.insert(0, b"01234")
    stream.take()
    assert stream.confirmed_since() is None  # the hole is filled
    stream.set_fin(4)
    assert stream.confirmed == 4


segments = st.lists(st.tuples(st.integers(0, 63), st.integers(1, 16)), max_size=40)


@given(st.binary(min_size=1, max_size=64), segments, st.randoms(use_true_random=False))
def test_any_order_and_overlap_delivers_the_bytes_once(
    payload: bytes, cuts: list[tuple[int, int]], rng: random.Random
) -> None:
    spans = [(0, len(payload))] + [(s, n) for s, n in cuts if s < len(payload)]
    pieces = [(s, payload[s : s + n]) for s, n in spans]
    rng.shuffle(pieces)
    stream = anchored(SEQ_MOD - 10)
    delivered = b""
    new = dup = 0
    for off, data in pieces:
        result = stream.insert(off, data)
        assert result.conflict_bytes == 0  # every copy carries the same bytes
        new, dup = new + result.new_bytes, dup + result.dup_bytes
        assert result.new_bytes + result.dup_bytes == len(data)
        if rng.random() < 0.5:
            delivered += b"".join(d for _, d, _ in stream.take())
    delivered += b"".join(d for _, d, _ in stream.take())
    assert delivered == payload and new == len(payload)
    assert stream.held == 0 and stream.next_off == len(payload)
