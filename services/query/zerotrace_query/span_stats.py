"""Span latency per protocol (pure): fixed logarithmic buckets, and percentiles read from them.

A span's protocol is its kind before the last dot ("redis" of "redis.client", "http" of
"http.server", "file" of "file.open"), so one kind prefix ("redis.") selects a protocol in the
store. The buckets are fixed (not fitted to the data) so that histograms of different
protocols, filters and stores line up and can be compared bar by bar; their counts come from
the store (span_search.span_histograms), never from a page of fetched spans.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

from zerotrace import names

# Bucket edges, ns: the 1-2-5 series from 1 µs to 100 s. Each bucket is at most 2.5 times as
# wide as its lower edge, which is what a percentile read from the buckets can be off by.
# Below 1 µs is the first bucket ([0, 1 µs)); 100 s and longer the last ([100 s, ∞)).
EDGES_NS: tuple[int, ...] = (
    *(m * 10**e for e in range(3, 11) for m in (1, 2, 5)),
    10**11,
)
BUCKETS = len(EDGES_NS) + 1
PERCENTILES = (50, 90, 99)


def protocol_of(kind: str) -> str:
    """The protocol of a span kind: the text before its last dot ("" for an empty kind)."""
    return kind.rsplit(".", 1)[0]


def kind_prefix(protocol: str) -> str:
    """The prefix every kind of this protocol's spans starts with."""
    return protocol + "."


def known_protocols() -> tuple[str, ...]:
    """The protocols zerotrace makes spans of, from the names registry, sorted."""
    found = {v for k, v in vars(names).items() if k.startswith("PROTOCOL_") and isinstance(v, str)}
    found.add(protocol_of(names.SPAN_KIND_HTTP_CLIENT))
    found.add(protocol_of(names.SPAN_KIND_FILE_OPEN))
    return tuple(sorted(found))


def bucket_bounds(index: int) -> tuple[int, int | None]:
    """[low, high) of bucket `index`, ns; high None for the last, open bucket."""
    if not 0 <= index < BUCKETS:
        raise IndexError(f"bucket {index} is outside 0..{BUCKETS - 1}")
    low = 0 if index == 0 else EDGES_NS[index - 1]
    high = EDGES_NS[index] if index < len(EDGES_NS) else None
    return low, high


def bucket_of(duration_ns: int) -> int:
    """The bucket a duration falls in (a negative one, clock skew, in the first)."""
    return bisect_right(EDGES_NS, duration_ns)


def histogram(durations_ns: Iterable[int]) -> list[int]:
    """Counts per bucket of these durations: what the store's counts must add up to."""
    counts = [0] * BUCKETS
    for duration in durations_ns:
        counts[bucket_of(duration)] += 1
    return counts


def clip(index: int, low: int | None, high: int | None) -> tuple[int | None, int | None] | None:
    """The part of bucket `index` inside [low, high) (None ends: open), as a store range;
    None when they do not overlap. The first bucket's range is open below, so that a
    negative duration (clock skew) is counted where bucket_of puts it."""
    b_low, b_high = bucket_bounds(index)
    lo = None if index == 0 else b_low
    if low is not None:
        lo = low if lo is None else max(lo, low)
    hi = b_high if high is None else (high if b_high is None else min(b_high, high))
    if lo is not None and hi is not None and lo >= hi:
        return None
    return lo, hi


def percentile_ns(counts: Sequence[int], q: float) -> int | None:
    """The q-th percentile (nearest rank) as the upper edge of the bucket that holds it: the
    true value is below it and at or above the bucket's lower edge. The last bucket has no
    upper edge: its lower one (100 s) stands for it. None when there are no counts."""
    total = sum(counts)
    if total == 0:
        return None
    rank = max(1, math.ceil(q / 100 * total))
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            low, high = bucket_bounds(index)
            return high if high is not None else low
    raise AssertionError("unreachable: the ranks add up to the total")


def protocol_latency(protocol: str, counts: Sequence[int], errors: int) -> dict[str, Any]:
    """One protocol's histogram as the APIs answer it."""
    if len(counts) != BUCKETS:
        raise ValueError(f"{len(counts)} bucket counts, expected {BUCKETS}")
    body: dict[str, Any] = {
        "protocol": protocol,
        "count": sum(counts),
        "errors": errors,
        "buckets": list(counts),
    }
    for q in PERCENTILES:
        body[f"p{q}_ns"] = percentile_ns(counts, q)
    return body
