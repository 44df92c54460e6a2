"""Flame graphs from profile windows (pure): merge derived.profile windows over a time range with
filters into one set of stacks, fold them into a tree with self and total values, and diff two
trees.

Stacks are tuples of frames, root first, as in schemas/derived/profile_window.avsc: the first
frame is always 'thread:<tid>'. Merging drops it (threads merged) unless a thread filter or
grouping by thread is asked, so the same code path serves "whole process" and "per thread".

Counters (ON_CPU samples, OFF_CPU ns, GPU_MEM_ALLOC bytes, GPU_LAUNCH launches, GPU_TIME ns) sum
over windows. GPU_MEM_INUSE windows are snapshots of what was still allocated at window end:
summing two snapshots would count the same live allocation twice, so the merge keeps only the
latest snapshot per (node, service, pid) and sums across processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Stack = tuple[str, ...]
THREAD_PREFIX = "thread:"
ROOT_NAME = "all"

# profile type -> (pprof/speedscope sample type name, unit). Units as profile_window.avsc says.
PROFILE_TYPES: dict[str, tuple[str, str]] = {
    "ON_CPU": ("samples", "count"),
    "OFF_CPU": ("off_cpu", "nanoseconds"),
    "GPU_MEM_ALLOC": ("alloc_space", "bytes"),
    "GPU_MEM_INUSE": ("inuse_space", "bytes"),
    "GPU_LAUNCH": ("launches", "count"),
    "GPU_TIME": ("gpu_time", "nanoseconds"),
}
SNAPSHOT_TYPES = frozenset({"GPU_MEM_INUSE"})
MAX_NS = 2**63 - 1


@dataclass(frozen=True)
class FlameFilter:
    """Which windows and stacks. Empty/0 fields match everything. A window matches the time
    range when it overlaps [from, to) (a partly covered window counts whole: windows are the
    unit of storage). `frame` keeps stacks with a frame containing it (case-sensitive)."""

    profile_type: str = "ON_CPU"
    node: str = ""
    service: str = ""
    pid: int = 0
    thread: int = 0  # a tid: only that thread's stacks, thread frame kept
    frame: str = ""
    by_thread: bool = False  # keep the thread frame as the first level
    start_ns_from: int = 0
    start_ns_to: int = 0

    def check(self) -> FlameFilter:
        """Itself, or ValueError naming the bad parameter as the APIs spell it."""
        if self.profile_type not in PROFILE_TYPES:
            raise ValueError(f"'type' must be one of {', '.join(PROFILE_TYPES)}")
        if self.pid < 0 or self.thread < 0:
            raise ValueError("'pid' and 'thread' must be positive")
        for name, value in (("from", self.start_ns_from), ("to", self.start_ns_to)):
            if not 0 <= value <= MAX_NS:
                raise ValueError(f"'{name}' is ns since the epoch: between 0 and {MAX_NS}")
        if self.start_ns_from and self.start_ns_to and self.start_ns_to <= self.start_ns_from:
            raise ValueError("'to' must be after 'from'")
        return self

    @property
    def keeps_thread(self) -> bool:
        return self.by_thread or bool(self.thread)


@dataclass
class Merged:
    """Stacks merged over windows, with what went in."""

    profile_type: str
    stacks: dict[Stack, int] = field(default_factory=dict)
    windows: int = 0
    samples: int = 0
    dropped: int = 0
    first_ns: int = 0
    last_ns: int = 0

    @property
    def unit(self) -> str:
        return PROFILE_TYPES[self.profile_type][1]

    @property
    def total(self) -> int:
        return sum(self.stacks.values())


def split_folded(folded: str) -> Stack:
    return tuple(folded.split(";")) if folded else ()


# Memory in use is a snapshot, which profiler-agg sends at the end of each window in which a
# process called the GPU API and for a minute after: the state at a time is the newest snapshot
# at or before it, so a range also looks this far back before its start. A process quiet on the
# GPU API for longer than that before the range is not shown (nothing tells us it still lives).
SNAPSHOT_LOOKBACK_NS = 3600 * 1_000_000_000


def reads_from_ns(flt: FlameFilter) -> int:
    """The earliest window end a query reads (0: no bound)."""
    if not flt.start_ns_from or flt.profile_type not in SNAPSHOT_TYPES:
        return flt.start_ns_from
    return max(1, flt.start_ns_from - SNAPSHOT_LOOKBACK_NS)


def _window_matches(window: Mapping[str, Any], flt: FlameFilter) -> bool:
    if window.get("profile_type") != flt.profile_type:
        return False
    if flt.node and window.get("node_id") != flt.node:
        return False
    if flt.service and window.get("service") != flt.service:
        return False
    if flt.pid and int(window.get("pid") or 0) != flt.pid:
        return False
    start, end = int(window["window_start_ns"]), int(window["window_end_ns"])
    if flt.start_ns_to and start >= flt.start_ns_to:
        return False
    after = reads_from_ns(flt)
    return not (after and end <= after)


def latest_snapshots(windows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The newest window per (node, service, pid): for snapshot types, the state at the end."""
    latest: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for window in windows:
        key = (str(window["node_id"]), str(window["service"]), int(window.get("pid") or 0))
        order = (int(window["window_end_ns"]), int(window["window_start_ns"]))
        seen = latest.get(key)
        if seen is None or order > (int(seen["window_end_ns"]), int(seen["window_start_ns"])):
            latest[key] = window
    return list(latest.values())


