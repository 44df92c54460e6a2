"""The chip comparison report as terminal text and as one self-contained HTML page (pure).

Two inputs, one rendering: the collector's chip_report.ChipRow of recorded tool outputs, and
a period from the store (the query service's /api/v1/gpu/models answer, shaped into the same
rows by :func:`rows_of_comparison`, with :class:`PeriodFacts` beside them). A table of chip
models (devices, samples; from the store also windows and XIDs), then per metric one line per
chip model with min, mean, p50, p95, max in the metric's unit and the share of samples where
it was a gap; a statistic no row has (the store keeps no percentiles) is left out, as is a
metric no chip model gives at all. From the store then come the counters' increases over the
period, the XID codes, and per chip model what it did not give.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from zerotrace.gpu_fields import DCGM_FIELDS
from zerotrace_collector.chip_report import REPORT_METRICS, ChipRow, MetricStats, ReportMetric

__all__ = [
    "PeriodFacts",
    "counter_label",
    "render_html",
    "render_text",
    "report_metric",
    "rows_of_comparison",
]

STATS = ("min", "mean", "p50", "p95", "max")
GIB = 1024**3
# The store's derived metric, and labels for the DCGM fields the recordings report lacks.
EXTRA_METRICS = {"memory_used_pct": ReportMetric("memory_used_pct", "Memory used share", "%")}
_DCGM = {f.field: f for f in DCGM_FIELDS}
_UNIT = re.compile(r"^(?P<label>.*?), (?P<unit>[^,()]+?)\s*(\((?P<note>[^)]*)\))?\.$")


@dataclass(frozen=True)
class PeriodFacts:
    """What the comparison over a period from the store adds to a chip model's row."""

    vendor: str
    windows: int
    xid_count: int
    xid_codes: Sequence[tuple[int, int]]  # (XID, how many), by XID
    counters: Mapping[str, tuple[int, int]]  # field -> (increase over the period, devices)
    not_given: Sequence[str]  # compared metrics and counters with no value at all


def report_metric(name: str) -> ReportMetric:
    """The label, unit and scale of a metric: the recordings report's, the store's derived
    one, else the DCGM field's description ("SM clock, MHz." -> "SM clock", "MHz")."""
    for m in REPORT_METRICS:
        if m.field == name:
            return m
    if name in EXTRA_METRICS:
        return EXTRA_METRICS[name]
    doc = _DCGM[name].doc if name in _DCGM else name
    found = _UNIT.match(doc)
    if found is None:
        return ReportMetric(name, doc.rstrip("."), "")
    if found["unit"] == "bytes":
        return ReportMetric(name, found["label"], "GiB", 1 / GIB)
    return ReportMetric(name, found["label"], found["unit"])


def _model_name(vendor: str, model: str) -> str:
    """The chip model as shown: the vendor is named unless the model already says it."""
    return model if vendor.lower() in model.lower() else f"{vendor} {model}".strip()


def rows_of_comparison(body: Mapping[str, Any]) -> tuple[list[ChipRow], dict[str, PeriodFacts]]:
    """The /api/v1/gpu/models answer as the report's rows (no percentiles: the store keeps
    windows, not samples) and their facts, by the rows' model name."""
    rows, facts = [], {}
    for m in body["models"]:
        name = _model_name(str(m["vendor"]), str(m["model"]))
        stats = {}
        for field in body["metrics"]:
            metric = report_metric(field)
            s = m["metrics"].get(field)
            if s is None:
                stats[field] = MetricStats(metric, 0, 1.0)
                continue
            k = metric.scale
            stats[field] = MetricStats(
                metric,
                int(s["samples"]),
                float(s["gap_share"]),
                float(s["min"]) * k,
                float(s["mean"]) * k,
                None,
                None,
                float(s["max"]) * k,
            )
        rows.append(ChipRow(name, int(m["devices"]), int(m["samples"]), stats))
        facts[name] = PeriodFacts(
            vendor=str(m["vendor"]),
            windows=int(m["windows"]),
            xid_count=int(m["xid_count"]),
            xid_codes=[(int(x["code"]), int(x["count"])) for x in m["xid_codes"]],
            counters={c: (int(v["increase"]), int(v["devices"])) for c, v in m["counters"].items()},
            not_given=list(m["not_given"]),
        )
    return rows, facts


