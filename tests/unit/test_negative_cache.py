"""The bounded memory of keys not found (negative_cache.py): a TTL, and a bound on entries
with the oldest evicted first. tests/integration/test_schemas_kafka.py counts the schema
topic reads it saves."""

from __future__ import annotations

import pytest

from zerotrace.negative_cache import NegativeCache

pytestmark = pytest.mark.unit

S = 1_000_000_000


def test_a_key_noted_missing_is_missing_until_its_ttl_is_over() -> None:
    cache: NegativeCache[bytes] = NegativeCache(ttl_ns=30 * S, max_entries=10)
    assert not cache.missing(b"f1", 0)
    cache.note(b"f1", 0)
    assert cache.missing(b"f1", 1 * S) and cache.missing(b"f1", 30 * S - 1)
    assert not cache.missing(b"f2", 1 * S)
    assert not cache.missing(b"f1", 30 * S)  # look it up again: it may be registered now
    assert len(cache) == 0


def test_noting_again_restarts_the_ttl() -> None:
    cache: NegativeCache[bytes] = NegativeCache(ttl_ns=30 * S, max_entries=10)
    cache.note(b"f1", 0)
    cache.note(b"f1", 20 * S)
    assert cache.missing(b"f1", 45 * S) and not cache.missing(b"f1", 50 * S)


def test_past_the_bound_the_oldest_goes_first() -> None:
    cache: NegativeCache[int] = NegativeCache(ttl_ns=30 * S, max_entries=3)
    for key in range(5):
        cache.note(key, key * S)
    assert len(cache) == 3 and cache.evicted == 2
    assert [cache.missing(key, 5 * S) for key in range(5)] == [False, False, True, True, True]
    cache.note(2, 6 * S)  # noted again: now the newest, so 3 is the oldest
    cache.note(9, 7 * S)
    assert [cache.missing(key, 8 * S) for key in (2, 3, 4, 9)] == [True, False, True, True]


def test_expired_keys_leave_as_new_ones_come_never_counted_as_evicted() -> None:
    cache: NegativeCache[int] = NegativeCache(ttl_ns=10 * S, max_entries=100)
    for key in range(50):
        cache.note(key, key * S)  # a stream of distinct unknown keys, one a second
    assert len(cache) == 10 and cache.evicted == 0


def test_a_ttl_of_zero_keeps_nothing() -> None:
    cache: NegativeCache[int] = NegativeCache(ttl_ns=0, max_entries=3)
    cache.note(1, 5)
    assert not cache.missing(1, 5) and len(cache) == 0


@pytest.mark.parametrize(("ttl_ns", "max_entries"), [(-1, 3), (10, 0)])
def test_a_bound_that_makes_no_sense_is_refused(ttl_ns: int, max_entries: int) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        NegativeCache(ttl_ns, max_entries)
