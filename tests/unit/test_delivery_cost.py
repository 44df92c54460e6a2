"""The figures of bench/delivery_cost.py: percentiles, summaries and the printed ratio line.
No Kafka: the timings themselves are never asserted."""

from __future__ import annotations

import math

import pytest

from bench.delivery_cost import main, percentile, ratio, report, summarize

pytestmark = pytest.mark.unit


def test_percentile_is_nearest_rank_and_nan_when_empty() -> None:
    values = [float(v) for v in range(10, 0, -1)]
    assert percentile(values, 0.9) == 9.0
    assert percentile(values, 0.5) == 5.0
    assert percentile([3.0], 0.9) == 3.0
    assert math.isnan(percentile([], 0.9))
    assert math.isnan(ratio(1.0, 0.0))


def test_summary_and_report_give_the_ratio_of_medians_and_the_added_time() -> None:
    tx = summarize([0.030, 0.010, 0.020], [0.004, 0.002, 0.003], batch=100)
    plain = summarize([0.010, 0.012, 0.008], [0.001, 0.001, 0.001], batch=100)
    assert tx.median_ms == pytest.approx(20.0)
    assert tx.p90_ms == pytest.approx(30.0)
    assert tx.outputs_per_s == pytest.approx(5000.0)
    assert tx.cpu_ms == pytest.approx(3.0)
    lines = report(100, tx, plain, [1.5, 2.5])
    assert lines[0] == "100 outputs per commit (3 commits of each mode):"
    assert "5,000 outputs/s" in lines[1]
    assert lines[3] == (
        "  transactional/plain 2.00 (rounds 1.50-2.50); added per commit +10.00 ms, CPU +2.00 ms"
    )


def test_arguments_out_of_range_are_refused_before_any_connection(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--rounds", "0"])
    assert exit_.value.code == 2
    assert "--rounds and --commits must be at least 1" in capsys.readouterr().err