def counter_label(name: str) -> tuple[str, str]:
    """(DCGM name, unit) of a counter field: ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "mJ")."""
    field = _DCGM.get(name)
    if field is None:
        return name, ""
    found = _UNIT.match(field.doc)
    unit = found["unit"] if found is not None and not found["unit"].startswith("counter") else ""
    return field.dcgm, unit or ("B" if name.endswith("_bytes") else "")


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _share(v: float) -> str:
    return f"{v * 100:.0f}%"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _metric_names(rows: Sequence[ChipRow]) -> list[str]:
    """The metrics some row gives, in the rows' order."""
    names = list(rows[0].metrics) if rows else []
    return [n for n in names if any(r.metrics[n].count for r in rows)]


def _stat_names(rows: Sequence[ChipRow]) -> list[str]:
    """The statistics some row has."""
    return [
        s for s in STATS if any(getattr(m, s) is not None for r in rows for m in r.metrics.values())
    ]


def _counter_names(facts: Mapping[str, PeriodFacts]) -> list[str]:
    seen = {c for f in facts.values() for c in f.counters}
    return [f.field for f in DCGM_FIELDS if f.field in seen] + sorted(
        seen - {f.field for f in DCGM_FIELDS}
    )


def _codes(f: PeriodFacts) -> str:
    return ", ".join(f"{code} x{n}" for code, n in f.xid_codes) or "-"


def render_text(
    rows: Sequence[ChipRow], facts: Mapping[str, PeriodFacts] | None = None
) -> list[str]:
    """The report's lines (one line saying so when there are no samples)."""
    if not rows:
        return ["no GPU samples in the period"]
    facts = facts or {}
    head = f"{'CHIP MODEL':<34} {'DEVICES':>7} {'SAMPLES':>7}"
    lines = [head + (f" {'WINDOWS':>7} {'XIDS':>5}  XID CODES" if facts else "")]
    for r in rows:
        line = f"{_fit(r.model, 34):<34} {r.devices:>7} {r.samples:>7}"
        if r.model in facts:
            f = facts[r.model]
            line += f" {f.windows:>7} {f.xid_count:>5}  {_codes(f)}"
        lines.append(line)
    stats = _stat_names(rows)
    lines += [
        "",
        f"{'METRIC':<34} {'UNIT':<4} {'CHIP MODEL':<28} "
        + " ".join(f"{s.upper():>8}" for s in stats)
        + f" {'GAPS':>5}",
    ]
    for name in _metric_names(rows):
        for k, r in enumerate(rows):
            s = r.metrics[name]
            label = s.metric.label if k == 0 else ""
            unit = s.metric.unit if k == 0 else ""
            values = " ".join(f"{_num(getattr(s, stat)):>8}" for stat in stats)
            lines.append(
                f"{_fit(label, 34):<34} {unit:<4} {_fit(r.model, 28):<28} {values} "
                f"{_share(s.gap_share):>5}"
            )
    counters = _counter_names(facts)
    if counters:
        lines += ["", f"{'COUNTER':<39} {'UNIT':<4} {'CHIP MODEL':<28} {'INCREASE':>16} DEVICES"]
        for name in counters:
            dcgm, unit = counter_label(name)
            for k, r in enumerate(rows):
                inc, devices = facts[r.model].counters.get(name, (None, 0))
                shown = "-" if inc is None else f"{inc:,}"
                lines.append(
                    f"{_fit(dcgm if k == 0 else '', 39):<39} {unit if k == 0 else '':<4} "
                    f"{_fit(r.model, 28):<28} {shown:>16} {devices:>7}"
                )
    gaps = [(r.model, facts[r.model].not_given) for r in rows if r.model in facts]
    if any(names for _, names in gaps):
        lines += ["", "NOT GIVEN IN THE PERIOD"]
        lines += [f"{_fit(m, 34):<34} {', '.join(n) or '-'}" for m, n in gaps]
    return lines


