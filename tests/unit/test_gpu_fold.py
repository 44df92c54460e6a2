"""The raw.gpu fold on its own: which calls count, event time at return, the cuda leaf,
snapshots per service, quiet windows, losses in `dropped`, idle and forget, and properties
(series independence, determinism, unique windows, records that fit derived.profile)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_profiler_agg.gpu_fold import (
    ALLOC,
    ALLOC_APIS,
    FREE_APIS,
    INUSE,
    LAUNCH,
    LAUNCH_APIS,
    GpuFold,
)
from zerotrace_profiler_agg.gpu_memory import LiveAllocations
from zerotrace_profiler_agg.windows import Series, Windows

pytestmark = pytest.mark.unit

S = 1_000_000_000
WIDTH, LATENESS = 10 * S, 2 * S
LOAD = "py:load (/srv/model.py:3)"


def call(
    api: str,
    ts: int,
    address: int = 0,
    size: int = 0,
    *,
    pid: int = 7,
    tid: int | None = None,
    name: str = "train",
    result: int = 0,
    frames: list[str] | None = None,
    start: int | None = None,
) -> dict[str, Any]:
    """A raw.gpu datum (zerotrace.raw.GpuApiEvent)."""
    tid = pid if tid is None else tid
    return {
        "event_id": f"g-{pid}-{api}-{ts}",
        "node_id": "n",
        "pid": pid,
        "tid": tid,
        "process_name": name,
        "container_id": None,
        "api": api,
        "start_ns": ts - 1_000 if start is None else start,
        "end_ns": ts,
        "address": address,
        "size": size,
        "result": result,
        "stack_id": None,
        "frames": [f"thread:{tid}", LOAD] if frames is None else frames,
    }


def series(pid: int = 7) -> Series:
    return ("n", pid, "gpu")


def make(quiet_windows: int = 1, table: LiveAllocations | None = None) -> GpuFold:
    table = LiveAllocations(1_000) if table is None else table
    return GpuFold(Windows(WIDTH, LATENESS), table, quiet_windows)


def run(fold: GpuFold, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for c in calls:
        out += fold.add(c)
    for pid in sorted({c["pid"] for c in calls}):
        out += fold.flush(series(pid))
    return out


def of(out: list[dict[str, Any]], profile_type: str, pid: int = 7) -> list[dict[str, Any]]:
    found = [r for r in out if r["profile_type"] == profile_type and r["pid"] == pid]
    return sorted(found, key=lambda r: (r["window_start_ns"], r["service"]))


def total(record: dict[str, Any]) -> int:
    return sum(record["stacks"].values())


# Which calls count, and how.


@pytest.mark.parametrize("api", sorted(ALLOC_APIS))
def test_every_allocation_api_weighs_its_size(api: str) -> None:
    fold = make()
    out = run(fold, [call(api, 1 * S, 0xA000, 300), call(api, 2 * S, 0xB000, 12)])
    [alloc] = of(out, ALLOC)
    assert alloc["stacks"] == {f"thread:7;{LOAD};cuda:{api}": 312} and alloc["samples"] == 2
    assert total(of(out, INUSE)[0]) == 312


@pytest.mark.parametrize("api", sorted(LAUNCH_APIS))
def test_every_launch_api_weighs_one_and_holds_no_memory(api: str) -> None:
    fold = make()
    out = run(fold, [call(api, 1 * S), call(api, 2 * S), call(api, 3 * S)])
    [launch] = of(out, LAUNCH)
    assert launch["stacks"] == {f"thread:7;{LOAD};cuda:{api}": 3}
    assert of(out, INUSE) == [] and of(out, ALLOC) == []


@pytest.mark.parametrize("api", sorted(FREE_APIS))
def test_every_free_api_frees(api: str) -> None:
    fold = make()
    out = run(fold, [call("cudaMalloc", 1 * S, 0xA000, 64), call(api, 2 * S, 0xA000)])
    [snapshot] = of(out, INUSE)
    assert snapshot["stacks"] == {} and snapshot["dropped"] == 0
    assert fold.counters.unknown_frees == fold.counters.double_frees == 0


def test_calls_this_fold_does_not_take_are_counted_and_ignored() -> None:
    fold = make()
    out = run(fold, [call("cudaMemcpy", 1 * S, 0xA000, 64), call("cudaStreamSync", 2 * S)])
    assert fold.counters.other_apis == 2 and fold.counters.calls == 2
    assert [r for r in out if r["stacks"]] == []


def test_a_failed_call_changes_nothing() -> None:
    fold = make()
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 64),
            call("cudaMalloc", 2 * S, 0xB000, 1 << 40, result=2),  # out of memory
            call("cudaLaunchKernel", 3 * S, result=98),  # invalid device function
            call("cudaFree", 4 * S, 0xA000, result=1),  # refused: 0xA000 stays allocated
        ],
    )
    assert fold.counters.failed_calls == 3 and fold.counters.calls == 4
    [alloc] = of(out, ALLOC)
    assert total(alloc) == 64 and alloc["samples"] == 1
    assert of(out, LAUNCH) == []
    assert total(of(out, INUSE)[0]) == 64


def test_cuda_free_of_null_is_a_no_op() -> None:
    fold = make()
    out = run(fold, [call("cudaFree", 1 * S, 0)])
    assert fold.counters.unknown_frees == 0 and fold.counters.failed_calls == 0
    assert out == []


def test_event_time_is_the_return_of_the_call() -> None:
    # Started in window 0, returned in window 1: the memory exists from window 1 on.
    out = run(make(), [call("cudaMalloc", 10 * S + 5, 0xA000, 64, start=9 * S)])
    [alloc] = of(out, ALLOC)
    assert alloc["window_start_ns"] == 10 * S
    assert of(out, INUSE)[0]["window_start_ns"] == 10 * S


@pytest.mark.parametrize(
    ("frames", "stack"),
    [
        (["thread:7", LOAD], f"thread:7;{LOAD};cuda:cudaMalloc"),  # the leaf is added
        (["thread:7", LOAD, "cuda:cudaMalloc"], f"thread:7;{LOAD};cuda:cudaMalloc"),  # once
        ([], "thread:7;cuda:cudaMalloc"),  # no frames: still its thread
        (["thread:7", "py:a;b (x.py:1)"], "thread:7;py:a:b (x.py:1);cuda:cudaMalloc"),
    ],
)
def test_stacks_end_in_their_cuda_leaf(frames: list[str], stack: str) -> None:
    out = run(make(), [call("cudaMalloc", 1 * S, 0xA000, 64, frames=frames)])
    assert of(out, ALLOC)[0]["stacks"] == {stack: 64}
    assert of(out, INUSE)[0]["stacks"] == {stack: 64}


# Snapshots.


def test_each_service_of_a_process_gets_its_own_snapshot() -> None:
    # A worker thread named otherwise is not a new program: only the main thread tells that.
    out = run(
        make(),
        [
            call("cudaMalloc", 1 * S, 0xA000, 100),
            call("cudaMalloc", 2 * S, 0xB000, 10, tid=8, name="pt_worker"),
            call("cudaMalloc", 3 * S, 0xC000, 20, tid=8, name="pt_worker"),
        ],
    )
    first = [r for r in of(out, INUSE) if r["window_start_ns"] == 0]
    assert [(r["service"], total(r), r["samples"]) for r in first] == [
        ("pt_worker", 30, 2),
        ("train", 100, 1),
    ]


@pytest.mark.parametrize("quiet", [0, 1, 3])
def test_an_idle_process_shows_its_memory_for_the_quiet_windows(quiet: int) -> None:
    out = run(make(quiet_windows=quiet), [call("cudaMalloc", 1 * S, 0xA000, 64)])
    starts = [r["window_start_ns"] for r in of(out, INUSE)]
    assert starts == [i * WIDTH for i in range(quiet + 1)]
    assert all(total(r) == 64 for r in of(out, INUSE))


def test_memory_back_to_zero_gets_one_empty_snapshot_then_none() -> None:
    out = run(
        make(quiet_windows=3),
        [call("cudaMalloc", 1 * S, 0xA000, 64), call("cudaFree", 15 * S, 0xA000)],
    )
    assert [(r["window_start_ns"], total(r)) for r in of(out, INUSE)] == [(0, 64), (WIDTH, 0)]


def test_disorder_within_the_lateness_is_put_back_in_event_time_order() -> None:
    fold = make()
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 64),
            call("cudaMalloc", 11 * S, 0xB000, 8),
            call("cudaFree", 9 * S, 0xA000),  # arrives late, within the lateness
        ],
    )
    assert [(r["window_start_ns"], total(r)) for r in of(out, INUSE)][:2] == [(0, 0), (WIDTH, 8)]
    assert fold.counters.late == 0


def test_snapshots_come_as_the_watermark_passes_not_before() -> None:
    fold = make()
    assert fold.add(call("cudaMalloc", 1 * S, 0xA000, 64)) == []
    assert fold.add(call("cudaLaunchKernel", 11 * S)) == []  # 11 < 0 + 10 + 2: still open
    done = fold.add(call("cudaLaunchKernel", 12 * S))
    assert sorted(r["profile_type"] for r in done) == [ALLOC, INUSE]
    assert fold.advance(series()) == []  # nothing more until the watermark moves


# Losses, counted where the data is read.


def test_an_allocation_of_a_live_address_replaces_it_and_counts_the_lost_free() -> None:
    fold = make(quiet_windows=0)
    out = run(fold, [call("cudaMalloc", 1 * S, 0xA000, 64), call("cudaMalloc", 2 * S, 0xA000, 8)])
    assert fold.counters.replaced == 1 and fold.counters.evicted == 0
    [snapshot] = of(out, INUSE)
    assert (total(snapshot), snapshot["samples"], snapshot["dropped"]) == (8, 1, 1)


def test_an_eviction_by_another_process_shows_in_the_losers_dropped() -> None:
    table = LiveAllocations(capacity=1)
    fold = make(table=table)
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 64, pid=7),
            call("cudaMalloc", 2 * S, 0xB000, 32, pid=8),
            call("cudaLaunchKernel", 13 * S, pid=8),
            call("cudaLaunchKernel", 13 * S, pid=7),
        ],
    )
    assert fold.counters.evicted == 1
    losers = [r for r in out if r["profile_type"] == INUSE and r["dropped"]]
    [loser] = losers
    assert loser["dropped"] == 1 and loser["stacks"] == {}
    # Which one lost depends on the order the series were read in (gpu_memory.py); the table
    # holds the other one, and the loser's memory is no longer shown.
    assert [a.pid for a in table.live("n", 7) + table.live("n", 8)] == [15 - loser["pid"]]


def test_unknown_and_double_frees_are_counted_in_the_window_they_happened() -> None:
    fold = make()
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 64),
            call("cudaFree", 2 * S, 0xA000),
            call("cudaFree", 3 * S, 0xA000),  # double
            call("cuMemFree_v2", 14 * S, 0xDEAD),  # never seen allocated
        ],
    )
    assert (fold.counters.double_frees, fold.counters.unknown_frees) == (1, 1)
    assert [(r["window_start_ns"], r["dropped"]) for r in of(out, INUSE)] == [(0, 1), (WIDTH, 1)]


def test_a_new_program_under_the_pid_forgets_the_old_ones_memory() -> None:
    fold = make()
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 64),
            call("cudaMalloc", 2 * S, 0xB000, 64),
            call("cudaMalloc", 15 * S, 0xC000, 8, name="infer"),  # exec'd: another name
        ],
    )
    assert fold.counters.reused_pids == 1 and fold.counters.forgotten == 2
    old = {r["window_start_ns"]: r for r in of(out, INUSE) if r["service"] == "train"}
    assert total(old[0]) == 128 and old[WIDTH]["stacks"] == {} and old[WIDTH]["dropped"] == 2
    new = [r for r in of(out, INUSE) if r["service"] == "infer"]
    assert total(new[0]) == 8 and new[0]["dropped"] == 0


def test_a_late_allocation_is_counted_and_still_held() -> None:
    fold = make(quiet_windows=2)
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 64),
            call("cudaLaunchKernel", 25 * S),  # closes windows 0 and 10
            call("cudaMalloc", 5 * S, 0xB000, 8),  # too late for window 0
        ],
    )
    assert fold.counters.late == 1
    allocs = of(out, ALLOC)
    assert [(r["window_start_ns"], total(r), r["dropped"]) for r in allocs] == [
        (0, 64, 0),
        (2 * WIDTH, 0, 1),  # counted in the window that holds the watermark
    ]
    assert total(of(out, INUSE)[-1]) == 72  # the memory exists all the same


# Idle and forget.


def test_a_series_is_idle_only_with_nothing_left_to_say() -> None:
    fold = make()
    assert fold.idle(series(99)) and fold.advance(series(99)) == []
    fold.add(call("cudaMalloc", 1 * S, 0xA000, 64))
    assert not fold.idle(series())  # a window open, a call buffered
    fold.flush(series())
    assert not fold.idle(series())  # still holds memory: a free may come
    fold.add(call("cudaFree", 30 * S, 0xA000))
    fold.flush(series())
    assert fold.idle(series())


def test_a_forgotten_process_seen_again_makes_no_second_window() -> None:
    windows = Windows(WIDTH, LATENESS)
    fold = GpuFold(windows, LiveAllocations(1_000), quiet_windows=1)
    first = fold.add(call("cudaMalloc", 1 * S, 0xA000, 64))
    first += fold.add(call("cudaFree", 2 * S, 0xA000))
    # The shell's clock says the input went quiet (profile_fold's tick): everything closes.
    windows.raise_mark(series(), 100 * S)
    first += fold.advance(series())
    assert fold.idle(series())
    fold.forget(series())
    # Records for windows already out are late now, not the start of a second window 0.
    again = fold.add(call("cudaMalloc", 3 * S, 0xB000, 8))
    again += fold.add(call("cudaLaunchKernel", 4 * S))
    again += fold.flush(series())
    ids = [r["window_id"] for r in first + again]
    assert len(ids) == len(set(ids))
    # Only windows the watermark had not closed yet (the late allocation is held all the same).
    assert min(r["window_start_ns"] for r in again) == windows.start_of(100 * S - LATENESS)
    assert fold.counters.late == 2 and sum(r["dropped"] for r in again) == 2


# Properties.

ops = st.lists(
    st.tuples(
        st.sampled_from([7, 8]),  # pid
        st.sampled_from(["cudaMalloc", "cuMemAlloc_v2", "cudaFree", "launch", "cudaMemcpy"]),
        st.integers(1, 6),  # address slot
        st.integers(1, 1_000),  # size
        st.integers(0, 4 * S),  # time step
        st.sampled_from([0, 0, 0, 2]),  # result
    ),
    max_size=50,
)


def calls_of(rows: list[tuple[int, str, int, int, int, int]]) -> list[dict[str, Any]]:
    out, now = [], 0
    for pid, api, slot, size, step, result in rows:
        now += step
        name = "cudaLaunchKernel" if api == "launch" else api
        size = size if api in ALLOC_APIS else 0
        out.append(call(name, now, slot * 0x100, size, pid=pid, result=result))
    return out


@settings(max_examples=150, deadline=None)
@given(ops)
def test_a_process_does_not_see_the_others_records(rows: list[Any]) -> None:
    both = calls_of(rows)
    alone = [c for c in both if c["pid"] == 7]
    assert of(run(make(), both), INUSE) == of(run(make(), alone), INUSE)
    assert sorted(
        (r for r in run(make(), both) if r["pid"] == 7), key=lambda r: r["window_id"]
    ) == sorted(run(make(), alone), key=lambda r: r["window_id"])


CODEC = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())


@settings(max_examples=150, deadline=None)
@given(ops)
def test_the_same_calls_give_the_same_records_each_once(rows: list[Any]) -> None:
    calls = calls_of(rows)
    table = LiveAllocations(1_000)
    fold = make(table=table)
    out = run(fold, calls)
    assert out == run(make(), calls)
    assert len({r["window_id"] for r in out}) == len(out)
    assert fold.counters.calls == len(calls)
    for pid in (7, 8):
        # The last snapshot shows what is still held at the end.
        held = sum(a.size for a in table.live("n", pid))
        if held:
            assert total(of(out, INUSE, pid)[-1]) == held
    for r in out:
        assert r["samples"] >= len(r["stacks"]) and (total(r) > 0) == (r["samples"] > 0)
        record = names.DERIVED_PROFILE.record
        assert CODEC.decode(CODEC.encode(record, r)) == (record, r)
