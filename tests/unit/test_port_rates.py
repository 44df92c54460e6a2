"""rdma/port_rates.py: exact rates between two readings; a counter that went down is a reset
(no rate, never a negative one) unless it is a 32-bit counter that wrapped; new counters and
non-positive intervals give none; the tracker keeps one previous reading per source."""

from __future__ import annotations

import pytest

from zerotrace_collector.rdma.port_rates import Rates, RateTracker, rates_between

pytestmark = pytest.mark.unit

S = 1_000_000_000


def test_rates_per_second() -> None:
    got = rates_between({"a": 10, "b": 5}, 0, {"a": 310, "b": 5}, 2 * S)
    assert got == Rates(2 * S, {"a": 150.0, "b": 0.0}, ())


def test_a_counter_that_went_down_is_a_reset() -> None:
    got = rates_between({"a": 10, "b": 7}, 0, {"a": 3, "b": 9}, S)
    assert got == Rates(S, {"b": 2.0}, ("a",))


def test_a_32_bit_counter_near_its_top_wraps() -> None:
    wraps = frozenset({"q", "low"})
    got = rates_between(
        {"q": 2**32 - 10, "low": 100, "big": 2**32 - 10},
        0,
        {"q": 5, "low": 3, "big": 5},
        S,
        wraps,
    )
    assert got is not None
    assert got.per_second == {"q": 15.0}  # low: far from the top, a reset; big: 64-bit
    assert got.reset == ("big", "low")


def test_new_counters_and_bad_intervals_have_no_rate() -> None:
    assert rates_between({}, 0, {"a": 1}, S) == Rates(S, {}, ())
    assert rates_between({"a": 1}, S, {"a": 2}, S) is None
    assert rates_between({"a": 1}, S, {"a": 2}, 0) is None
    assert rates_between({"a": 1, "b": 1}, 0, {"a": 3, "b": 3}, S, only=frozenset({"a"})) == (
        Rates(S, {"a": 2.0}, ())
    )


def test_the_tracker_keeps_the_previous_reading_per_source() -> None:
    tracker = RateTracker()
    assert tracker.update("p1", 0, {"a": 0}) is None
    assert tracker.update("p2", 0, {"a": 100}) is None
    assert tracker.update("p1", S, {"a": 50}) == Rates(S, {"a": 50.0}, ())
    assert tracker.update("p1", S, {"a": 70}) is None  # no time passed: the older one stays
    assert tracker.update("p1", 2 * S, {"a": 70}) == Rates(S, {"a": 20.0}, ())
    tracker.forget("p2")
    assert tracker.sources() == ["p1"]
    assert tracker.update("p2", S, {"a": 200}) is None
