"""What the GPU device check saw, as a report (pure): the raw.gpumetrics datums of one run,
the device windows folded from them, the workload phases and the cost per sample in; a dict
(report.json) and its text out. No clock, no I/O: the shell (gpu_device_check.py) gathers.

Per device: model, UUID, driver, MIG mode, GPM (yes: values came; no: every GPM field a gap;
failed). Per DCGM field: the range of its values over the run, or how it was a gap
(unsupported, failed, warming up: counts of samples). XIDs: every event and the last
``xid_errors``. Per workload phase: the pid in NVML's process list (memory against what the
phase allocated, SM utilisation) and the GPM ratios of the samples taken inside it (a GPM value
covers the time since the device's previous sample, so the first sample after the phase began
is left out). The fold: windows agree with the records (every sample folded, the same ranges).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zerotrace.gpu_fields import DCGM_FIELDS

__all__ = ["GPM_FIELDS", "Phase", "build_report", "fold_agrees", "render_text"]

GPM_FIELDS = tuple(f.field for f in DCGM_FIELDS if f.field.endswith("_ratio"))
Datum = Mapping[str, Any]


@dataclass(frozen=True)
class Phase:
    """One workload process: what it said when ready and done (None: it never got there)."""

    engine: str
    ready: Mapping[str, Any] | None = None
    done: Mapping[str, Any] | None = None
    skipped: str | None = None  # why it did not run
    cuda_libraries: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def _range(values: Sequence[Any]) -> dict[str, Any]:
    if all(isinstance(v, bool) for v in values):
        return {"values": sorted(set(values)), "samples": len(values)}
    return {"min": min(values), "max": max(values), "samples": len(values)}


def _count(records: Sequence[Datum], key: str, name: str) -> int:
    return sum(1 for d in records if name in (d.get(key) or ()))


def field_report(records: Sequence[Datum]) -> list[dict[str, Any]]:
    """Each DCGM field of one device's records: its range, or how it was a gap."""
    out = []
    for f in DCGM_FIELDS:
        values = [d[f.field] for d in records if d.get(f.field) is not None]
        row: dict[str, Any] = {"dcgm": f.dcgm, "field": f.field}
        if values:
            row.update(_range(values))
        for key in ("unsupported", "failed", "warming_up"):
            n = _count(records, key, f.field)
            if n:
                row[key] = n
        out.append(row)
    return out


def gpm_status(records: Sequence[Datum]) -> str:
    """yes (a GPM value came), no (every GPM field a gap), failed, or warming up only."""
    if any(d.get(name) is not None for d in records for name in GPM_FIELDS):
        return "yes"
    if all(set(GPM_FIELDS) <= set(d.get("unsupported") or ()) for d in records):
        return "no"
    if any(set(GPM_FIELDS) & set(d.get("failed") or ()) for d in records):
        return "failed"
    return "warming up only"


def device_report(records: Sequence[Datum]) -> dict[str, Any]:
    first = records[0]
    mig = sorted({d["mig_mode"] for d in records if d.get("mig_mode") is not None})
    return {
        "index": first["device_index"],
        "model": first["model"],
        "uuid": first["device_uuid"],
        "vendor": first["vendor"],
        "driver": first.get("driver_version"),
        "mig_mode": mig or "unsupported",
        "gpm": gpm_status(records),
        "samples": len(records),
        "fields": field_report(records),
        "xid_events": [e for d in records for e in d.get("xid_events") or ()],
        "last_xid_errors": records[-1].get("xid_errors"),
        "processes": process_report(records),
    }


def process_report(records: Sequence[Datum]) -> list[dict[str, Any]]:
    """Every pid NVML listed on the device: samples it was in, its peak memory and SM use."""
    memory: dict[int, list[int]] = {}
    sm: dict[int, list[float]] = {}
    rows: dict[int, dict[str, Any]] = {}
    for d in records:
        for p in d.get("processes") or ():
            pid = int(p["pid"])
            row = rows.setdefault(pid, {"pid": pid, "name": p.get("process_name"), "samples": 0})
            row["samples"] += 1
            if p.get("used_memory_bytes") is not None:
                memory.setdefault(pid, []).append(int(p["used_memory_bytes"]))
            if p.get("sm_util_pct") is not None:
                sm.setdefault(pid, []).append(float(p["sm_util_pct"]))
    for pid, row in rows.items():
        row["max_memory_bytes"] = max(memory[pid]) if pid in memory else None
        row["sm_util_pct"] = _stats(sm[pid]) if pid in sm else None
    return [rows[pid] for pid in sorted(rows)]


def _stats(values: Sequence[float]) -> dict[str, Any]:
    return {
        "mean": math.fsum(values) / len(values),
        "min": min(values),
        "max": max(values),
        "samples": len(values),
    }


