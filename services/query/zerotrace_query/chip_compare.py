"""The chip comparison over a period from the store (pure over the store port): the GPU device
windows (documents.DEVICE_WINDOWS) that start in [from, to), the same metrics side by side per
chip model (vendor and model, as the device names itself).

`GET /api/v1/gpu/models?from=&to=&node=&limit=` answers, per chip model, sorted by vendor
then model:

- devices (distinct node and UUID), nodes, windows, samples and driver versions;
- per compared metric it gives: the mean over its samples (each window's mean weighted by
  the samples that had the value), the min and max of the windows' min and max, the samples
  with a value, and the share of the model's samples without one (a gap: unsupported,
  failed, or not read);
- per counter (energy, ECC, PCIe replays and bytes, NVLink): the increase over the period,
  per device the window's own increases plus the steps between consecutive windows (a step
  down, a reset or wrap, counts the new value, as Prometheus' increase() does), summed over
  the devices; and how many devices gave it;
- the XID errors (count, and per code), the union of what the devices said they do not
  support, and `not_given`: the compared metrics and counters it had no value for at all.

The compared metrics are HEADLINE (always, so a model that lacks one says so), then every
other DCGM gauge some model gave, in DCGM_FIELDS order. `memory_used_pct` is derived per
window: framebuffer used over framebuffer total (the window's mean total: it does not move).
The first schema version's three fields stand in where a window lacks the DCGM-named ones.

Bounded work: one count, then the newest windows in pages of store_rules.MAX_LIMIT, at most
`limit` (default 10,000: eight GPUs for 1.7 hours of 5 s windows); when more matched, the
answer covers the newest ones and says so (`truncated`, `warning`, `covered_from_ns`). The
store pages by start, then id, with no cursor on the id: a page's windows at its oldest start
are asked again by the next one and skipped; so more than MAX_LIMIT windows starting at one
instant (a fleet of more than 10,000 GPUs) end the reading there, cut and said: filter by node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qs

from zerotrace.counter_steps import counter_step
from zerotrace.errors import ZerotraceError
from zerotrace.gpu_fields import DCGM_FIELDS
from zerotrace.store import Store
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query.device_search import KIND_GPU, DeviceFilter
from zerotrace_query.documents import DEVICE_WINDOWS

__all__ = [
    "HEADLINE",
    "MODELS_PATH",
    "ModelsFilter",
    "answer",
    "chip_comparison",
    "compare_windows",
    "counter_increase",
    "parse_models_query",
]

MODELS_PATH = "/api/v1/gpu/models"
MEMORY_USED_PCT = "memory_used_pct"
HEADLINE = ("gpu_util_pct", MEMORY_USED_PCT, "power_w", "temperature_c", "sm_clock_mhz")
# Gauges that are not levels to compare: the last XID code (the XIDs are counted as events)
# and a bitmask of clock event reasons.
NOT_COMPARED = frozenset({"xid_errors", "clocks_event_reasons"})
GAUGES = tuple(
    f.field for f in DCGM_FIELDS if not f.counter and f.field not in NOT_COMPARED | set(HEADLINE)
)
COUNTERS = tuple(f.field for f in DCGM_FIELDS if f.counter)
# The first schema version's fields, read where a window lacks the DCGM-named one.
LEGACY = {
    "gpu_util_pct": "utilization_pct",
    "fb_used_bytes": "memory_used_bytes",
    "fb_total_bytes": "memory_total_bytes",
}
PARAMS = frozenset({"node", "from", "to", "limit"})
DEFAULT_LIMIT = MAX_LIMIT
MAX_WINDOWS = 5 * MAX_LIMIT


@dataclass
class _Gauge:
    weighted: list[float] = field(default_factory=list)  # mean * samples, per window
    samples: int = 0
    min: float = math.inf
    max: float = -math.inf

    def add(self, stats: Mapping[str, Any], scale: float = 1.0) -> None:
        n = int(stats.get("samples") or 0)
        if n <= 0:
            return
        self.weighted.append(float(stats["mean"]) * scale * n)
        self.samples += n
        self.min = min(self.min, float(stats["min"]) * scale)
        self.max = max(self.max, float(stats["max"]) * scale)

    def summary(self, all_samples: int) -> dict[str, Any]:
        return {
            "mean": math.fsum(self.weighted) / self.samples,
            "min": self.min,
            "max": self.max,
            "samples": self.samples,
            "gap_share": max(all_samples - self.samples, 0) / all_samples if all_samples else 0.0,
        }


@dataclass
class _Model:
    vendor: str
    model: str
    windows: int = 0
    samples: int = 0
    nodes: set[str] = field(default_factory=set)
    drivers: set[str] = field(default_factory=set)
    gauges: dict[str, _Gauge] = field(default_factory=dict)
    by_device: dict[tuple[str, str], list[Mapping[str, Any]]] = field(default_factory=dict)
    xids: dict[int, int] = field(default_factory=dict)
    unsupported: set[str] = field(default_factory=set)


def window_metrics(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A window's metric stats under the compared names: the legacy fields where the DCGM
    ones are missing, and memory_used_pct where used and a positive total are there."""
    metrics: dict[str, Mapping[str, Any]] = dict(doc.get("metrics") or {})
    for name, legacy in LEGACY.items():
        if name not in metrics and legacy in metrics:
            metrics[name] = metrics[legacy]
    used, total = metrics.get("fb_used_bytes"), metrics.get("fb_total_bytes")
    if used is not None and total is not None and float(total["mean"]) > 0:
        scale = 100.0 / float(total["mean"])
        metrics[MEMORY_USED_PCT] = {
            "mean": float(used["mean"]) * scale,
            "min": float(used["min"]) * scale,
            "max": float(used["max"]) * scale,
            "samples": used["samples"],
        }
    return metrics


