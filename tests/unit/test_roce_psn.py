"""packets/roce_psn.py: the PSN stream definitions, one by one: in order, gaps, losses (never
filled, by the end, by age, by overflow), reorders, go-back recoveries, duplicates, 24-bit
wrap, restarts of a reused QP number, and the bounded span of a READ."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.packets.roce_psn import (
    LOSS_AFTER_NS,
    RESTART_GAP,
    PsnCounters,
    PsnStream,
    Verdict,
    psn_add,
    psn_diff,
)

pytestmark = pytest.mark.unit


def run(psns: list[int], stream: PsnStream | None = None) -> tuple[list[Verdict], PsnCounters]:
    stream = stream or PsnStream()
    verdicts = [stream.feed(i, psn) for i, psn in enumerate(psns)]
    stream.finish()
    return verdicts, stream.counters


def test_in_order_across_the_24_bit_wrap() -> None:
    top = (1 << 24) - 2
    verdicts, c = run([top, top + 1, 0, 1])
    assert verdicts == [Verdict.FIRST, Verdict.IN_ORDER, Verdict.IN_ORDER, Verdict.IN_ORDER]
    assert c == PsnCounters()


def test_a_gap_never_filled_is_lost_at_the_end() -> None:
    verdicts, c = run([1, 2, 5, 6])
    assert verdicts[2] is Verdict.GAP
    assert (c.gaps, c.gap_psns, c.lost, c.reordered) == (1, 2, 2, 0)


def test_a_late_original_is_a_reorder() -> None:
    verdicts, c = run([1, 3, 2, 4])
    assert verdicts == [Verdict.FIRST, Verdict.GAP, Verdict.FILL, Verdict.IN_ORDER]
    assert (c.gaps, c.lost, c.reordered, c.recovered, c.retransmitted) == (1, 0, 1, 0, 0)


def test_a_fill_that_starts_a_go_back_is_a_recovered_loss() -> None:
    # 3 and 4 lost before the capture point; after a NAK the sender resends 3, 4, 5, 6.
    _, c = run([1, 2, 5, 6, 3, 4, 5, 6, 7])
    assert (c.gaps, c.gap_psns, c.recovered, c.reordered, c.retransmitted, c.lost) == (
        1,
        2,
        2,
        0,
        2,
        0,
    )


def test_a_fill_left_last_counts_as_reordered() -> None:
    _, c = run([1, 3, 2])
    assert (c.reordered, c.recovered) == (1, 0)


def test_duplicates_are_retransmissions() -> None:
    verdicts, c = run([10, 11, 11, 12, 10])
    assert verdicts[2] is verdicts[4] is Verdict.DUPLICATE
    assert (c.retransmitted, c.gaps, c.lost) == (2, 0, 0)


def test_a_huge_jump_is_a_new_connection_not_a_loss() -> None:
    verdicts, c = run([100, 101, 102 + RESTART_GAP + 1, 103 + RESTART_GAP + 1])  # 1 past the limit
    assert verdicts[2] is Verdict.RESTART
    assert (c.restarts, c.gaps, c.lost) == (1, 0, 0)


def test_missing_psns_are_lost_when_old_or_too_many() -> None:
    stream = PsnStream(max_missing=3)
    stream.feed(0, 1)
    stream.feed(1, 7)  # 2..6 missing: 2 and 3 pushed out at once
    assert (stream.counters.lost, stream.missing) == (2, 3)
    stream.feed(2 + LOSS_AFTER_NS, 8)  # the rest waited too long
    assert (stream.counters.lost, stream.missing) == (5, 0)
    assert stream.feed(3 + LOSS_AFTER_NS, 4) is Verdict.DUPLICATE  # too late to be a fill


def test_a_read_of_unknown_span_leaves_no_gap_within_its_bounds() -> None:
    stream = PsnStream()
    stream.feed(0, 100, span=2, span_max=8)  # a READ of 2 to 8 response packets
    assert stream.feed(1, 105) is Verdict.IN_ORDER  # it took 5
    stream.feed(2, 106, span=1, span_max=4)  # a READ of 1 to 4
    assert stream.feed(3, 113) is Verdict.GAP  # at most 110: 110..112 are missing
    stream.finish()
    assert (stream.counters.gap_psns, stream.counters.lost) == (3, 3)


def test_covers_says_which_psns_were_sent() -> None:
    stream = PsnStream()
    assert not stream.covers(5)
    for psn in (5, 6, 7):
        stream.feed(0, psn)
    assert [stream.covers(p) for p in (4, 5, 7, 8)] == [False, True, True, False]


@given(st.integers(0, (1 << 24) - 1), st.integers(-(1 << 22), 1 << 22))
def test_serial_arithmetic(a: int, n: int) -> None:
    assert psn_diff(psn_add(a, n), a) == n


@given(
    st.integers(2, 60),
    st.sets(st.integers(1, 59)),
    st.lists(st.integers(1, 59)),
    st.randoms(use_true_random=False),
    st.integers(0, (1 << 24) - 1),
)
def test_every_skipped_psn_is_lost_or_filled(
    n: int, dropped: set[int], again: list[int], rng: random.Random, base: int
) -> None:
    # PSN 0 first, then 1..n-1 minus the dropped, locally shuffled, with some sent again
    # (anywhere: wrapping past 2^24 from a random base).
    rest = [i for i in range(1, n) if i not in dropped] + [i for i in again if i < n]
    for i in range(len(rest) - 1):
        if rng.random() < 0.3:
            rest[i], rest[i + 1] = rest[i + 1], rest[i]
    order = [0, *rest]
    _, c = run([psn_add(base, i) for i in order])
    seen = set(order)
    never = set(range(max(order) + 1)) - seen
    assert c.lost == len(never)
    assert c.gap_psns == c.lost + c.reordered + c.recovered
    assert c.retransmitted == len(order) - len(seen)
    assert c.restarts == 0
