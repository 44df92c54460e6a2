"""Holds (lib/zerotrace/holds.py): a claim made while a message is processed holds its
partition back to that message's offset until released; `held()` is the oldest open claim per
partition; claims outside a message (a tick, a flush) are no-ops; `held(since_ns)` gives up
claims that began before; `clear()` drops every claim."""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace.holds import Holds, Where

pytestmark = pytest.mark.unit

A: Where = ("raw.socket", 0)
B: Where = ("raw.socket", 1)
C: Where = ("raw.stack", 0)


def test_nothing_claimed_holds_nothing() -> None:
    holds = Holds()
    assert holds.held() == {}
    holds.took((A, 5))  # taking a message alone claims nothing
    assert holds.held() == {}
    assert holds.current == (A, 5)


def test_a_claim_holds_its_partition_at_the_first_offset_until_released() -> None:
    holds = Holds()
    holds.took((A, 10))
    holds.claim("conn-1")
    holds.took((A, 11))
    holds.claim("conn-1")  # the same state built further: still held at its first offset
    assert holds.held() == {A: 10}
    holds.release("conn-1")
    assert holds.held() == {}
    holds.release("conn-1")  # releasing what is not open is harmless


def test_held_is_the_oldest_open_claim_per_partition() -> None:
    holds = Holds()
    for offset, key in ((3, "x"), (4, "y"), (7, "z")):
        holds.took((A, offset))
        holds.claim(key)
    holds.took((B, 20))
    holds.claim("w")
    assert holds.held() == {A: 3, B: 20}
    holds.release("x")
    assert holds.held() == {A: 4, B: 20}
    holds.release("w")
    assert holds.held() == {A: 4}


def test_one_state_built_from_two_partitions_holds_both() -> None:
    holds = Holds()
    holds.took((A, 8))
    holds.claim(("conn", 1))
    holds.took((C, 2))
    holds.claim(("conn", 1))
    assert holds.held() == {A: 8, C: 2}
    holds.release(("conn", 1))
    assert holds.held() == {}


def test_a_claim_in_a_tick_or_a_flush_is_a_no_op() -> None:
    holds = Holds()
    holds.took(None)
    holds.claim("timer-state")
    assert holds.held() == {}
    holds.took((A, 1))
    holds.claim("k")
    holds.took(None)  # a tick after a message: claims stop there
    holds.claim("other")
    assert holds.held() == {A: 1}
    assert holds.current is None


def test_held_since_gives_up_claims_that_began_before_for_good() -> None:
    holds = Holds()
    holds.took((A, 1))
    holds.claim("endless", event_ns=100)
    holds.took((A, 2))
    holds.claim("recent", event_ns=500)
    assert holds.held(since_ns=100) == {A: 1}  # began at since_ns: kept
    assert holds.held(since_ns=300) == {A: 2}
    assert holds.held() == {A: 2}  # given up, not only hidden
    holds.took((A, 3))
    holds.claim("endless", event_ns=600)  # the same key again is a new claim
    assert holds.held() == {A: 2}
    holds.release("recent")
    assert holds.held() == {A: 3}


def test_a_claim_keeps_the_time_it_began() -> None:
    holds = Holds()
    holds.took((A, 1))
    holds.claim("k", event_ns=100)
    holds.took((A, 2))
    holds.claim("k", event_ns=900)  # built further later: it still began at 100
    assert holds.held(since_ns=500) == {}


def test_clear_releases_everything() -> None:
    holds = Holds()
    for offset, where in enumerate((A, B, C)):
        holds.took((where, offset))
        holds.claim(offset)
    holds.clear()
    assert holds.held() == {}


# Against a naive model: every open claim with the first position it used per partition.

KEYS = st.sampled_from(["k1", "k2", "k3", ("conn", 4)])
PARTITIONS = st.sampled_from([A, B, C])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("took"), PARTITIONS, st.integers(1, 3)),  # partition, offset gap
        st.tuples(st.just("tick")),
        st.tuples(st.just("claim"), KEYS, st.integers(0, 1_000)),
        st.tuples(st.just("release"), KEYS),
        st.tuples(st.just("held_since"), st.integers(0, 1_000)),
        st.tuples(st.just("clear")),
    ),
    max_size=60,
)


def model_held(claims: dict[Hashable, tuple[dict[Where, int], int]]) -> dict[Where, int]:
    out: dict[Where, int] = {}
    for starts, _began in claims.values():
        for where, offset in starts.items():
            out[where] = min(offset, out.get(where, offset))
    return out


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_held_matches_a_naive_model(ops: list[tuple[object, ...]]) -> None:
    holds = Holds()
    claims: dict[Hashable, tuple[dict[Where, int], int]] = {}
    next_offset: dict[Where, int] = {}
    current: tuple[Where, int] | None = None
    taken: set[Where] = set()
    for op in ops:
        match op:
            case ("took", where, gap):
                assert isinstance(where, tuple) and isinstance(gap, int)
                offset = next_offset.get(where, 0) + gap - 1  # offsets grow on a partition
                next_offset[where] = offset + 1
                current = (where, offset)
                taken.add(where)
                holds.took(current)
            case ("tick",):
                current = None
                holds.took(None)
            case ("claim", key, event_ns):
                assert isinstance(event_ns, int)
                if current is not None:
                    starts, _ = claims.setdefault(key, ({}, event_ns))
                    starts.setdefault(current[0], current[1])
                holds.claim(key, event_ns)
            case ("release", key):
                claims.pop(key, None)
                holds.release(key)
            case ("held_since", since_ns):
                assert isinstance(since_ns, int)
                claims = {k: v for k, v in claims.items() if v[1] >= since_ns}
                assert holds.held(since_ns) == model_held(claims)
            case ("clear",):
                claims.clear()
                holds.clear()
        held = holds.held()
        assert held == model_held(claims)
        assert set(held) <= taken  # only partitions a message was taken from
        assert all(offset < next_offset[where] for where, offset in held.items())
