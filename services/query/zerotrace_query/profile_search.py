"""The profile queries both stores answer alike (pure over the store port): one store query for
the windows of a time range and type, then flame_graph in Python, so DuckDB (embedded) and
OpenSearch (distributed) give identical flame graphs for the same indexed windows."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from zerotrace.store import Query, Store
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query.documents import PROFILES
from zerotrace_query.flame_graph import (
    PROFILE_TYPES,
    SNAPSHOT_TYPES,
    THREAD_PREFIX,
    FlameFilter,
    Merged,
    build_tree,
    diff_stacks,
    diff_tree,
    merge_windows,
    reads_from_ns,
    stack_items,
)

# Windows read per query: the store's own ceiling (10 s windows: ~14 h of one process and
# type). The answer says when more matched, and from when on it is complete.
WINDOW_LIMIT = MAX_LIMIT


def _store_query(flt: FlameFilter, with_type: bool = True, limit: int = WINDOW_LIMIT) -> Query:
    """Windows overlapping [from, to): start < to and end > from."""
    equals: dict[str, str | int | float | bool] = {}
    if with_type:
        equals["profile_type"] = flt.profile_type
    for name, value in (("node_id", flt.node), ("service", flt.service), ("pid", flt.pid)):
        if value:
            equals[name] = value
    ranges: dict[str, tuple[int | float | None, int | float | None]] = {}
    if flt.start_ns_to:
        ranges["window_start_ns"] = (None, flt.start_ns_to)
    if after := reads_from_ns(flt):
        ranges["window_end_ns"] = (after + 1, None)
    return Query(equals=equals, ranges=ranges, sort="window_start_ns", descending=True, limit=limit)


def fetch_windows(store: Store, flt: FlameFilter) -> tuple[list[dict[str, Any]], int]:
    """Matching windows (newest first, at most WINDOW_LIMIT) and how many matched in all."""
    query = _store_query(flt.check())
    docs = store.search(PROFILES.name, query)
    total = store.count(PROFILES.name, query) if len(docs) >= query.limit else len(docs)
    return docs, total


def merged_profile(store: Store, flt: FlameFilter) -> tuple[Merged, dict[str, Any]]:
    """The merged stacks and the facts about what went in (for every output format)."""
    docs, total = fetch_windows(store, flt)
    merged = merge_windows(docs, flt)
    return merged, _head(flt, merged, len(docs), total)


def _head(flt: FlameFilter, merged: Merged, read: int, total: int) -> dict[str, Any]:
    sample_type, unit = PROFILE_TYPES[flt.profile_type]
    head: dict[str, Any] = {
        "type": flt.profile_type,
        "sample_type": sample_type,
        "unit": unit,
        "from_ns": flt.start_ns_from or merged.first_ns,
        "to_ns": flt.start_ns_to or merged.last_ns,
        "windows": merged.windows,
        "samples": merged.samples,
        "dropped": merged.dropped,
        "total": merged.total,
        "truncated": total > read,
    }
    if head["truncated"]:
        head["warning"] = (
            f"{total} windows matched; only the newest {read} were merged:"
            " narrow the time range or the filters"
        )
    return head


def flame_graph(store: Store, flt: FlameFilter) -> dict[str, Any]:
    """{type, unit, total, windows, samples, dropped, from_ns, to_ns, truncated, root: tree}."""
    merged, head = merged_profile(store, flt)
    return {**head, "root": build_tree(merged.stacks).to_json()}


def flame_diff(store: Store, base: FlameFilter, target: FlameFilter) -> dict[str, Any]:
    """The target range's tree with the base range's values beside it and delta per node.
    Counters are scaled to the target's total, so ranges of different lengths compare by
    share; snapshots (GPU memory in use) compare as they are: the bytes held at each end."""
    base_merged, base_head = merged_profile(store, base)
    merged, head = merged_profile(store, target)
    normalize = target.profile_type not in SNAPSHOT_TYPES
    diff = diff_stacks(base_merged.stacks, merged.stacks, normalize=normalize)
    return {**head, "base": base_head, "normalized": normalize, "root": diff_tree(diff)}


def profile_catalog(store: Store, flt: FlameFilter) -> dict[str, Any]:
    """What the pickers offer over a time range: profile types, nodes, services, pids and
    threads seen in the newest windows (all types), with the time span they cover."""
    docs = store.search(PROFILES.name, _store_query(flt.check(), with_type=False))
    threads: set[int] = set()
    for doc in docs:
        if doc.get("profile_type") == flt.profile_type:
            for folded, _ in stack_items(doc):
                first = folded.split(";", 1)[0]
                if first.startswith(THREAD_PREFIX) and first[len(THREAD_PREFIX) :].isdigit():
                    threads.add(int(first[len(THREAD_PREFIX) :]))
    return {
        "types": sorted({str(d["profile_type"]) for d in docs}),
        "known_types": {t: {"sample_type": s, "unit": u} for t, (s, u) in PROFILE_TYPES.items()},
        "nodes": sorted({str(d["node_id"]) for d in docs}),
        "services": sorted({str(d["service"]) for d in docs}),
        "pids": sorted({int(d.get("pid") or 0) for d in docs}),
        "threads": sorted(threads),
        "first_ns": min((int(d["window_start_ns"]) for d in docs), default=0),
        "last_ns": max((int(d["window_end_ns"]) for d in docs), default=0),
        "windows": len(docs),
    }


def base_filter(target: FlameFilter, base_from: int, base_to: int) -> FlameFilter:
    """The diff's base: the same filters over another time range."""
    return replace(target, start_ns_from=base_from, start_ns_to=base_to).check()
