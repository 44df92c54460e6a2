from __future__ import annotations

import pytest

from zerotrace_correlator.llm_metrics import ContentTimeline, compute_timings, nearest_rank


def timeline(*times: int, max_samples: int = 65_536) -> ContentTimeline:
    out = ContentTimeline(max_samples)
    for t in times:
        out.add(t)
    return out


def test_nearest_rank() -> None:
    values = list(range(1, 101))
    assert nearest_rank(values, 50) == 50
    assert nearest_rank(values, 99) == 99
    assert nearest_rank(values, 100) == 100
    assert nearest_rank([7], 50) == 7 and nearest_rank([7], 99) == 7
    assert nearest_rank([1, 2, 3], 50) == 2  # rank ceil(1.5) = 2
    assert nearest_rank([1, 2, 3, 4], 50) == 2  # rank 2: no interpolation
    assert nearest_rank([1, 2, 3, 4], 99) == 4
    with pytest.raises(ValueError):
        nearest_rank([], 50)


def test_streamed_request_exact_to_the_ns() -> None:
    # Request at 1_000; content at 251_000, 261_000, 281_000, 311_000; 7 tokens by usage.
    t = compute_timings(1_000, 200_000, 320_000, timeline(251_000, 261_000, 281_000, 311_000), 7)
    assert t.ttft_ns == 250_000
    assert t.tpot_ns == 60_000 // 6 == 10_000
    assert (t.itl_p50_ns, t.itl_p99_ns, t.itl_max_ns) == (20_000, 30_000, 30_000)
    assert t.tokens_per_s == pytest.approx(6 / 60e-6)
    assert t.output_tokens == 7 and not t.output_tokens_estimated
    assert (t.first_byte_ns, t.e2e_ns, t.content_events) == (199_000, 319_000, 4)


def test_tpot_floor_divides_and_tokens_are_estimated_without_usage() -> None:
    t = compute_timings(0, 5, 100, timeline(10, 20, 30, 41), None)
    assert t.output_tokens == 4 and t.output_tokens_estimated
    assert t.tpot_ns == 31 // 3 == 10
    assert t.tokens_per_s == pytest.approx(3 / 31e-9)


def test_one_content_event_has_no_decode_phase() -> None:
    t = compute_timings(100, 900, 1_000, timeline(1_000), 12)
    assert t.ttft_ns == 900 and t.output_tokens == 12
    assert t.tpot_ns is None and t.tokens_per_s is None
    assert t.itl_p50_ns is None and t.itl_max_ns is None


def test_no_content_and_no_response() -> None:
    t = compute_timings(100, None, 150, ContentTimeline(), None)
    assert t.ttft_ns is None and t.first_byte_ns is None
    assert t.output_tokens == 0 and t.output_tokens_estimated and t.e2e_ns == 50


def test_itl_samples_are_capped_but_the_max_stays_exact() -> None:
    times = [0, 10, 20, 30, 1_030]
    line = timeline(*times, max_samples=2)
    assert list(line.gaps) == [10, 10] and line.samples_dropped == 2
    assert line.max_gap_ns == 1_000
    t = compute_timings(0, 0, 1_030, line, None)
    assert (t.itl_p50_ns, t.itl_p99_ns, t.itl_max_ns) == (10, 10, 1_000)
