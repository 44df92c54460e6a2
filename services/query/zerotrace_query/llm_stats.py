"""LLM serving statistics over time buckets (pure): latency percentiles, request and error
counts, throughput and concurrency, from a list of zerotrace.derived.LlmRequest documents.

Conventions, shared by the HTTP and gRPC APIs and the terminal view:

- Percentiles are nearest-rank: the p-th percentile of n sorted values is the value at rank
  ceil(p/100 * n) (1-based). It is always one of the observed values, needs no interpolation,
  and p99 of fewer than 100 values is the largest one.
- A request belongs to the bucket that holds its `start_ns`. Buckets are aligned to multiples
  of the bucket width since the Unix epoch, so two calls with the same width agree.
- Latency percentiles (TTFT, TPOT, per-request tokens/s) are taken over successful requests
  only: a failed request's "first token" is often an error body. Failed requests are counted
  in `errors`.
- Throughput is aggregate output tokens per second: each request's output tokens are spread
  evenly over its decode phase [start + TTFT, end) (its whole [start, end) when TTFT is
  unknown) and summed per bucket, so a long stream counts in every bucket it spans.
- Concurrency is requests in flight over [start_ns, end_ns): per bucket the largest number
  at any instant and the time-weighted mean.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The percentiles every API reports.
QUANTILES = (50, 90, 99)
# A chart or a response past this many buckets per series is unreadable; ask for wider ones.
MAX_BUCKETS = 2000
# Widths `auto_bucket_ns` picks from, in seconds: steps a person reads at a glance.
_NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
NS_PER_S = 1_000_000_000

LlmDoc = Mapping[str, Any]
SeriesKey = tuple[str, str]  # (model, service)


def is_error(request: LlmDoc) -> bool:
    """A request failed when the correlator gave a reason, or the server answered >= 400."""
    status = request.get("status_code")
    return request.get("error") is not None or (status is not None and int(status) >= 400)


def _nearest_rank(ordered: Sequence[float], p: float) -> float:
    return ordered[max(math.ceil(p / 100 * len(ordered)), 1) - 1]


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of `values` (any order); None for no values."""
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} is outside (0, 100]")
    return _nearest_rank(sorted(values), p) if values else None