_STYLE = (
    "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin-bottom:1.5em}"
    "th,td{border:1px solid #bbb;padding:.25em .6em}td.n{text-align:right}"
    "th{background:#eee;text-align:left}"
)


def render_html(
    rows: Sequence[ChipRow],
    title: str = "GPU chip comparison",
    facts: Mapping[str, PeriodFacts] | None = None,
) -> str:
    """One HTML page, no external assets: the chip models table (id ``chips``), the metrics
    table (id ``metrics``), one ``tr`` per metric and chip model, and from the store the
    counters table (id ``counters``) and what each model did not give (id ``not-given``)."""
    facts = facts or {}
    t = escape(title)
    extra = "<th>Windows</th><th>XIDs</th><th>XID codes</th>" if facts else ""
    out = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{t}</title>',
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{t}</h1>",
        '<table id="chips"><thead><tr><th>Chip model</th><th>Devices</th><th>Samples</th>'
        f"{extra}</tr></thead><tbody>",
    ]
    for r in rows:
        cells = f'<td class="n">{r.devices}</td><td class="n">{r.samples}</td>'
        if r.model in facts:
            f = facts[r.model]
            cells += (
                f'<td class="n">{f.windows}</td><td class="n">{f.xid_count}</td>'
                f"<td>{escape(_codes(f))}</td>"
            )
        out.append(f"<tr><td>{escape(r.model)}</td>{cells}</tr>")
    out.append("</tbody></table>")
    stats = _stat_names(rows)
    heads = "".join(f"<th>{s.capitalize()}</th>" for s in stats)
    out.append(
        '<table id="metrics"><thead><tr><th>Metric</th><th>Unit</th><th>Chip model</th>'
        f"{heads}<th>Gaps</th></tr></thead><tbody>"
    )
    for name in _metric_names(rows):
        for r in rows:
            out.append(_html_row(r.model, r.metrics[name], stats))
    out.append("</tbody></table>")
    out += _html_counters(rows, facts) + _html_not_given(rows, facts)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _html_counters(rows: Sequence[ChipRow], facts: Mapping[str, PeriodFacts]) -> list[str]:
    """The counters table (from the store only): each counter's increase per chip model."""
    counters = _counter_names(facts)
    if not counters:
        return []
    out = [
        '<table id="counters"><thead><tr><th>Counter</th><th>Unit</th><th>Chip model</th>'
        "<th>Increase</th><th>Devices</th></tr></thead><tbody>"
    ]
    for name in counters:
        dcgm, unit = counter_label(name)
        for r in rows:
            inc, devices = facts[r.model].counters.get(name, (None, 0))
            out.append(
                f"<tr><td>{escape(dcgm)}</td><td>{escape(unit)}</td><td>{escape(r.model)}"
                f'</td><td class="n">{"-" if inc is None else f"{inc:,}"}</td>'
                f'<td class="n">{devices}</td></tr>'
            )
    out.append("</tbody></table>")
    return out


def _html_not_given(rows: Sequence[ChipRow], facts: Mapping[str, PeriodFacts]) -> list[str]:
    """What each chip model gave no value for in the period (from the store only)."""
    if not facts:
        return []
    out = [
        '<table id="not-given"><thead><tr><th>Chip model</th><th>Not given in the period'
        "</th></tr></thead><tbody>"
    ]
    for r in rows:
        names = ", ".join(facts[r.model].not_given) if r.model in facts else ""
        out.append(f"<tr><td>{escape(r.model)}</td><td>{escape(names or '-')}</td></tr>")
    out.append("</tbody></table>")
    return out


def _html_row(model: str, s: MetricStats, stats: Sequence[str]) -> str:
    cells = "".join(f'<td class="n">{_num(getattr(s, stat))}</td>' for stat in stats)
    return (
        f"<tr><td>{escape(s.metric.label)}</td><td>{escape(s.metric.unit)}</td>"
        f'<td>{escape(model)}</td>{cells}<td class="n">{_share(s.gap_share)}</td></tr>'
    )
