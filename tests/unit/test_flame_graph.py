"""Merging profile windows into flame graphs: filters, thread frames, snapshot semantics of
GPU_MEM_INUSE, self/total arithmetic, and diffs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.profile_data import (
    PY_FORWARD,
    PY_HANDLE,
    PY_HOT,
    PY_MAIN,
    PY_SERVE,
    WINDOW_NS,
    WINDOW_STACKS,
    inuse_stacks,
    realistic_windows,
)
from zerotrace_query.flame_graph import (
    FlameFilter,
    FlameNode,
    Stack,
    build_tree,
    diff_stacks,
    diff_tree,
    merge_windows,
    split_folded,
)

T0 = 1_700_000_000_000_000_000
WINDOWS = realistic_windows(T0, 6)
ON_CPU_PER_WINDOW = sum(WINDOW_STACKS["ON_CPU"].values())


def test_on_cpu_sums_every_window_of_every_process() -> None:
    merged = merge_windows(WINDOWS, FlameFilter("ON_CPU"))
    # node-a at full weight, node-b at half, six windows each.
    assert merged.total == 6 * ON_CPU_PER_WINDOW + 6 * ON_CPU_PER_WINDOW // 2
    assert merged.windows == 12
    assert (merged.first_ns, merged.last_ns) == (T0, T0 + 6 * WINDOW_NS)
    assert merged.unit == "count"
    # Threads merged: no stack starts with a thread frame.
    assert not any(stack[0].startswith("thread:") for stack in merged.stacks)
    hot = (PY_MAIN, PY_SERVE, PY_HANDLE, PY_HOT)
    assert merged.stacks[hot] == 6 * 700 + 6 * 350


def test_filters_node_service_pid_and_time_range() -> None:
    only_a = merge_windows(WINDOWS, FlameFilter("ON_CPU", node="node-a"))
    assert only_a.total == 6 * ON_CPU_PER_WINDOW
    assert merge_windows(WINDOWS, FlameFilter("ON_CPU", service="trainer")).windows == 6
    assert merge_windows(WINDOWS, FlameFilter("ON_CPU", pid=5151)).total == 3 * ON_CPU_PER_WINDOW
    assert merge_windows(WINDOWS, FlameFilter("ON_CPU", pid=1)).total == 0
    # [from, to) overlapping windows 2 and 3 (a window partly inside counts whole).
    ranged = FlameFilter(
        "ON_CPU", node="node-a", start_ns_from=T0 + 2 * WINDOW_NS + 1, start_ns_to=T0 + 35 * 10**9
    )
    merged = merge_windows(WINDOWS, ranged)
    assert merged.windows == 2 and merged.total == 2 * ON_CPU_PER_WINDOW


def test_thread_filter_keeps_one_thread_and_its_frame() -> None:
    merged = merge_windows(WINDOWS, FlameFilter("ON_CPU", node="node-a", thread=102))
    assert set(merged.stacks) == {
        ("thread:102", PY_FORWARD, "native:_PyEval_EvalFrameDefault [python3.11]")
    }
    assert merged.total == 6 * 160
    by_thread = merge_windows(WINDOWS, FlameFilter("ON_CPU", node="node-a", by_thread=True))
    roots = build_tree(by_thread.stacks).children
    assert {name: node.total for name, node in roots.items()} == {
        "thread:101": 6 * 830,
        "thread:102": 6 * 160,
        "thread:103": 6 * 10,
    }


def test_frame_substring_keeps_stacks_through_that_frame() -> None:
    merged = merge_windows(WINDOWS, FlameFilter("ON_CPU", node="node-a", frame="hot_loop"))
    assert merged.total == 6 * (700 + 90)
    assert all(any("hot_loop" in f for f in stack) for stack in merged.stacks)


def test_gpu_mem_inuse_takes_the_latest_snapshot_per_process() -> None:
    merged = merge_windows(WINDOWS, FlameFilter("GPU_MEM_INUSE"))
    last = inuse_stacks(5)
    expected = sum(last.values()) + sum(v // 2 for v in last.values())
    assert merged.total == expected  # not six snapshots summed
    assert merged.windows == 2
    # The range picks the snapshot at its own end.
    early = merge_windows(
        WINDOWS, FlameFilter("GPU_MEM_INUSE", node="node-a", start_ns_to=T0 + 2 * WINDOW_NS)
    )
    assert early.total == sum(inuse_stacks(1).values())
    # Allocations, unlike snapshots, sum.
    alloc = merge_windows(WINDOWS, FlameFilter("GPU_MEM_ALLOC", node="node-a"))
    assert alloc.total == 6 * sum(WINDOW_STACKS["GPU_MEM_ALLOC"].values())
    assert alloc.unit == "bytes"


def test_memory_in_use_of_a_range_after_the_last_snapshot_is_that_snapshot() -> None:
    # The process allocated, then went quiet on the GPU API: its memory is still held.
    later = T0 + 20 * WINDOW_NS
    quiet = FlameFilter(
        "GPU_MEM_INUSE", node="node-a", start_ns_from=later, start_ns_to=later + WINDOW_NS
    )
    assert merge_windows(WINDOWS, quiet).total == sum(inuse_stacks(5).values())
    # Counters do not look back.
    cpu = FlameFilter("ON_CPU", node="node-a", start_ns_from=later, start_ns_to=later + WINDOW_NS)
    assert merge_windows(WINDOWS, cpu).total == 0


def test_tree_self_and_total() -> None:
    root = build_tree({("a", "b"): 5, ("a",): 2, ("a", "c", "d"): 3, ("e",): 1})
    doc = root.to_json()
    assert doc["total"] == 11 and doc["self"] == 0
    a = doc["children"][0]
    assert (a["name"], a["self"], a["total"]) == ("a", 2, 10)
    assert [(c["name"], c["self"], c["total"]) for c in a["children"]] == [
        ("b", 5, 5),
        ("c", 0, 3),
    ]


def _check(node: FlameNode) -> None:
    assert node.total == node.self_value + sum(c.total for c in node.children.values())
    for child in node.children.values():
        _check(child)


@given(
    st.dictionaries(
        st.lists(st.sampled_from("abcdef"), min_size=1, max_size=6).map(tuple),
        st.integers(0, 10**12),
        max_size=30,
    )
)
def test_every_node_total_is_self_plus_children(stacks: dict[tuple[str, ...], int]) -> None:
    root = build_tree(stacks)
    _check(root)
    assert root.total == sum(stacks.values())


def test_diff_scales_the_base_and_shows_growth() -> None:
    base: dict[Stack, int] = {("a", "b"): 10, ("a", "c"): 10}
    target: dict[Stack, int] = {("a", "b"): 30, ("a", "c"): 10, ("a", "d"): 0}
    diff = diff_stacks(base, target, normalize=False)
    tree = diff_tree(diff)
    a = tree["children"][0]
    b, c, d = a["children"]
    assert (b["base_total"], b["total"], b["delta"]) == (10, 30, 20)
    assert (c["delta"], d["delta"]) == (0, 0)
    scaled = diff_tree(diff_stacks(base, target))  # base 20 scaled to the target's 40
    sb, sc, _ = scaled["children"][0]["children"]
    assert (sb["base_total"], sb["delta"]) == (20, 10)
    assert (sc["base_total"], sc["delta"]) == (20, -10)


def test_diff_keeps_stacks_only_in_the_base() -> None:
    gone: dict[Stack, int] = {("x", "gone"): 4}
    new: dict[Stack, int] = {("x", "new"): 4}
    tree = diff_tree(diff_stacks(gone, new))
    names: dict[str, Any] = {c["name"]: c for c in tree["children"][0]["children"]}
    assert names["gone"]["total"] == 0 and names["gone"]["delta"] == -4
    assert names["new"]["base_total"] == 0 and names["new"]["delta"] == 4


def test_bad_filters_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="'type'"):
        FlameFilter("CPU").check()
    with pytest.raises(ValueError, match="'to' must be after"):
        FlameFilter(start_ns_from=5, start_ns_to=5).check()
    assert split_folded("") == ()
