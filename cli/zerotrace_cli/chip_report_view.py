"""The chip comparison report (collector's chip_report.ChipRow) as terminal text and as one
self-contained HTML page (pure): a table of chip models (devices, samples), then per metric
one line per chip model with min, mean, p50, p95, max in the metric's unit and the share of
samples where it was a gap. A metric no chip model gives at all is left out of the lines."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from zerotrace_collector.chip_report import REPORT_METRICS, ChipRow, MetricStats

__all__ = ["render_html", "render_text"]

STATS_HEADER = (
    f"{'METRIC':<34} {'UNIT':<4} {'CHIP MODEL':<28} {'MIN':>8} {'MEAN':>8} {'P50':>8} "
    f"{'P95':>8} {'MAX':>8} {'GAPS':>5}"
)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _share(v: float) -> str:
    return f"{v * 100:.0f}%"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _shown(rows: Sequence[ChipRow]) -> list[str]:
    return [m.field for m in REPORT_METRICS if any(r.metrics[m.field].count for r in rows)]


def render_text(rows: Sequence[ChipRow]) -> list[str]:
    """The report's lines (one line saying so when there are no samples)."""
    if not rows:
        return ["no GPU samples in the period"]
    lines = [f"{'CHIP MODEL':<34} {'DEVICES':>7} {'SAMPLES':>7}"]
    lines += [f"{_fit(r.model, 34):<34} {r.devices:>7} {r.samples:>7}" for r in rows]
    lines += ["", STATS_HEADER]
    for name in _shown(rows):
        for k, r in enumerate(rows):
            s = r.metrics[name]
            label = s.metric.label if k == 0 else ""
            unit = s.metric.unit if k == 0 else ""
            lines.append(
                f"{_fit(label, 34):<34} {unit:<4} {_fit(r.model, 28):<28} {_num(s.min):>8} "
                f"{_num(s.mean):>8} {_num(s.p50):>8} {_num(s.p95):>8} {_num(s.max):>8} "
                f"{_share(s.gap_share):>5}"
            )
    return lines


_STYLE = (
    "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin-bottom:1.5em}"
    "th,td{border:1px solid #bbb;padding:.25em .6em}td.n{text-align:right}"
    "th{background:#eee;text-align:left}"
)


def render_html(rows: Sequence[ChipRow], title: str = "GPU chip comparison") -> str:
    """One HTML page, no external assets: the chip models table (id ``chips``) and the
    metrics table (id ``metrics``), one ``tr`` per metric and chip model."""
    t = escape(title)
    out = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{t}</title>',
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{t}</h1>",
        '<table id="chips"><thead><tr><th>Chip model</th><th>Devices</th><th>Samples</th>'
        "</tr></thead><tbody>",
    ]
    for r in rows:
        out.append(
            f'<tr><td>{escape(r.model)}</td><td class="n">{r.devices}</td>'
            f'<td class="n">{r.samples}</td></tr>'
        )
    out.append("</tbody></table>")
    out.append(
        '<table id="metrics"><thead><tr><th>Metric</th><th>Unit</th><th>Chip model</th>'
        "<th>Min</th><th>Mean</th><th>P50</th><th>P95</th><th>Max</th><th>Gaps</th>"
        "</tr></thead><tbody>"
    )
    for name in _shown(rows):
        for r in rows:
            out.append(_html_row(r.model, r.metrics[name]))
    out.append("</tbody></table></body></html>")
    return "\n".join(out) + "\n"


def _html_row(model: str, s: MetricStats) -> str:
    cells = "".join(f'<td class="n">{_num(v)}</td>' for v in (s.min, s.mean, s.p50, s.p95, s.max))
    return (
        f"<tr><td>{escape(s.metric.label)}</td><td>{escape(s.metric.unit)}</td>"
        f'<td>{escape(model)}</td>{cells}<td class="n">{_share(s.gap_share)}</td></tr>'
    )
