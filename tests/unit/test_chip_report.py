"""The chip comparison report's figures: per chip model, devices, samples, and per metric min,
mean, p50, p95, max (scaled to the unit) and the share of gaps, over a period."""

from __future__ import annotations

import pytest

from zerotrace_collector.chip_report import REPORT_METRICS, chip_report, percentile
from zerotrace_collector.gpu_devices import DeviceInfo, DeviceSample, SampleBuilder

pytestmark = pytest.mark.unit

GIB = 1024**3
A = DeviceInfo(0, "GPU-a", "Chip A")
A2 = DeviceInfo(1, "GPU-a2", "Chip A")
B = DeviceInfo(0, "npu-b", "Chip B")


def _sample(device: DeviceInfo, ts_ns: int, **values: float) -> DeviceSample:
    b = SampleBuilder(device, ts_ns)
    for name, value in values.items():
        b.put(name, value)
    return b.build()


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.95) == pytest.approx(3.85)
    assert percentile([7.0], 0.95) == 7.0
    assert percentile([0.0, 10.0], 0.0) == 0.0
    assert percentile([0.0, 10.0], 1.0) == 10.0


def test_figures_per_chip_model() -> None:
    samples = [
        _sample(A, 10, gpu_util_pct=10.0, fb_used_bytes=2 * GIB, power_w=100.0),
        _sample(A, 20, gpu_util_pct=20.0, fb_used_bytes=4 * GIB),
        _sample(A2, 10, gpu_util_pct=30.0, power_w=300.0),
        _sample(A2, 20, gpu_util_pct=40.0, power_w=200.0),
        _sample(B, 10, gpu_util_pct=99.0),
    ]
    a, b = chip_report(samples)
    assert (a.model, a.devices, a.samples) == ("Chip A", 2, 4)
    assert (b.model, b.devices, b.samples) == ("Chip B", 1, 1)
    assert list(a.metrics) == [m.field for m in REPORT_METRICS]
    util = a.metrics["gpu_util_pct"]
    assert (util.count, util.gap_share) == (4, 0.0)
    assert (util.min, util.mean, util.p50, util.max) == (10.0, 25.0, 25.0, 40.0)
    assert util.p95 == pytest.approx(38.5)
    used = a.metrics["fb_used_bytes"]
    assert (used.metric.unit, used.count, used.gap_share) == ("GiB", 2, 0.5)
    assert (used.min, used.mean, used.p50, used.max) == (2.0, 3.0, 3.0, 4.0)
    power = a.metrics["power_w"]
    assert (power.count, power.gap_share, power.min, power.mean, power.max) == (
        3,
        0.25,
        100.0,
        200.0,
        300.0,
    )
    temp = a.metrics["temperature_c"]
    assert (temp.count, temp.gap_share, temp.min, temp.mean, temp.p95) == (0, 1.0, None, None, None)


def test_the_period_is_half_open() -> None:
    samples = [_sample(A, ts, gpu_util_pct=float(ts)) for ts in (5, 10, 15, 20)]
    (row,) = chip_report(samples, since_ns=10, until_ns=20)
    assert row.samples == 2
    assert (row.metrics["gpu_util_pct"].min, row.metrics["gpu_util_pct"].max) == (10.0, 15.0)
    assert chip_report(samples, since_ns=21) == []


def test_failed_reads_count_as_gaps() -> None:
    b = SampleBuilder(A, 1)
    b.fail(["gpu_util_pct"])
    (row,) = chip_report([b.build(), _sample(A, 2, gpu_util_pct=50.0)])
    assert row.metrics["gpu_util_pct"].gap_share == 0.5
    assert row.metrics["gpu_util_pct"].mean == 50.0