def counter_increase(windows: Sequence[Mapping[str, Any]], name: str) -> int | None:
    """One device's increase of counter *name* over its windows (in time order): each
    window's increase, and each step from a window's last value to the next one's first (a
    step down counts the new value). None when no window has it."""
    total, previous, seen = 0, None, False
    for w in windows:
        c = (w.get("counters") or {}).get(name)
        if c is None:
            continue
        seen = True
        if previous is not None:
            total += counter_step(previous, int(c["first"]))
        total += int(c["increase"])
        previous = int(c["last"])
    return total if seen else None


def compare_windows(docs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{metrics, counters, models} of these GPU windows (any order): see the module doc."""
    models: dict[tuple[str, str], _Model] = {}
    seen_counters: set[str] = set()
    for doc in docs:
        key = (str(doc.get("vendor") or ""), str(doc.get("model") or ""))
        if key not in models:
            models[key] = _Model(*key)
        m = models[key]
        samples = int(doc.get("samples") or 0)
        m.windows += 1
        m.samples += samples
        m.nodes.add(str(doc.get("node_id")))
        if doc.get("driver_version"):
            m.drivers.add(str(doc["driver_version"]))
        for name, stats in window_metrics(doc).items():
            m.gauges.setdefault(name, _Gauge()).add(stats)
        device = (str(doc.get("node_id")), str(doc.get("device")))
        m.by_device.setdefault(device, []).append(doc)
        for event in doc.get("events") or ():
            if event.get("kind") == "xid":
                code = int(event["code"])
                m.xids[code] = m.xids.get(code, 0) + 1
        m.unsupported.update(doc.get("unsupported") or ())
        seen_counters.update(doc.get("counters") or ())

    given = {name for m in models.values() for name, g in m.gauges.items() if g.samples}
    metrics = [*HEADLINE, *(name for name in GAUGES if name in given)]
    counters = [name for name in COUNTERS if name in seen_counters]
    return {
        "metrics": metrics,
        "counters": counters,
        "models": [_summary(models[key], metrics, counters) for key in sorted(models)],
    }


def _summary(m: _Model, metrics: Sequence[str], counters: Sequence[str]) -> dict[str, Any]:
    stats = {
        name: m.gauges[name].summary(m.samples)
        for name in metrics
        if name in m.gauges and m.gauges[name].samples
    }
    increases: dict[str, dict[str, int]] = {}
    for name in counters:
        found = [
            inc
            for ws in m.by_device.values()
            if (inc := counter_increase(sorted(ws, key=_start), name)) is not None
        ]
        if found:
            increases[name] = {"increase": sum(found), "devices": len(found)}
    return {
        "vendor": m.vendor,
        "model": m.model,
        "devices": len(m.by_device),
        "nodes": len(m.nodes),
        "windows": m.windows,
        "samples": m.samples,
        "driver_versions": sorted(m.drivers),
        "metrics": stats,
        "counters": increases,
        "xid_count": sum(m.xids.values()),
        "xid_codes": [{"code": code, "count": m.xids[code]} for code in sorted(m.xids)],
        "unsupported": sorted(m.unsupported),
        "not_given": [n for n in metrics if n not in stats]
        + [n for n in counters if n not in increases],
    }


def _start(doc: Mapping[str, Any]) -> int:
    return int(doc.get("window_start_ns") or 0)


@dataclass(frozen=True)
class ModelsFilter:
    node: str = ""
    start_ns_from: int = 0
    start_ns_to: int = 0  # 0: open
    limit: int = DEFAULT_LIMIT

    def check(self) -> ModelsFilter:
        if not 1 <= self.limit <= MAX_WINDOWS:
            raise ValueError(f"'limit' must be between 1 and {MAX_WINDOWS}")
        self.windows().check()
        return self

    def windows(self) -> DeviceFilter:
        return DeviceFilter(
            KIND_GPU, node=self.node, start_ns_from=self.start_ns_from, start_ns_to=self.start_ns_to
        )


def newest_windows(store: Store, flt: ModelsFilter) -> tuple[list[dict[str, Any]], int]:
    """(the newest `limit` GPU windows of the filter, how many matched in all), read in pages
    newest first; a page's oldest start is read again by the next (ids seen are skipped)."""
    base = flt.windows().query(0)
    total = store.count(DEVICE_WINDOWS.name, base)
    docs: list[dict[str, Any]] = []
    edge: set[str] = set()  # ids read at the current lower edge
    upper = base.ranges.get("window_start_ns", (None, None))[1]
    lower = base.ranges.get("window_start_ns", (None, None))[0]
    while len(docs) < min(flt.limit, total):
        size = min(MAX_LIMIT, flt.limit - len(docs) + len(edge))
        page = store.search(
            DEVICE_WINDOWS.name,
            replace(base, ranges={"window_start_ns": (lower, upper)}, limit=size),
        )
        fresh = [d for d in page if d["_id"] not in edge]
        if not fresh:  # a page of one start, all read: cannot go on
            break
        docs.extend(fresh[: flt.limit - len(docs)])
        if len(page) < size:
            break
        oldest = int(page[-1]["window_start_ns"])
        if upper is None or oldest + 1 != upper:
            edge = set()
        edge |= {d["_id"] for d in page if int(d["window_start_ns"]) == oldest}
        upper = oldest + 1
    return docs, total


def chip_comparison(store: Store, flt: ModelsFilter) -> dict[str, Any]:
    """{from_ns, to_ns, node, metrics, counters, models, count, windows, windows_total,
    covered_from_ns, truncated[, warning]}."""
    docs, total = newest_windows(store, flt)
    body: dict[str, Any] = {
        "from_ns": flt.start_ns_from,
        "to_ns": flt.start_ns_to,
        "node": flt.node,
        **compare_windows(docs),
    }
    body["count"] = len(body["models"])
    body["windows"] = len(docs)
    body["windows_total"] = total
    body["covered_from_ns"] = min((_start(d) for d in docs), default=flt.start_ns_from)
    body["truncated"] = total > len(docs)
    if body["truncated"]:
        body["warning"] = (
            f"{total} GPU windows matched; the comparison covers the newest {len(docs)}:"
            " narrow the time range or filter by node"
        )
    return body


def parse_models_query(query_string: str) -> ModelsFilter:
    """?node=&from=&to=&limit= -> ModelsFilter (checked); ValueError names the bad
    parameter. from/to: ns since the epoch; limit: the most windows read."""
    try:
        pairs = parse_qs(query_string, keep_blank_values=True, strict_parsing=bool(query_string))
    except ValueError:
        raise ValueError(f"malformed query string {query_string!r}") from None
    params = {k: v[-1] for k, v in pairs.items()}
    unknown = sorted(set(params) - PARAMS)
    if unknown:
        raise ValueError(
            f"unknown query parameter {unknown[0]!r}; known: {', '.join(sorted(PARAMS))}"
        )

    def integer(name: str, default: int) -> int:
        try:
            return int(params.get(name) or default)
        except ValueError:
            raise ValueError(f"query parameter {name!r} must be an integer") from None

    return ModelsFilter(
        node=params.get("node", ""),
        start_ns_from=integer("from", 0),
        start_ns_to=integer("to", 0),
        limit=integer("limit", DEFAULT_LIMIT),
    ).check()


def answer(store: Store, query_string: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of MODELS_PATH: 400 with one line for a bad parameter, 503
    when the store cannot answer."""
    try:
        return 200, chip_comparison(store, parse_models_query(query_string))
    except ValueError as exc:
        return 400, {"error": str(exc)}
    except ZerotraceError as exc:
        return 503, {"error": str(exc)}
