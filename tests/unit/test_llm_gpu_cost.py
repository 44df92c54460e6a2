"""The GPU cost definition (llm_gpu_cost.py): exact shares on fractions."""

from __future__ import annotations

from fractions import Fraction

import pytest

from zerotrace_query.llm_gpu_cost import (
    Interval,
    RequestWork,
    Segment,
    apportion,
    byte_seconds,
    memory_interval,
    request_work,
    time_interval,
    utilisation_interval,
    work_in,
    work_of,
)

pytestmark = pytest.mark.unit

# Two overlapping requests (times in ns from 0, to keep the arithmetic readable):
#   A: [0, 10), first token at 2, 4 input and 9 output tokens:
#      prefill [0, 2) carries 4, decode [2, 10) carries 8 (one per output token after the first)
#   B: [4, 8), first token at 5, 2 input and 7 output tokens:
#      prefill [4, 5) carries 2, decode [5, 8) carries 6
A = request_work("a", 0, 10, 2, 4, 9)
B = request_work("b", 4, 8, 1, 2, 7)
# The process's GPU time: 10 ns in [0, 5), 20 ns in [5, 10).
WINDOWS = [time_interval(0, 5, 10), time_interval(5, 10, 20)]


def test_work_is_input_tokens_in_prefill_and_output_after_the_first_in_decode() -> None:
    assert A.segments == (Segment(0, 2, 4), Segment(2, 10, 8))
    assert B.segments == (Segment(4, 5, 2), Segment(5, 8, 6))


def test_two_overlapping_requests_share_each_window_by_their_work_in_it() -> None:
    # [0, 5): A did 4 + 3/8 of 8 = 7, B did 2 -> A 10 x 7/9, B 10 x 2/9
    # [5, 10): A did 5/8 of 8 = 5, B did 6 -> A 20 x 5/11, B 20 x 6/11
    got = apportion(WINDOWS, [A, B])
    assert got.shares == {
        "a": Fraction(70, 9) + Fraction(100, 11),
        "b": Fraction(20, 9) + Fraction(120, 11),
    }
    assert got.shares["a"] == Fraction(1670, 99) and got.shares["b"] == Fraction(1300, 99)
    assert got.attributed == 30 and got.unattributed == 0
    assert sum(s for s in got.shares.values() if s is not None) == 30


def test_one_request_alone_gets_all_of_every_window_it_worked_in() -> None:
    got = apportion(WINDOWS, [A])
    assert got.shares == {"a": Fraction(30)}


def test_a_request_inside_one_window_gets_nothing_of_the_others() -> None:
    inner = request_work("c", 6, 9, 1, 3, 4)  # only in [5, 10)
    got = apportion(WINDOWS, [A, inner])
    # [0, 5): A alone -> 10; [5, 10): A 5, c 3 + 3 = 6 -> A 20 x 5/11, c 20 x 6/11
    assert got.shares == {"a": 10 + Fraction(100, 11), "c": Fraction(120, 11)}


def test_without_windows_the_cost_is_unknown_not_zero() -> None:
    assert apportion([], [A, B]).shares == {"a": None, "b": None}


def test_a_window_that_misses_a_request_leaves_it_unknown() -> None:
    got = apportion([time_interval(0, 3, 9)], [A, B])
    assert got.shares == {"a": Fraction(9), "b": None}


def test_a_window_without_work_in_it_is_unattributed() -> None:
    late = time_interval(20, 30, 7)
    got = apportion([*WINDOWS, late], [A, B])
    assert got.attributed == 30 and got.unattributed == 7
    # Overlapping a window but doing no work there is a known zero, not unknown.
    idle = request_work("idle", 0, 10, None, 0, 0)
    assert apportion(WINDOWS, [A, idle]).shares == {"a": Fraction(30), "idle": Fraction(0)}


