"""GPU cost per LLM request, read from the store (pure over the store port): the serving
process's GPU windows and every request it served in them, then llm_gpu_cost's definition.

Only SERVER documents with a pid are costed: the requests a process served. A CLIENT
document's process called out; its GPU, if any, did other work. For each (node, pid) among
the requests answered, this reads the pid's windows overlapping those requests, then every
SERVER request of that pid overlapping the windows read (the shares' denominators need all
of them, not only the page asked for), and attaches to each answered request:

  gpu_time_ns        its share of the pid's GPU time, rounded to the ns; from GPU_TIME
                     profile windows when the pid has any, else NVML's per-process SM
                     utilisation in the GPU device windows (mean % x window length)
  gpu_launches       its share of the pid's kernel launches (GPU_LAUNCH windows)
  gpu_memory_byte_s  its share of the memory the pid held, in byte-seconds: NVML's
                     per-process used memory (last sample of each device window) when
                     present, else the GPU_MEM_INUSE snapshots
  gpu_cost_method    llm_gpu_cost.METHOD_VERSION and the sources used, e.g.
                     "tokens-processed/v1 time=nvml_sm_util launches=GPU_LAUNCH
                     memory=GPU_MEM_INUSE"; null when no source had anything
  gpu_cost_partial   true when more windows or requests matched than one read holds: the
                     shares may then be too large

Each measure is null (unknown), not 0, when no window of its source overlaps the request.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from zerotrace.device_kinds import GPU
from zerotrace.store import Query, Store
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query import llm_gpu_cost as cost
from zerotrace_query.documents import DEVICE_WINDOWS, LLM_REQUESTS, PROFILES
from zerotrace_query.flame_graph import stack_items
from zerotrace_query.llm_observations import SERVER

GPU_TIME, GPU_LAUNCH, GPU_MEM_INUSE = "GPU_TIME", "GPU_LAUNCH", "GPU_MEM_INUSE"
NVML_UTIL, NVML_MEMORY = "nvml_sm_util", "nvml_used_memory"
DEVICE_KIND_GPU = GPU  # DeviceWindow.kind of a GPU
FIELDS = ("gpu_time_ns", "gpu_launches", "gpu_memory_byte_s", "gpu_cost_method")
PARTIAL = "gpu_cost_partial"

Doc = Mapping[str, Any]
Equals = dict[str, str | int | float | bool]


@dataclass(frozen=True)
class Sources:
    """What the store holds for one pid over a span, as intervals per measure (empty: none),
    and the name of the source each came from."""

    time: tuple[str, list[cost.Interval]]
    launches: tuple[str, list[cost.Interval]]
    memory: tuple[str, list[cost.Interval]]

    def method(self) -> str | None:
        used = [
            f"{measure}={source}"
            for measure, (source, intervals) in (
                ("time", self.time),
                ("launches", self.launches),
                ("memory", self.memory),
            )
            if intervals
        ]
        return " ".join([cost.METHOD_VERSION, *used]) if used else None


def _total(window: Doc) -> int:
    return sum(weight for _, weight in stack_items(window))


def _span(window: Doc) -> tuple[int, int]:
    return int(window["window_start_ns"]), int(window["window_end_ns"])


def sources(profiles: Sequence[Doc], devices: Sequence[Doc], pid: int) -> Sources:
    """The pid's intervals per measure from its profile windows and the node's GPU device
    windows, each measure from the better source it has (module doc)."""
    by_type: dict[str, list[Doc]] = {}
    for window in profiles:
        by_type.setdefault(str(window["profile_type"]), []).append(window)
    util: list[cost.Interval] = []
    held: list[cost.Interval] = []
    for window in devices:
        start, end = _span(window)
        for proc in window.get("processes") or ():
            if int(proc.get("pid") or 0) != pid:
                continue
            if proc.get("mean_sm_util_pct") is not None:
                util.append(cost.utilisation_interval(start, end, proc["mean_sm_util_pct"]))
            if proc.get("last_used_memory_bytes") is not None:
                held.append(cost.memory_interval(start, end, proc["last_used_memory_bytes"]))
    measured = [cost.time_interval(*_span(w), _total(w)) for w in by_type.get(GPU_TIME, [])]
    launches = [cost.Interval(*_span(w), Fraction(_total(w))) for w in by_type.get(GPU_LAUNCH, [])]
    snapshots = [cost.memory_interval(*_span(w), _total(w)) for w in by_type.get(GPU_MEM_INUSE, [])]
    return Sources(
        time=(GPU_TIME, measured) if measured else (NVML_UTIL, util),
        launches=(GPU_LAUNCH, launches),
        memory=(NVML_MEMORY, held) if held else (GPU_MEM_INUSE, snapshots),
    )


def key_of(doc: Doc) -> Hashable:
    """One request's identity in both the answer and the store: its document id."""
    return str(doc.get("_id") or doc["request_id"])