def phase_report(phase: Phase, by_device: Mapping[int, Sequence[Datum]]) -> dict[str, Any]:
    """One workload phase against each device's records taken while it ran."""
    out: dict[str, Any] = {"engine": phase.engine}
    if phase.ready is None:
        out["skipped"] = phase.skipped or "the workload never said it was ready"
        return out
    pid = int(phase.ready["pid"])
    allocated = int(phase.ready["allocated_bytes"])
    start = int(phase.ready["ts_ns"])
    end = int(phase.done["ts_ns"]) if phase.done is not None else None
    out.update(ready=dict(phase.ready), done=dict(phase.done) if phase.done else None)
    out["cuda_libraries"] = [dict(lib) for lib in phase.cuda_libraries]
    devices = []
    for index, records in sorted(by_device.items()):
        inside = [d for d in records if start < d["ts_ns"] and (end is None or d["ts_ns"] <= end)]
        mine = [p for d in inside for p in d.get("processes") or () if p["pid"] == pid]
        memory = [int(p["used_memory_bytes"]) for p in mine if p.get("used_memory_bytes")]
        sm = [float(p["sm_util_pct"]) for p in mine if p.get("sm_util_pct") is not None]
        util = [float(d["gpu_util_pct"]) for d in inside if d.get("gpu_util_pct") is not None]
        gpm = {
            name: _stats(values)
            for name in GPM_FIELDS
            if (values := [float(d[name]) for d in inside[1:] if d.get(name) is not None])
        }
        devices.append(
            {
                "device_index": index,
                "samples": len(inside),
                "pid_samples": len(mine),
                "max_memory_bytes": max(memory) if memory else None,
                "memory_over_allocated_bytes": max(memory) - allocated if memory else None,
                "sm_util_pct": _stats(sm) if sm else None,
                "gpu_util_pct": _stats(util) if util else None,
                "gpm": gpm,
            }
        )
    out["devices"] = devices
    return out


def fold_agrees(records: Sequence[Datum], windows: Sequence[Datum]) -> list[str]:
    """Where the device windows disagree with the records they were folded from (none: [])."""
    problems = []
    for index in sorted({d["device_index"] for d in records}):
        mine = [d for d in records if d["device_index"] == index]
        folded = [w for w in windows if w["device_index"] == index]
        if sum(w["samples"] for w in folded) != len(mine):
            problems.append(
                f"GPU {index}: {len(mine)} records, {sum(w['samples'] for w in folded)} folded"
            )
        names = {name for w in folded for name in w["metrics"]}
        for name in sorted(names):
            values = [float(d[name]) for d in mine if d.get(name) is not None and d[name] != -1]
            lows = [w["metrics"][name]["min"] for w in folded if name in w["metrics"]]
            highs = [w["metrics"][name]["max"] for w in folded if name in w["metrics"]]
            if values and (min(lows), max(highs)) != (min(values), max(values)):
                problems.append(f"GPU {index}: {name} folded {min(lows)}..{max(highs)}, "
                                f"records {min(values)}..{max(values)}")  # fmt: skip
    return problems


def cost_report(cpu_us: Sequence[float], wall_us: Sequence[float]) -> dict[str, Any]:
    """What one sample of one GPU cost: CPU time of the sampling thread and wall time."""
    if not cpu_us:
        return {"samples": 0}
    return {
        "samples": len(cpu_us),
        "cpu_us_per_gpu_sample": _stats(cpu_us),
        "wall_us_per_gpu_sample": _stats(wall_us),
    }


def findings(report: Mapping[str, Any]) -> list[str]:
    """What a reader must not miss: each a line (none: the run was as expected)."""
    out = []
    if not report["devices"]:
        out.append("NVML gave no device")
    for dev in report["devices"]:
        for e in dev["xid_events"]:
            out.append(f"GPU {dev['index']}: XID {e['xid']} at {e['ts_ns']}")
        failed = [r["field"] for r in dev["fields"] if r.get("failed")]
        if failed:
            out.append(f"GPU {dev['index']}: reads failed: {', '.join(failed)}")
    for phase in report["phases"]:
        if "skipped" in phase:
            continue
        pid = phase["ready"]["pid"]
        if phase["done"] is None:
            out.append(f"{phase['engine']} workload (pid {pid}) did not finish")
        if not any(d["pid_samples"] for d in phase["devices"]):
            out.append(f"{phase['engine']} workload pid {pid} not in NVML's process lists")
        for d in phase["devices"]:
            over = d["memory_over_allocated_bytes"]
            if over is not None and over < 0:
                out.append(f"{phase['engine']} workload pid {pid}: NVML shows {-over} bytes "
                           "less than it allocated")  # fmt: skip
    out.extend(report["fold"]["disagreements"])
    return out