def test_without_a_first_token_time_the_work_is_spread_over_the_whole_request() -> None:
    whole = request_work("w", 0, 10, None, 4, 9)
    assert whole.segments == (Segment(0, 10, 12),)
    # A TTFT past the end (a broken record) is treated the same.
    assert request_work("w", 0, 10, 11, 4, 9).segments == whole.segments
    got = apportion(WINDOWS, [whole, B])
    # [0, 5): w 6, B 2 -> 10 x 6/8; [5, 10): w 6, B 6 -> 20 x 6/12
    assert got.shares == {"w": Fraction(15, 2) + 10, "b": Fraction(5, 2) + 10}


def test_a_non_streamed_answer_spreads_its_work_over_start_to_end() -> None:
    # The correlator stamps a non-streamed answer's one content event at the body's last
    # byte: TTFT == end - start. Taken at its word, all decode work would sit at t = 10,
    # in no window here; it is spread over [0, 10) instead, as without a TTFT.
    whole = Segment(0, 10, 12)
    assert request_work("n", 0, 10, 10, 4, 9).segments == (whole,)
    assert request_work("n", 0, 10, 2, 4, 9, streamed=False).segments == (whole,)
    doc = {"start_ns": 0, "end_ns": 10, "ttft_ns": 10, "input_tokens": 4, "output_tokens": 9}
    assert work_of({**doc, "stream": False}, "n").segments == (whole,)
    assert work_of({**doc, "ttft_ns": 2, "stream": False}, "n").segments == (whole,)
    assert work_of({**doc, "ttft_ns": 2, "stream": True}, "n").segments == A.segments
    got = apportion(WINDOWS, [work_of({**doc, "stream": False}, "n")])
    assert got.shares == {"n": Fraction(30)} and got.unattributed == 0
    # Exactly half of the 12 units in each window: [0, 5) 6, [5, 10) 6.
    assert [work_in(whole, w.start_ns, w.end_ns) for w in WINDOWS] == [6, 6]


def test_a_zero_length_segment_puts_its_work_at_its_instant() -> None:
    instant = Segment(5, 5, 3)
    assert work_in(instant, 0, 5) == 0 and work_in(instant, 5, 10) == 3
    at_once = request_work("z", 5, 5, 0, 3, 1)  # everything at t = 5
    assert apportion(WINDOWS, [at_once]).shares == {"z": Fraction(20)}


def test_a_zero_length_request_on_a_boundary_goes_to_the_window_starting_there() -> None:
    at_edge = request_work("z", 5, 5, None, 3, 1)
    got = apportion(WINDOWS, [A, at_edge])
    # [0, 5) ends before t = 5: A alone -> 10. [5, 10): A 5, z 3 -> A 20 x 5/8, z 20 x 3/8.
    assert got.shares == {"a": 10 + Fraction(25, 2), "z": Fraction(15, 2)}
    # Nothing of it before the boundary: alone with [0, 5) it is unknown, not 0.
    assert apportion([WINDOWS[0]], [at_edge]).shares == {"z": None}


def test_work_at_a_spans_end_counts_in_the_window_starting_there() -> None:
    # Built by hand (request_work no longer makes one): 3 units at the instant t = 5 = end.
    tail = RequestWork("t", 0, 5, (Segment(0, 5, 2), Segment(5, 5, 3)))
    got = apportion(WINDOWS, [tail])
    assert got.shares == {"t": Fraction(30)}
    assert got.attributed == 30 and got.unattributed == 0


def test_missing_counts_count_zero() -> None:
    assert request_work("m", 0, 10, 2, None, None).segments == ()


def test_work_of_reads_an_llm_request_document() -> None:
    doc = {"start_ns": 4, "end_ns": 8, "ttft_ns": 1, "input_tokens": 2, "output_tokens": 7}
    assert work_of(doc, "b") == B


def test_utilisation_and_memory_intervals_are_exact() -> None:
    assert utilisation_interval(0, 4_000, 12.5) == Interval(0, 4_000, Fraction(500))
    assert memory_interval(0, 2_000_000_000, 3 << 20).amount == (3 << 20) * 2_000_000_000
    assert byte_seconds(memory_interval(0, 2_000_000_000, 3 << 20).amount) == 2 * (3 << 20)