def costs(found: Sources, requests: Sequence[Doc]) -> dict[Hashable, dict[str, Any]]:
    """The attached fields for each request (all of the pid's, by key_of)."""
    work = [cost.work_of(d, key_of(d)) for d in requests]
    time = cost.apportion(found.time[1], work).shares
    launches = cost.apportion(found.launches[1], work).shares
    memory = cost.apportion(found.memory[1], work).shares
    method = found.method()
    out: dict[Hashable, dict[str, Any]] = {}
    for w in work:
        t, n, m = time[w.key], launches[w.key], memory[w.key]
        out[w.key] = {
            "gpu_time_ns": None if t is None else round(t),
            "gpu_launches": None if n is None else float(n),
            "gpu_memory_byte_s": None if m is None else float(cost.byte_seconds(m)),
            "gpu_cost_method": method,
        }
    return out


def _overlapping(start: str, end: str, low: int, high: int) -> dict[str, Any]:
    """start < high and end >= low (a request ending at `low` sorts in; it has no work
    there, so no share)."""
    return {start: (None, high), end: (low, None)}


def _read(store: Store, index: str, query: Query) -> tuple[list[dict[str, Any]], bool]:
    docs = store.search(index, query)
    return docs, len(docs) >= query.limit


def _pid_costs(
    store: Store, node: str, pid: int, asked: Sequence[Doc]
) -> dict[Hashable, dict[str, Any]]:
    low = min(int(d["start_ns"]) for d in asked)
    high = max(max(int(d["end_ns"]), int(d["start_ns"]) + 1) for d in asked)
    ranges = _overlapping("window_start_ns", "window_end_ns", low + 1, high)
    profiles: list[dict[str, Any]] = []
    partial = False
    for kind in (GPU_TIME, GPU_LAUNCH, GPU_MEM_INUSE):
        equals: Equals = {"node_id": node, "pid": pid, "profile_type": kind}
        got, full = _read(store, PROFILES.name, Query(equals, ranges, limit=MAX_LIMIT))
        profiles += got
        partial |= full
    equals_gpu: Equals = {"node_id": node, "kind": DEVICE_KIND_GPU}
    devices, full = _read(store, DEVICE_WINDOWS.name, Query(equals_gpu, ranges, limit=MAX_LIMIT))
    partial |= full
    found = sources(profiles, devices, pid)
    if found.method() is None:
        return {key_of(d): {**dict.fromkeys(FIELDS)} for d in asked}
    spans = [_span(w) for w in [*profiles, *devices]]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    served: Equals = {"node_id": node, "pid": pid, "observation_point": SERVER}
    query = Query(served, _overlapping("start_ns", "end_ns", first, last), limit=MAX_LIMIT)
    neighbours, full = _read(store, LLM_REQUESTS.name, query)
    partial |= full
    everyone: dict[Hashable, Doc] = {key_of(d): d for d in neighbours}
    everyone.update((key_of(d), d) for d in asked)  # the answer's own, even past the limit
    out = costs(found, list(everyone.values()))
    if partial:
        for fields in out.values():
            fields[PARTIAL] = True
    return out


def with_gpu_cost(store: Store, docs: Sequence[Doc]) -> list[dict[str, Any]]:
    """`docs` in their order, each a copy with the GPU cost fields (module doc)."""
    groups: dict[tuple[str, int], list[Doc]] = {}
    for doc in docs:
        pid = int(doc.get("pid") or 0)
        if pid > 0 and doc.get("observation_point") == SERVER:
            groups.setdefault((str(doc.get("node_id") or ""), pid), []).append(doc)
    found: dict[Hashable, dict[str, Any]] = {}
    for (node, pid), asked in groups.items():
        found.update(_pid_costs(store, node, pid, asked))
    empty = dict.fromkeys(FIELDS)
    return [{**doc, **found.get(key_of(doc), empty)} for doc in docs]
