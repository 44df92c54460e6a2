"""Span latency per protocol (zerotrace_query/span_stats.py): the protocol of a kind, the fixed
log buckets, clipping a bucket to a duration filter, and percentiles read from bucket counts."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace import names
from zerotrace_query.span_stats import (
    BUCKETS,
    EDGES_NS,
    bucket_bounds,
    bucket_of,
    clip,
    histogram,
    kind_prefix,
    known_protocols,
    percentile_ns,
    protocol_latency,
    protocol_of,
)

pytestmark = pytest.mark.unit
US, MS, S = 1_000, 1_000_000, 1_000_000_000


@pytest.mark.parametrize(
    ("kind", "protocol"),
    [
        (names.protocol_span_kind(names.PROTOCOL_REDIS, "client"), "redis"),
        (names.protocol_span_kind(names.PROTOCOL_HTTP2, "server"), "http2"),
        (names.SPAN_KIND_HTTP_SERVER, "http"),
        (names.SPAN_KIND_FILE_OPEN, "file"),
        ("plain", "plain"),
        ("", ""),
    ],
)
def test_the_protocol_is_the_kind_before_its_last_dot(kind: str, protocol: str) -> None:
    assert protocol_of(kind) == protocol
    if "." in kind:
        assert kind.startswith(kind_prefix(protocol))


def test_a_prefix_does_not_catch_a_longer_protocol_name() -> None:
    assert not names.protocol_span_kind(names.PROTOCOL_HTTP2, "client").startswith(
        kind_prefix("http")
    )


def test_known_protocols_are_every_registry_protocol_and_http_and_file() -> None:
    protocols = known_protocols()
    assert list(protocols) == sorted(protocols)
    for protocol in (names.PROTOCOL_REDIS, names.PROTOCOL_GRPC, names.PROTOCOL_DNS, "http"):
        assert protocol in protocols
    assert {"http", "file"} <= set(protocols)
    assert len(protocols) == 9


def test_the_edges_are_the_1_2_5_series_from_1us_to_100s() -> None:
    assert EDGES_NS[:4] == (1 * US, 2 * US, 5 * US, 10 * US)
    assert EDGES_NS[-3:] == (20 * S, 50 * S, 100 * S)
    assert EDGES_NS[-1] == 100 * S and len(EDGES_NS) == 25 and BUCKETS == 26
    assert all(b / a in (2, 2.5) for a, b in pairwise(EDGES_NS))


@pytest.mark.parametrize(
    ("duration", "index"),
    [
        *[(-5, 0), (0, 0), (999, 0), (US, 1), (2 * US - 1, 1), (2 * US, 2), (1 * MS, 10)],
        *[(999 * MS, 18), (S, 19), (100 * S - 1, 24), (100 * S, 25), (10**15, 25)],
    ],
)
def test_each_duration_falls_in_the_bucket_that_holds_it(duration: int, index: int) -> None:
    assert bucket_of(duration) == index
    low, high = bucket_bounds(index)
    assert (index == 0 or low <= duration) and (high is None or duration < high)


def test_bucket_bounds_cover_everything_without_gaps() -> None:
    assert bucket_bounds(0) == (0, US)
    assert bucket_bounds(BUCKETS - 1) == (100 * S, None)
    for index in range(1, BUCKETS):
        assert bucket_bounds(index)[0] == bucket_bounds(index - 1)[1]
    with pytest.raises(IndexError):
        bucket_bounds(BUCKETS)


@pytest.mark.parametrize(
    ("index", "low", "high", "part"),
    [
        (0, None, None, (None, US)),  # the first bucket is open below (negative durations)
        (0, 500, None, (500, US)),
        (10, None, None, (MS, 2 * MS)),
        (10, 1_500_000, None, (1_500_000, 2 * MS)),
        (10, None, 1_200_000, (MS, 1_200_000)),
        (10, 1_100_000, 1_200_000, (1_100_000, 1_200_000)),
        (10, 2 * MS, None, None),
        (10, None, MS, None),
        (25, None, None, (100 * S, None)),
        (25, None, 200 * S, (100 * S, 200 * S)),
        (25, None, 100 * S, None),
    ],
)
def test_a_bucket_clipped_to_a_duration_filter(
    index: int, low: int | None, high: int | None, part: tuple[int | None, int | None] | None
) -> None:
    assert clip(index, low, high) == part


def test_percentiles_are_the_upper_edge_of_the_nearest_rank_bucket() -> None:
    counts = histogram([5 * US] * 50 + [3 * MS] * 40 + [2 * S] * 9 + [200 * S])
    assert sum(counts) == 100
    assert percentile_ns(counts, 50) == 10 * US  # rank 50: the last of the 5 µs ones
    assert percentile_ns(counts, 51) == 5 * MS
    assert percentile_ns(counts, 90) == 5 * MS
    assert percentile_ns(counts, 99) == 5 * S
    assert percentile_ns(counts, 100) == 100 * S  # the open bucket: its lower edge
    assert percentile_ns([0] * BUCKETS, 50) is None


@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=200), st.sampled_from([50, 90, 99]))
def test_the_true_percentile_lies_in_the_bucket_reported(durations: list[int], q: int) -> None:
    exact = sorted(durations)[max(1, math.ceil(q / 100 * len(durations))) - 1]
    edge = percentile_ns(histogram(durations), q)
    assert edge is not None
    low, high = bucket_bounds(bucket_of(exact))
    assert edge == (high if high is not None else low)


def test_protocol_latency_is_what_the_apis_answer() -> None:
    counts = histogram([3 * MS, 4 * MS, 30 * MS])
    assert protocol_latency("redis", counts, 1) == {
        "protocol": "redis",
        "count": 3,
        "errors": 1,
        "buckets": counts,
        "p50_ns": 5 * MS,
        "p90_ns": 50 * MS,
        "p99_ns": 50 * MS,
    }
    with pytest.raises(ValueError, match="26"):
        protocol_latency("redis", [1, 2], 0)
