"""llm_stats: nearest-rank percentiles, buckets, throughput and concurrency (pure)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_llm_query_documents import MS, S, llm_request
from zerotrace_query.llm_stats import (
    MAX_BUCKETS,
    Window,
    auto_bucket_ns,
    concurrency_series,
    is_error,
    latency_series,
    percentile,
    percentiles,
    window_for,
)


def test_nearest_rank_percentiles() -> None:
    values = [15, 20, 35, 40, 50]
    assert [percentile(values, p) for p in (5, 30, 40, 50, 100)] == [15, 20, 20, 35, 50]
    assert percentile([], 50) is None
    assert percentiles([3.0]) == {"p50": 3.0, "p90": 3.0, "p99": 3.0}
    hundred = list(range(1, 101))
    assert percentiles(hundred) == {"p50": 50, "p90": 90, "p99": 99}
    with pytest.raises(ValueError):
        percentile(values, 0)


@given(st.lists(st.integers(-1000, 1000), min_size=1), st.integers(1, 100))
def test_nearest_rank_is_the_smallest_value_covering_p_percent(values: list[int], p: int) -> None:
    value = percentile(values, p)
    assert value in values
    needed = math.ceil(p / 100 * len(values))
    assert sum(v <= value for v in values) >= needed
    assert sum(v < value for v in values) < needed


def test_is_error() -> None:
    assert not is_error(llm_request())
    assert is_error(llm_request(status_code=429))
    assert is_error(llm_request(error="stream cut before [DONE]"))
    assert not is_error(llm_request(status_code=None))


def test_windows_are_aligned_and_bounded() -> None:
    window = window_for([], 10, from_ns=25, to_ns=61)
    assert window == Window(20, 70, 10)
    assert list(window.starts) == [20, 30, 40, 50, 60]
    extent = window_for([llm_request(start_ns=105, end_ns=131)], 10)
    assert extent == Window(100, 140, 10)
    assert window_for([], 10) is None
    with pytest.raises(ValueError, match="buckets"):
        window_for([], 1, from_ns=0, to_ns=MAX_BUCKETS + 1)
    assert auto_bucket_ns(3600 * S) == 60 * S
    assert auto_bucket_ns(5 * 60 * S) == 5 * S
    assert auto_bucket_ns(10**9 * S) == 86400 * S


def test_latency_series_per_model_and_bucket() -> None:
    requests = [
        llm_request(request_id="a", start_ns=0, end_ns=S, ttft_ns=100 * MS, tpot_ns=10 * MS),
        llm_request(request_id="b", start_ns=2 * S, end_ns=3 * S, ttft_ns=300 * MS),
        llm_request(request_id="c", start_ns=3 * S, end_ns=4 * S, ttft_ns=200 * MS),
        llm_request(request_id="d", start_ns=4 * S, end_ns=4 * S, status_code=500),
        llm_request(request_id="e", start_ns=S, end_ns=2 * S, model="other", ttft_ns=7),
    ]
    (llama, other) = latency_series(requests, Window(0, 10 * S, 5 * S))
    assert (llama["model"], llama["service"], llama["count"], llama["errors"]) == (
        "llama-3.1-8b-instruct",
        "vllm",
        4,
        1,
    )
    assert llama["ttft_ns"] == {"p50": 200 * MS, "p90": 300 * MS, "p99": 300 * MS}
    first, second = llama["buckets"]
    assert (first["start_ns"], first["count"], first["errors"]) == (0, 4, 1)
    assert first["ttft_ns"]["p50"] == 200 * MS  # the failed request is not in the percentiles
    assert (second["count"], second["ttft_ns"], second["throughput_tokens_per_s"]) == (0, None, 0)
    assert first["output_tokens"] == 95 * 4
    assert other["ttft_ns"] == {"p50": 7, "p90": 7, "p99": 7}


def test_throughput_spreads_tokens_over_the_decode_phase() -> None:
    # 90 tokens decoded over [1 s, 10 s): 10 tokens/s, in buckets of 5 s: 40 and 50 tokens.
    request = llm_request(start_ns=0, end_ns=10 * S, ttft_ns=S, output_tokens=90)
    (series,) = latency_series([request], Window(0, 15 * S, 5 * S))
    rates = [b["throughput_tokens_per_s"] for b in series["buckets"]]
    assert rates == [8.0, 10.0, 0.0]
    assert [b["output_tokens"] for b in series["buckets"]] == [90, 0, 0]


@given(
    st.lists(
        st.tuples(st.integers(0, 60), st.integers(0, 30), st.integers(1, 500)),
        min_size=1,
        max_size=20,
    )
)
def test_throughput_keeps_every_token(spans: list[tuple[int, int, int]]) -> None:
    requests = [
        llm_request(request_id=str(i), start_ns=s, end_ns=s + d, ttft_ns=None, output_tokens=n)
        for i, (s, d, n) in enumerate(spans)
    ]
    window = window_for(requests, 7)
    assert window is not None
    (series,) = latency_series(requests, window)
    total = sum(b["throughput_tokens_per_s"] * 7 / S for b in series["buckets"])
    assert total == pytest.approx(sum(n for _, _, n in spans), rel=1e-3)


def test_concurrency_max_and_time_weighted_mean() -> None:
    requests = [
        llm_request(request_id="a", start_ns=0, end_ns=10),
        llm_request(request_id="b", start_ns=5, end_ns=15),
        llm_request(request_id="c", start_ns=10, end_ns=12),  # starts when a ends: no overlap
        llm_request(request_id="d", start_ns=3, end_ns=3),  # never in flight
    ]
    (series,) = concurrency_series(requests, Window(0, 20, 10))
    assert series["buckets"] == [
        {"start_ns": 0, "max": 2, "mean": 1.5},
        {"start_ns": 10, "max": 2, "mean": 0.7},
    ]


def _in_flight(requests: list[dict[str, Any]], t: int) -> int:
    return sum(r["start_ns"] <= t < r["end_ns"] for r in requests)


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=25),
    st.integers(1, 9),
    st.integers(0, 30),
)
def test_concurrency_matches_counting_every_instant(
    spans: list[tuple[int, int]], width: int, first: int
) -> None:
    requests = [
        llm_request(request_id=str(i), start_ns=s, end_ns=s + d) for i, (s, d) in enumerate(spans)
    ]
    window = Window(first // width * width, first // width * width + 6 * width, width)
    buckets = concurrency_series(requests, window)[0]["buckets"] if requests else []
    for bucket in buckets:
        levels = [
            _in_flight(requests, t) for t in range(bucket["start_ns"], bucket["start_ns"] + width)
        ]
        assert bucket["max"] == max(levels)
        assert bucket["mean"] == pytest.approx(sum(levels) / width, abs=1e-4)
