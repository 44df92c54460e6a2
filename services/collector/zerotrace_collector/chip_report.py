"""The chip comparison report (pure): device samples of any vendor over a period, the same
metrics side by side per chip model.

Per chip model (the sample's ``device.model``, as the vendor names it): how many devices
(distinct ids) and samples fell in the period, and per metric of :data:`REPORT_METRICS` the
min, mean, p50, p95 and max of the samples that have it, in the unit named, and the share of
samples where it was a gap (unsupported or failed). Percentiles interpolate linearly between
the two nearest ranks (numpy's default), so p50 of 1, 2, 3, 4 is 2.5. Counters (energy, PCIe
bytes, ECC) are left out: their level says nothing comparable across devices; their rates are
the Prometheus export's job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from zerotrace_collector.gpu_devices import DeviceSample

__all__ = [
    "REPORT_METRICS",
    "ChipRow",
    "MetricStats",
    "ReportMetric",
    "chip_report",
    "percentile",
]

GIB = 1024**3


@dataclass(frozen=True)
class ReportMetric:
    field: str  # the GpuDeviceMetrics field
    label: str
    unit: str
    scale: float = 1.0  # field value * scale = the value in *unit*


REPORT_METRICS: tuple[ReportMetric, ...] = (
    ReportMetric("gpu_util_pct", "Utilisation (GPU / GFX / AI Core)", "%"),
    ReportMetric("mem_copy_util_pct", "Memory bandwidth use", "%"),
    ReportMetric("fb_used_bytes", "Memory used", "GiB", 1 / GIB),
    ReportMetric("fb_total_bytes", "Memory total", "GiB", 1 / GIB),
    ReportMetric("power_w", "Power", "W"),
    ReportMetric("temperature_c", "Temperature", "C"),
    ReportMetric("memory_temp_c", "Memory temperature", "C"),
    ReportMetric("sm_clock_mhz", "Compute clock", "MHz"),
    ReportMetric("mem_clock_mhz", "Memory clock", "MHz"),
    ReportMetric("dec_util_pct", "Decoder use", "%"),
)


@dataclass(frozen=True)
class MetricStats:
    metric: ReportMetric
    count: int  # samples with a value
    gap_share: float  # samples without one / all samples of the chip model
    min: float | None = None
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class ChipRow:
    model: str
    devices: int
    samples: int
    metrics: Mapping[str, MetricStats]  # by field, in REPORT_METRICS order


def percentile(ordered: list[float], q: float) -> float:
    """The *q* (0..1) percentile of sorted, non-empty *ordered*, linearly interpolated."""
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def chip_report(
    samples: Iterable[DeviceSample],
    *,
    since_ns: int | None = None,
    until_ns: int | None = None,
    metrics: tuple[ReportMetric, ...] = REPORT_METRICS,
) -> list[ChipRow]:
    """One row per chip model with samples in [*since_ns*, *until_ns*), by model name."""
    by_model: dict[str, list[DeviceSample]] = {}
    for s in samples:
        if since_ns is not None and s.ts_ns < since_ns:
            continue
        if until_ns is not None and s.ts_ns >= until_ns:
            continue
        by_model.setdefault(s.device.model, []).append(s)
    rows = []
    for model in sorted(by_model):
        group = by_model[model]
        stats = {m.field: _stats(m, group) for m in metrics}
        devices = len({s.device.uuid for s in group})
        rows.append(ChipRow(model, devices, len(group), stats))
    return rows


def _stats(metric: ReportMetric, group: list[DeviceSample]) -> MetricStats:
    values = sorted(
        float(v) * metric.scale
        for v in (s.metrics.get(metric.field) for s in group)
        if v is not None and not isinstance(v, bool)
    )
    gap_share = (len(group) - len(values)) / len(group)
    if not values:
        return MetricStats(metric, 0, gap_share)
    return MetricStats(
        metric,
        len(values),
        gap_share,
        values[0],
        sum(values) / len(values),
        percentile(values, 0.5),
        percentile(values, 0.95),
        values[-1],
    )
