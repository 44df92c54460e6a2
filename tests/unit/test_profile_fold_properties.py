"""Properties of the profile fold: weights conserved, windows in order, output independent of
how processes interleave (the faust worker and the embedded loop read partitions in different
orders), byte-identical output for identical input, and GPU memory matching a plain model."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_profile_step import call, encoded, sample
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_profiler_agg.profile_fold import ProfileFold
from zerotrace_profiler_agg.profile_step import ProfileStep
from zerotrace_profiler_agg.settings import ProfilerAggSettings

S = 1_000_000_000
CONF = ProfilerAggSettings(window_ms=10_000, lateness_ms=2_000, quiet_windows=1)

samples_st = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 3]),  # pid
        st.integers(0, 60 * S),  # ts
        st.sampled_from(["ON_CPU", "OFF_CPU"]),
        st.sampled_from(["f", "g", "h"]),
        st.integers(0, 5),
    ),
    max_size=80,
)


def stack_records(rows: list[tuple[int, int, str, str, int]]) -> list[dict[str, Any]]:
    return [
        sample(ts, [f"thread:{pid}", f"py:{fn} (a.py:1)"], w, pid=pid, tid=pid, profile_type=t)
        for pid, ts, t, fn, w in rows
    ]


def fold_all(records: list[dict[str, Any]]) -> tuple[ProfileFold, list[list[dict[str, Any]]]]:
    fold, batches = ProfileFold(CONF), []
    for r in records:
        batches.append(fold.add_gpu(r) if "api" in r else fold.add_stack(r))
    batches.append(fold.flush())
    return fold, batches


@settings(max_examples=150, deadline=None)
@given(samples_st)
def test_weights_and_samples_are_conserved_and_windows_come_in_order(rows: list[Any]) -> None:
    records = stack_records(rows)
    fold, batches = fold_all(records)
    out = [r for batch in batches for r in batch]
    assert sum(r["samples"] + r["dropped"] for r in out) == len(records)
    assert sum(r["dropped"] for r in out) == fold.late_samples
    # The weight of every sample that was not late is in exactly one window.
    folded_weight = sum(sum(r["stacks"].values()) for r in out)
    assert folded_weight <= sum(w for *_, w in rows)
    assert len({r["window_id"] for r in out}) == len(out)
    for batch in batches:
        assert batch == sorted(
            batch, key=lambda r: (r["window_start_ns"], r["service"], r["pid"], r["profile_type"])
        )
    last: dict[tuple[Any, ...], int] = {}
    for r in out:
        key = (r["pid"], r["profile_type"])
        assert r["window_start_ns"] > last.get(key, -1)
        last[key] = r["window_start_ns"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 60 * S)), max_size=80))
def test_in_order_input_loses_nothing(rows: list[tuple[int, int]]) -> None:
    records = stack_records([(pid, ts, "ON_CPU", "f", 3) for pid, ts in sorted(rows)])
    fold, batches = fold_all(records)
    out = [r for batch in batches for r in batch]
    assert fold.late_samples == 0
    assert sum(sum(r["stacks"].values()) for r in out) == 3 * len(rows)


@settings(max_examples=100, deadline=None)
@given(samples_st, st.integers(0, 2**32))
def test_the_interleaving_of_processes_and_topics_does_not_change_the_windows(
    rows: list[Any], seed: int
) -> None:
    gpu = gpu_records([(pid - 6, api, *rest) for pid, api, *rest in GPU_EXAMPLE])
    records = stack_records(rows) + gpu
    # Another shell: each (process, topic)'s records in the same order (a Kafka partition's
    # order), the processes and topics interleaved anyhow.
    queues: dict[tuple[int, bool], list[dict[str, Any]]] = {}
    for r in records:
        queues.setdefault((r["pid"], "api" in r), []).append(r)
    rng, shuffled = random.Random(seed), []
    while any(queues.values()):
        where = rng.choice(sorted(w for w, q in queues.items() if q))
        shuffled.append(queues[where].pop(0))
    key = lambda r: r["window_id"]  # noqa: E731
    first = sorted((r for b in fold_all(records)[1] for r in b), key=key)
    second = sorted((r for b in fold_all(shuffled)[1] for r in b), key=key)
    assert first == second


gpu_ops = st.lists(
    st.tuples(
        st.sampled_from([7, 8]),  # pid
        st.sampled_from(["cudaMalloc", "cuMemAlloc_v2", "cudaFree", "cuMemFree_v2", "launch"]),
        st.integers(1, 8),  # address slot
        st.integers(1, 1000),  # size
        st.integers(0, 3 * S),  # time step
    ),
    max_size=60,
)


GPU_EXAMPLE = [
    (7, "cudaMalloc", 1, 500, S),
    (8, "cudaMalloc", 1, 70, 0),
    (7, "launch", 1, 1, 4 * S),
    (7, "cudaMalloc", 2, 30, 7 * S),
    (8, "cuMemFree_v2", 1, 0, 2 * S),
    (7, "cudaFree", 1, 0, 9 * S),
    (8, "cudaFree", 3, 0, 1 * S),
]


def gpu_records(ops: list[Any]) -> list[dict[str, Any]]:
    out, now = [], 0
    for pid, api, slot, size, step in ops:
        now += step
        if api == "launch":
            out.append(call("cudaLaunchKernel", now, pid=pid, tid=pid))
        else:
            size = size if api in ("cudaMalloc", "cuMemAlloc_v2") else 0
            out.append(call(api, now, slot * 0x100, size, pid=pid, tid=pid))
    return out


@settings(max_examples=150, deadline=None)
@given(gpu_ops)
def test_gpu_memory_matches_a_plain_model(ops: list[Any]) -> None:
    records = gpu_records(ops)
    live: dict[tuple[int, int], int] = {}
    misses = allocated = launches = 0
    for r in records:
        where = (r["pid"], r["address"])
        if r["api"] == "cudaLaunchKernel":
            launches += 1
        elif r["size"]:
            allocated += r["size"]
            live[where] = r["size"]
        elif live.pop(where, None) is None:
            misses += 1
    fold, batches = fold_all(records)
    out = [r for batch in batches for r in batch]
    counters = fold.counters()
    assert sum(sum(r["stacks"].values()) for r in out if r["profile_type"] == "GPU_MEM_ALLOC") == (
        allocated
    )
    assert sum(sum(r["stacks"].values()) for r in out if r["profile_type"] == "GPU_LAUNCH") == (
        launches
    )
    assert counters["gpu_unknown_frees"] + counters["gpu_double_frees"] == misses
    assert counters["live_allocations"] == len(live)
    for pid in (7, 8):
        snapshots = [r for r in out if r["profile_type"] == "GPU_MEM_INUSE" and r["pid"] == pid]
        held = sum(size for (p, _a), size in live.items() if p == pid)
        if held:
            assert sum(snapshots[-1]["stacks"].values()) == held
        elif snapshots:
            assert snapshots[-1]["stacks"] == {}


@settings(max_examples=40, deadline=None)
@given(samples_st, gpu_ops)
def test_the_same_messages_give_byte_identical_output(rows: list[Any], ops: list[Any]) -> None:
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    messages = encoded(codec, stack_records(rows) + gpu_records(ops))
    runs = []
    for _ in range(2):
        step = ProfileStep(codec, CONF)
        produced = [(o.topic, o.key, o.value) for m in messages for o in step.process(m)]
        runs.append(produced + [(o.topic, o.key, o.value) for o in step.flush()])
    assert runs[0] == runs[1]
    assert all(topic == names.DERIVED_PROFILE.name for topic, _k, _v in runs[0])


@settings(max_examples=150, deadline=None)
@given(gpu_ops, samples_st, st.integers(0, 2**32))
def test_disorder_within_the_lateness_changes_nothing(
    ops: list[Any], rows: list[Any], seed: int
) -> None:
    # Distinct times (a tie would leave the order of an allocation and a free open).
    records = gpu_records([(pid, api, slot, size, step + 1) for pid, api, slot, size, step in ops])
    records += stack_records([(pid, ts, t, fn, w) for pid, ts, t, fn, w in rows])

    def at(record: dict[str, Any]) -> int:
        return int(record["end_ns"] if "api" in record else record["ts_ns"])

    in_order = sorted(records, key=at)
    # Arrival times jittered by less than the lateness: no record is late, the order is not
    # event-time order any more.
    rng = random.Random(seed)
    jitter = [at(r) + rng.randrange(CONF.lateness_ms * 10**6 // 2) for r in in_order]
    shuffled = [r for _j, r in sorted(zip(jitter, in_order, strict=True), key=lambda x: x[0])]
    fold, batches = fold_all(shuffled)
    assert fold.late_samples == 0 and fold.gpu.counters.late == 0
    key = lambda r: r["window_id"]  # noqa: E731
    assert sorted((r for b in batches for r in b), key=key) == sorted(
        (r for b in fold_all(in_order)[1] for r in b), key=key
    )
