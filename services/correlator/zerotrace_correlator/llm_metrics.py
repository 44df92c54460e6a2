"""Latency metrics of one LLM request from the times its output arrived. Pure; all times are
integer ns.

Definitions (FIELD-NOTES "TTFT and TPOT"; the client-benchmark ones: genai-perf, AIPerf):
- a content event is an SSE event (or a whole non-streamed body) that carried output text;
  role-only first chunks are not content;
- TTFT = first content event - request start (the first byte of the request);
- TPOT = (last content event - first) / (output tokens - 1), floor-divided to whole ns; it needs
  two content events, since with one (a non-streamed body) the decode phase is not observable;
- output tokens = usage's count when the response reported one, else the number of content
  events (`output_tokens_estimated`: servers send about one token per event);
- ITL = the gaps between consecutive content events; p50 and p99 by the nearest-rank method
  (the smallest gap with at least p% of gaps at or below it: no interpolation, so the value is
  always a gap that happened);
- tokens/s = (output tokens - 1) / (last - first) in seconds: the decode rate, after the first.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

# Gaps kept for the percentiles: 8 bytes each, so 512 KiB per request at most. Past it (a
# 65k-token answer) the percentiles describe the first 65,536 gaps; the max stays exact.
MAX_ITL_SAMPLES = 65_536


class ContentTimeline:
    """The arrival times of a request's content events, summarised in bounded memory."""

    def __init__(self, max_samples: int = MAX_ITL_SAMPLES) -> None:
        self._max_samples = max_samples
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.count = 0
        self.max_gap_ns: int | None = None
        self.gaps = array("q")
        self.samples_dropped = 0

    def add(self, time_ns: int) -> None:
        # Spelled out (no max() calls): this runs once per token of every stream.
        last = self.last_ns
        if last is None:
            self.first_ns = time_ns
        else:
            # Events are fed in arrival order; clamping guards against a clock step backwards.
            gap = time_ns - last if time_ns > last else 0
            if len(self.gaps) < self._max_samples:
                self.gaps.append(gap)
            else:
                self.samples_dropped += 1
            if self.max_gap_ns is None or gap > self.max_gap_ns:
                self.max_gap_ns = gap
        self.last_ns = time_ns
        self.count += 1


def nearest_rank(sorted_values: Sequence[int], percent: int) -> int:
    """The nearest-rank percentile: the value at rank ceil(percent/100 * n), 1-based."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, -(-percent * len(sorted_values) // 100))
    return sorted_values[rank - 1]


@dataclass(frozen=True)
class LlmTimings:
    ttft_ns: int | None
    tpot_ns: int | None
    itl_p50_ns: int | None
    itl_p99_ns: int | None
    itl_max_ns: int | None
    tokens_per_s: float | None
    output_tokens: int
    output_tokens_estimated: bool
    first_byte_ns: int | None  # request start to the first response byte
    e2e_ns: int  # request start to the response's last byte
    content_events: int


def compute_timings(
    start_ns: int,
    response_first_byte_at: int | None,
    end_ns: int,
    timeline: ContentTimeline,
    usage_output_tokens: int | None,
) -> LlmTimings:
    """start_ns: the request's first byte; response_first_byte_at: absolute time of the
    response's first byte (None without a response); end_ns: the last byte seen."""
    estimated = usage_output_tokens is None
    tokens = timeline.count if usage_output_tokens is None else usage_output_tokens
    first, last = timeline.first_ns, timeline.last_ns
    ttft = None if first is None else first - start_ns
    tpot = tps = p50 = p99 = None
    if first is not None and last is not None and timeline.count >= 2:
        decode_ns = last - first
        if tokens >= 2:
            tpot = decode_ns // (tokens - 1)
            if decode_ns > 0:
                tps = (tokens - 1) * 1e9 / decode_ns
        gaps = sorted(timeline.gaps)
        p50, p99 = nearest_rank(gaps, 50), nearest_rank(gaps, 99)
    return LlmTimings(
        ttft_ns=ttft,
        tpot_ns=tpot,
        itl_p50_ns=p50,
        itl_p99_ns=p99,
        itl_max_ns=timeline.max_gap_ns,
        tokens_per_s=tps,
        output_tokens=tokens,
        output_tokens_estimated=estimated,
        first_byte_ns=None if response_first_byte_at is None else response_first_byte_at - start_ns,
        e2e_ns=end_ns - start_ns,
        content_events=timeline.count,
    )