def stack_items(window: Mapping[str, Any]) -> Iterable[tuple[str, int]]:
    """(folded, weight) of a window in either shape: the Avro map, or the store document's
    list of {"stack", "weight"} (documents.profile_document says why)."""
    stacks = window.get("stacks") or {}
    if isinstance(stacks, Mapping):
        return ((str(k), int(v)) for k, v in stacks.items())
    return ((str(item["stack"]), int(item["weight"])) for item in stacks)


def _keep(stack: Stack, flt: FlameFilter) -> Stack | None:
    """The stack as the merge keeps it, or None when a filter drops it."""
    has_thread = bool(stack) and stack[0].startswith(THREAD_PREFIX)
    if flt.thread and (not has_thread or stack[0] != f"{THREAD_PREFIX}{flt.thread}"):
        return None
    if flt.frame and not any(flt.frame in frame for frame in stack):
        return None
    if has_thread and not flt.keeps_thread:
        stack = stack[1:]
    return stack or None


def merge_windows(windows: Iterable[Mapping[str, Any]], flt: FlameFilter) -> Merged:
    """Sum the matching windows' stacks (latest snapshot per process for snapshot types)."""
    chosen = [w for w in windows if _window_matches(w, flt)]
    if flt.profile_type in SNAPSHOT_TYPES:
        chosen = latest_snapshots(chosen)
    merged = Merged(flt.profile_type)
    for window in chosen:
        merged.windows += 1
        merged.samples += int(window.get("samples") or 0)
        merged.dropped += int(window.get("dropped") or 0)
        start, end = int(window["window_start_ns"]), int(window["window_end_ns"])
        merged.first_ns = min(merged.first_ns or start, start)
        merged.last_ns = max(merged.last_ns, end)
        for folded, weight in stack_items(window):
            stack = _keep(split_folded(folded), flt)
            if stack is not None and weight:
                merged.stacks[stack] = merged.stacks.get(stack, 0) + weight
    return merged


@dataclass
class FlameNode:
    """One frame in the tree: `total` = `self` + the children's totals."""

    name: str
    self_value: int = 0
    total: int = 0
    children: dict[str, FlameNode] = field(default_factory=dict)

    def child(self, name: str) -> FlameNode:
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = FlameNode(name)
        return node

    def to_json(self) -> dict[str, Any]:
        """Children sorted by name, so the same stacks always give the same document."""
        return {
            "name": self.name,
            "self": self.self_value,
            "total": self.total,
            "children": [self.children[k].to_json() for k in sorted(self.children)],
        }


def build_tree(stacks: Mapping[Stack, int]) -> FlameNode:
    root = FlameNode(ROOT_NAME)
    for stack, weight in stacks.items():
        node = root
        node.total += weight
        for frame in stack:
            node = node.child(frame)
            node.total += weight
        node.self_value += weight
    return root


def diff_stacks(
    base: Mapping[Stack, int], target: Mapping[Stack, int], normalize: bool = True
) -> dict[Stack, tuple[int, int]]:
    """stack -> (base weight, target weight). With `normalize`, base weights are scaled to the
    target's total, so two ranges of different lengths compare by share, not by duration."""
    base_total, target_total = sum(base.values()), sum(target.values())
    scale = target_total / base_total if normalize and base_total and target_total else 1.0
    out: dict[Stack, tuple[int, int]] = {}
    for stack in base.keys() | target.keys():
        out[stack] = (round(base.get(stack, 0) * scale), target.get(stack, 0))
    return out


def diff_tree(diff: Mapping[Stack, tuple[int, int]]) -> dict[str, Any]:
    """The union tree of both sides: per node self/total of the target, base_self/base_total
    of the base, and delta = total - base_total (positive: grew in the target)."""
    target = build_tree({s: t for s, (_, t) in diff.items()})
    base = build_tree({s: b for s, (b, _) in diff.items()})

    def walk(t: FlameNode, b: FlameNode) -> dict[str, Any]:
        return {
            "name": t.name,
            "self": t.self_value,
            "total": t.total,
            "base_self": b.self_value,
            "base_total": b.total,
            "delta": t.total - b.total,
            "children": [
                walk(t.children[k], b.children.get(k) or FlameNode(k)) for k in sorted(t.children)
            ],
        }

    return walk(target, base)