def build_report(
    records: Sequence[Datum],
    windows: Sequence[Datum],
    phases: Sequence[Phase],
    cost: Mapping[str, Any],
    *,
    notes: Sequence[str] = (),
    skipped: Sequence[tuple[str, str]] = (),
    counters: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The whole report. *records*: raw.gpumetrics datums in the order taken; *windows*: the
    device windows folded from them; *skipped*: (what, why) of each part not run."""
    by_device: dict[int, list[Datum]] = {}
    for d in records:
        by_device.setdefault(int(d["device_index"]), []).append(d)
    for recs in by_device.values():
        recs.sort(key=lambda d: d["ts_ns"])
    report: dict[str, Any] = {
        "devices": [device_report(by_device[i]) for i in sorted(by_device)],
        "phases": [phase_report(p, by_device) for p in phases],
        "fold": {
            "windows": len(windows),
            "samples_folded": sum(w["samples"] for w in windows),
            "records": len(records),
            "disagreements": fold_agrees(records, windows),
        },
        "cost": dict(cost),
        "notes": list(notes),
        "skipped": [{"what": what, "why": why} for what, why in skipped],
        "counters": dict(counters or {}),
    }
    report["findings"] = findings(report)
    return report


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _span(row: Mapping[str, Any]) -> str:
    if "values" in row:
        return "/".join(_num(v) for v in row["values"])
    return (
        _num(row["min"]) if row["min"] == row["max"] else f"{_num(row['min'])}..{_num(row['max'])}"
    )


def _stats_text(s: Mapping[str, Any] | None) -> str:
    if not s:
        return "-"
    return f"mean {_num(s['mean'])} (min {_num(s['min'])}, max {_num(s['max'])}, n {s['samples']})"


def render_text(report: Mapping[str, Any]) -> str:
    """The report for a person (report.txt and the run's output)."""
    lines = ["== GPU device check =="]
    for dev in report["devices"]:
        lines.append(
            f"GPU {dev['index']}: {dev['model']} ({dev['uuid']}), driver {dev['driver']}, "
            f"GPM {dev['gpm']}, MIG {dev['mig_mode']}, {dev['samples']} samples"
        )
        for row in dev["fields"]:
            gaps = ", ".join(
                f"{k} {row[k]}" for k in ("unsupported", "failed", "warming_up") if k in row
            )
            span = _span(row) if "samples" in row else "-"
            lines.append(
                f"  {row['dcgm']:<42} {row['field']:<30} {span}" + (f"  [{gaps}]" if gaps else "")
            )
        xids = ", ".join(f"{e['xid']}@{e['ts_ns']}" for e in dev["xid_events"]) or "none"
        lines.append(f"  XID events: {xids}; last xid_errors {dev['last_xid_errors']}")
        for p in dev["processes"]:
            lines.append(
                f"  process {p['pid']} ({p['name']}): in {p['samples']} samples, memory max "
                f"{p['max_memory_bytes']} B, SM util {_stats_text(p['sm_util_pct'])}"
            )
    for phase in report["phases"]:
        if "skipped" in phase:
            lines.append(f"workload {phase['engine']}: skipped: {phase['skipped']}")
            continue
        ready, done = phase["ready"], phase["done"]
        lines.append(f"workload {phase['engine']}: pid {ready['pid']}, allocated "
                     f"{ready['allocated_bytes']} B; ready {ready}; done {done}")  # fmt: skip
        for lib in phase["cuda_libraries"]:
            lines.append(f"  maps {lib['kind']} {lib['path']}: probed symbols {lib.get('probed')}")
        for d in phase["devices"]:
            lines.append(
                f"  GPU {d['device_index']}: {d['samples']} samples inside, pid in "
                f"{d['pid_samples']}; memory max {d['max_memory_bytes']} B (allocated + "
                f"{d['memory_over_allocated_bytes']})"
            )
            lines.append(f"    pid SM util       {_stats_text(d['sm_util_pct'])}")
            lines.append(f"    device GPU util   {_stats_text(d['gpu_util_pct'])}")
            for name, s in d["gpm"].items():
                lines.append(f"    {name:<26} {_stats_text(s)}")
    fold = report["fold"]
    lines.append(
        f"fold: {fold['windows']} device windows, {fold['samples_folded']} samples folded of "
        f"{fold['records']} records; disagreements: {fold['disagreements'] or 'none'}"
    )
    cost = report["cost"]
    if cost.get("samples"):
        lines.append(f"cost per GPU sample, CPU us: {_stats_text(cost['cpu_us_per_gpu_sample'])}")
        lines.append(f"cost per GPU sample, wall us: {_stats_text(cost['wall_us_per_gpu_sample'])}")
    lines.extend(f"note: {n}" for n in report["notes"])
    lines.extend(f"skipped: {s['what']}: {s['why']}" for s in report["skipped"])
    lines.append(f"counters: {report['counters']}")
    lines.extend(f"FINDING: {f}" for f in report["findings"] or ["none: as expected"])
    return "\n".join(lines) + "\n"