def percentiles(values: Sequence[float]) -> dict[str, float] | None:
    """{"p50": .., "p90": .., "p99": ..}, or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return {f"p{q}": _nearest_rank(ordered, q) for q in QUANTILES}


def auto_bucket_ns(span_ns: int, target: int = 60) -> int:
    """A round bucket width giving about `target` buckets over `span_ns`."""
    wanted_s = span_ns / target / NS_PER_S
    for step in _NICE_BUCKETS_S:
        if step >= wanted_s:
            return step * NS_PER_S
    return _NICE_BUCKETS_S[-1] * NS_PER_S


@dataclass(frozen=True)
class Window:
    """The buckets to report: [first_ns, end_ns) in steps of bucket_ns."""

    first_ns: int
    end_ns: int
    bucket_ns: int

    @property
    def starts(self) -> range:
        return range(self.first_ns, self.end_ns, self.bucket_ns)


def window_for(
    requests: Sequence[LlmDoc],
    bucket_ns: int,
    from_ns: int | None = None,
    to_ns: int | None = None,
) -> Window | None:
    """Aligned buckets covering [from_ns, to_ns) where given, else the requests' extent
    (their start times; their end times too when `to_ns` is open). None when there is
    nothing to cover. ValueError when that would be more than MAX_BUCKETS buckets."""
    if bucket_ns <= 0:
        raise ValueError("the bucket width must be positive")
    low = from_ns
    if low is None:
        if not requests:
            return None
        low = min(int(r["start_ns"]) for r in requests)
    high = to_ns
    if high is None:
        if not requests:
            return None
        high = max(max(int(r["start_ns"]) + 1, int(r["end_ns"])) for r in requests)
    if high <= low:
        return None
    first = low // bucket_ns * bucket_ns
    count = -(-(high - first) // bucket_ns)
    if count > MAX_BUCKETS:
        raise ValueError(
            f"{count} buckets of {bucket_ns / NS_PER_S:g} s: at most {MAX_BUCKETS};"
            " use a wider bucket or a shorter time range"
        )
    return Window(first, first + count * bucket_ns, bucket_ns)


def _by_series(requests: Iterable[LlmDoc]) -> dict[SeriesKey, list[LlmDoc]]:
    groups: dict[SeriesKey, list[LlmDoc]] = defaultdict(list)
    for request in requests:
        groups[(str(request.get("model", "")), str(request.get("service", "")))].append(request)
    return dict(sorted(groups.items()))


def _values(requests: Iterable[LlmDoc], name: str) -> list[float]:
    return [float(r[name]) for r in requests if r.get(name) is not None]


def latency_summary(requests: Sequence[LlmDoc]) -> dict[str, Any]:
    """Counts and percentiles of one group of requests (no buckets)."""
    ok = [r for r in requests if not is_error(r)]
    return {
        "count": len(requests),
        "errors": len(requests) - len(ok),
        "ttft_ns": percentiles(_values(ok, "ttft_ns")),
        "tpot_ns": percentiles(_values(ok, "tpot_ns")),
        "tokens_per_s": percentiles(_values(ok, "tokens_per_s")),
    }


def _decode_interval(request: LlmDoc) -> tuple[int, int]:
    start, end = int(request["start_ns"]), int(request["end_ns"])
    ttft = request.get("ttft_ns")
    if ttft is not None and start + int(ttft) < end:
        start += int(ttft)
    return start, end


def _spread(window: Window, start: int, end: int, amount: float, into: dict[int, float]) -> None:
    """Add `amount`, spread evenly over [start, end), to the buckets it overlaps."""
    if end <= start:  # an instant: all of it where it happened
        bucket = start // window.bucket_ns * window.bucket_ns
        if window.first_ns <= bucket < window.end_ns:
            into[bucket] += amount
        return
    rate = amount / (end - start)
    bucket = max(start, window.first_ns) // window.bucket_ns * window.bucket_ns
    while bucket < min(end, window.end_ns):
        overlap = min(end, bucket + window.bucket_ns) - max(start, bucket)
        if overlap > 0:
            into[bucket] += rate * overlap
        bucket += window.bucket_ns


def latency_series(requests: Sequence[LlmDoc], window: Window) -> list[dict[str, Any]]:
    """Per (model, service), one entry per bucket of the window: start_ns, count, errors,
    ttft_ns/tpot_ns/tokens_per_s percentiles (None for no successful request), output_tokens
    (of the requests started in the bucket) and throughput_tokens_per_s (see module doc)."""
    series = []
    bucket_s = window.bucket_ns / NS_PER_S
    for (model, service), group in _by_series(requests).items():
        started: dict[int, list[LlmDoc]] = defaultdict(list)
        tokens: dict[int, float] = defaultdict(float)
        for request in group:
            bucket = int(request["start_ns"]) // window.bucket_ns * window.bucket_ns
            if window.first_ns <= bucket < window.end_ns:
                started[bucket].append(request)
            if request.get("output_tokens") and not is_error(request):
                start, end = _decode_interval(request)
                _spread(window, start, end, float(request["output_tokens"]), tokens)
        buckets = []
        for bucket in window.starts:
            summary = latency_summary(started.get(bucket, []))
            output_tokens = sum(int(r.get("output_tokens") or 0) for r in started.get(bucket, []))
            buckets.append(
                {
                    "start_ns": bucket,
                    **summary,
                    "output_tokens": output_tokens,
                    "throughput_tokens_per_s": round(tokens.get(bucket, 0.0) / bucket_s, 3),
                }
            )
        series.append(
            {"model": model, "service": service, **latency_summary(group), "buckets": buckets}
        )
    return series


def concurrency_series(requests: Sequence[LlmDoc], window: Window) -> list[dict[str, Any]]:
    """Per (model, service), one entry per bucket: start_ns, max (most requests in flight at
    any instant of the bucket) and mean (in flight, weighted by time). Intervals are half-open
    [start_ns, end_ns): a request ending when another starts does not overlap it; a request
    with end <= start is never in flight."""
    series = []
    for (model, service), group in _by_series(requests).items():
        # (time, delta): at equal times ends (-1) sort before starts (+1), as half-open wants.
        events = sorted(
            (t, d)
            for r in group
            if int(r["end_ns"]) > int(r["start_ns"])
            for t, d in ((int(r["start_ns"]), 1), (int(r["end_ns"]), -1))
        )
        buckets = []
        level, i = 0, 0
        for bucket in window.starts:
            while i < len(events) and events[i][0] <= bucket:  # before, or at, its start
                level += events[i][1]
                i += 1
            end = bucket + window.bucket_ns
            peak, area, now = level, 0, bucket
            while i < len(events) and events[i][0] < end:
                at = events[i][0]
                area += level * (at - now)
                now = at
                while i < len(events) and events[i][0] == at:
                    level += events[i][1]
                    i += 1
                peak = max(peak, level)
            area += level * (end - now)
            buckets.append(
                {"start_ns": bucket, "max": peak, "mean": round(area / window.bucket_ns, 4)}
            )
        series.append({"model": model, "service": service, "buckets": buckets})
    return series
