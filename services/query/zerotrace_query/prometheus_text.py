"""The Prometheus text exposition format, version 0.0.4, for histograms, gauges and counters
(pure).

A family renders as `# HELP`, `# TYPE NAME histogram`, then per series its buckets
`NAME_bucket{...,le="B"}` (cumulative: each counts the observations <= B), the last one
`le="+Inf"` equal to `NAME_count`, then `NAME_sum` and `NAME_count`. A family without series
still gets its HELP and TYPE lines, so a scraper sees the name before the first observation.

Names: OpenTelemetry's names in Prometheus form as OpenTelemetry's Prometheus exporters write
them: every character outside [a-zA-Z0-9_] becomes `_` (`gen_ai.server.time_to_first_token`
-> `gen_ai_server_time_to_first_token`), then the unit's suffix (`s` -> `_seconds`); a UCUM
annotation such as `{token}` is no unit and adds none. Histograms take no `_total`.

Escaping: label values escape backslash, double quote and line feed (`\\\\`, `\\"`, `\\n`);
HELP text escapes backslash and line feed. Numbers print as Go prints them (and so Prometheus's
own client libraries, client_python included): `+Inf`, `NaN`, Python's shortest repr
otherwise, but an exponent from 1e6 on (`1.048576e+06`), so `le` values are the strings vLLM's
histograms carry and dashboards that select on `le` line up.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# UCUM units with a Prometheus base-unit suffix; annotations in braces get none.
_UNIT_SUFFIXES = {"s": "seconds", "ms": "milliseconds", "By": "bytes"}
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")


@dataclass(frozen=True)
class Series:
    """One label set's histogram. labels: (name, value) in the order they print; pairs with
    an empty value are left out (Prometheus reads an empty label as an absent one)."""

    labels: tuple[tuple[str, str], ...]
    cumulative: tuple[int, ...]  # per bound: observations <= it
    count: int
    total: float


@dataclass(frozen=True)
class HistogramFamily:
    name: str  # in Prometheus form (prometheus_name)
    help: str
    bounds: tuple[float, ...]  # strictly increasing, +Inf not included
    series: tuple[Series, ...]


def sanitize(name: str) -> str:
    """A metric or label name from an OpenTelemetry one: `.` and other characters -> `_`."""
    clean = _NOT_NAME.sub("_", name)
    return "_" + clean if clean[:1].isdigit() else clean


def prometheus_name(otel_name: str, unit: str) -> str:
    """`gen_ai.server.time_to_first_token`, `s` -> `gen_ai_server_time_to_first_token_seconds`.
    ValueError for a unit without a known Prometheus suffix."""
    name = sanitize(otel_name)
    if unit.startswith("{") and unit.endswith("}"):
        return name
    if unit not in _UNIT_SUFFIXES:
        raise ValueError(f"no Prometheus suffix known for the unit {unit!r}")
    suffix = "_" + _UNIT_SUFFIXES[unit]
    return name if name.endswith(suffix) else name + suffix


def number(value: float) -> str:
    """A sample value or `le` bound as Go's strconv 'g' shortest form prints it."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    whole, _, fraction = text.partition(".")
    if value > 0 and "e" not in text and len(whole) > 6:  # Go's exponent starts at 1e6
        digits = (whole + fraction).rstrip("0")
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{mantissa}e+{len(whole) - 1:02d}"
    return text


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs if value)


def _braces(inside: str) -> str:
    return "{" + inside + "}" if inside else ""


def _check(family: HistogramFamily, series: Series) -> None:
    counts = (*series.cumulative, series.count)
    if len(series.cumulative) != len(family.bounds) or any(
        low > high for low, high in pairwise(counts)
    ):
        raise ValueError(
            f"{family.name}{_braces(_labels(series.labels))}: buckets {series.cumulative} and"
            f" count {series.count} are not cumulative over {len(family.bounds)} bounds"
        )


def render(families: Sequence[HistogramFamily]) -> str:
    """The exposition text of these families, in the order given. ValueError when a series'
    buckets are not cumulative (each at least the one before, the count at least the last)."""
    lines: list[str] = []
    for family in families:
        name = family.name
        lines.append(f"# HELP {name} {escape_help(family.help)}")
        lines.append(f"# TYPE {name} histogram")
        for series in family.series:
            _check(family, series)
            labels = _labels(series.labels)
            sep = "," if labels else ""
            for bound, count in zip(
                (*family.bounds, math.inf), (*series.cumulative, series.count), strict=True
            ):
                lines.append(f'{name}_bucket{{{labels}{sep}le="{number(bound)}"}} {count}')
            lines.append(f"{name}_sum{_braces(labels)} {number(series.total)}")
            lines.append(f"{name}_count{_braces(labels)} {series.count}")
    return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class SampleFamily:
    """A gauge or counter family: one `NAME{labels} VALUE` line per sample. labels as Series'
    (empty values left out). The name is printed as given: zerotrace's own counters carry
    their `_total`, while the counters exported under dcgm-exporter's names
    (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, ...) deliberately do not, so dashboards built for
    it find them."""

    name: str
    help: str
    type: str  # "gauge" or "counter"
    samples: tuple[tuple[tuple[tuple[str, str], ...], int | float], ...]


def render_samples(families: Sequence[SampleFamily]) -> str:
    """The exposition text of these gauge and counter families, in the order given. An int
    prints as it is (a counter of 2**60 bytes stays exact); a float as `number` prints it."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for labels, value in family.samples:
            text = str(value) if isinstance(value, int) else number(value)  # exact, as given
            lines.append(f"{family.name}{_braces(_labels(labels))} {text}")
    return "".join(line + "\n" for line in lines)
