"""The profiler-agg fold and step: CPU windows, GPU memory snapshots, bad input, determinism."""

from __future__ import annotations

from typing import Any

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec
from zerotrace_profiler_agg.profile_fold import ProfileFold
from zerotrace_profiler_agg.profile_step import ProfileStep
from zerotrace_profiler_agg.settings import ProfilerAggSettings

S = 1_000_000_000
MB = 1 << 20
SETTINGS = ProfilerAggSettings(window_ms=10_000, lateness_ms=2_000, quiet_windows=2)
LOAD = "py:Model.load (/srv/model.py:31)"
FORWARD = "py:Model.forward (/srv/model.py:57)"


def sample(ts: int, frames: list[str], weight: int = 1, **over: Any) -> dict[str, Any]:
    datum = {
        "event_id": f"s-{ts}-{weight}",
        "node_id": "n",
        "pid": 100,
        "tid": 100,
        "process_name": "server",
        "container_id": None,
        "ts_ns": ts,
        "profile_type": "ON_CPU",
        "weight": weight,
        "frames": frames,
    }
    return datum | over


def call(api: str, ts: int, address: int = 0, size: int = 0, **over: Any) -> dict[str, Any]:
    frames = ["thread:100", LOAD if "Malloc" in api or "Alloc" in api else FORWARD]
    datum = {
        "event_id": f"g-{api}-{ts}",
        "node_id": "n",
        "pid": 100,
        "tid": 100,
        "process_name": "train",
        "container_id": None,
        "api": api,
        "start_ns": ts - 1000,
        "end_ns": ts,
        "address": address,
        "size": size,
        "result": 0,
        "stack_id": None,
        "frames": [*frames, f"cuda:{api}"],
    }
    return datum | over


def run(fold: ProfileFold, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in records:
        out += fold.add_gpu(r) if "api" in r else fold.add_stack(r)
    return out + fold.flush()


def by_type(out: list[dict[str, Any]], profile_type: str) -> list[dict[str, Any]]:
    return [r for r in out if r["profile_type"] == profile_type]


def test_cpu_windows_per_pid_and_type() -> None:
    out = run(
        ProfileFold(SETTINGS),
        [
            sample(1 * S, ["thread:100", "py:hot_loop (a.py:3)"]),
            sample(2 * S, ["thread:100", "py:hot_loop (a.py:3)"]),
            sample(3 * S, ["thread:100", "py:wait (a.py:9)"], 2 * S, profile_type="OFF_CPU"),
            sample(4 * S, ["thread:201", "native:f [x.so]"], pid=200, tid=201),
            sample(13 * S, ["thread:100", "py:hot_loop (a.py:3)"]),
        ],
    )
    assert [(r["pid"], r["profile_type"], r["window_start_ns"]) for r in out] == [
        (100, "OFF_CPU", 0),
        (100, "ON_CPU", 0),
        (200, "ON_CPU", 0),
        (100, "ON_CPU", 10 * S),
    ]
    assert out[0]["stacks"] == {"thread:100;py:wait (a.py:9)": 2 * S}
    assert out[1]["stacks"] == {"thread:100;py:hot_loop (a.py:3)": 2} and out[1]["samples"] == 2


def test_gpu_alloc_inuse_and_launch_are_exact_after_a_partial_free() -> None:
    fold = ProfileFold(SETTINGS)
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 300 * MB),
            call("cudaMalloc", 2 * S, 0xB000, 200 * MB),
            call("cudaLaunchKernel", 3 * S),
            call("cudaLaunchKernel", 4 * S),
            call("cudaFree", 5 * S, 0xA000),
            call("cudaMalloc", 12 * S, 0xC000, 7 * MB, frames=["thread:100", FORWARD]),
        ],
    )
    load = f"thread:100;{LOAD};cuda:cudaMalloc"
    [alloc0, alloc1] = by_type(out, "GPU_MEM_ALLOC")
    assert alloc0["stacks"] == {load: 500 * MB} and alloc0["samples"] == 2
    # A stack without its cuda leaf gets it (the frame format's promise).
    assert alloc1["stacks"] == {f"thread:100;{FORWARD};cuda:cudaMalloc": 7 * MB}
    [launch] = by_type(out, "GPU_LAUNCH")
    assert launch["stacks"] == {f"thread:100;{FORWARD};cuda:cudaLaunchKernel": 2}
    inuse = by_type(out, "GPU_MEM_INUSE")
    # One snapshot per window end while memory is held, up to quiet_windows after the last call.
    assert [r["window_start_ns"] for r in inuse] == [0, 10 * S, 20 * S, 30 * S]
    assert inuse[0]["stacks"] == {load: 200 * MB} and inuse[0]["samples"] == 1
    assert inuse[1]["stacks"][load] == 200 * MB and sum(inuse[1]["stacks"].values()) == 207 * MB
    assert inuse[3] == inuse[1] | {
        "window_id": "n/train/100/GPU_MEM_INUSE/30000000000",
        "window_start_ns": 30 * S,
        "window_end_ns": 40 * S,
    }
    assert all(r["dropped"] == 0 for r in out)


def test_inuse_snapshot_is_taken_in_event_time_order_within_the_lateness() -> None:
    # The free (t=9) arrives after an allocation of the next window (t=11): the snapshot at
    # t=10 must still see it freed, and the one at 20 must hold the t=11 allocation.
    out = run(
        ProfileFold(SETTINGS),
        [
            call("cudaMalloc", 1 * S, 0xA000, 64),
            call("cudaMalloc", 11 * S, 0xB000, 32),
            call("cudaFree", 9 * S, 0xA000),
        ],
    )
    inuse = by_type(out, "GPU_MEM_INUSE")
    assert [(r["window_start_ns"], sum(r["stacks"].values())) for r in inuse][:2] == [
        (0, 0),
        (10 * S, 32),
    ]


def test_bad_gpu_input_is_counted_and_changes_nothing() -> None:
    fold = ProfileFold(SETTINGS)
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 64),
            call("cudaMalloc", 2 * S, 0xB000, 64, result=2),  # out of memory: nothing allocated
            call("cudaFree", 3 * S, 0),  # cudaFree(NULL): a no-op
            call("cudaFree", 4 * S, 0xA000),
            call("cudaFree", 5 * S, 0xA000),  # double free
            call("cuMemFree_v2", 6 * S, 0xDEAD),  # never allocated
            call("cudaMemcpy", 7 * S),  # not a call this fold takes
        ],
    )
    c = fold.counters()
    assert (c["gpu_failed_calls"], c["gpu_double_frees"], c["gpu_unknown_frees"]) == (1, 1, 1)
    assert c["gpu_other_apis"] == 1 and c["live_allocations"] == 0
    [alloc] = by_type(out, "GPU_MEM_ALLOC")
    assert alloc["stacks"] == {f"thread:100;{LOAD};cuda:cudaMalloc": 64}
    [inuse] = by_type(out, "GPU_MEM_INUSE")
    assert inuse["stacks"] == {} and inuse["dropped"] == 2  # memory back to zero, two misses


def test_a_reused_pid_does_not_inherit_allocations() -> None:
    fold = ProfileFold(SETTINGS)
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 64),
            # A new program under the same pid (its main thread has another name).
            call("cudaMalloc", 15 * S, 0xB000, 8, process_name="infer"),
        ],
    )
    assert fold.counters()["gpu_reused_pids"] == 1
    inuse = {(r["service"], r["window_start_ns"]): r for r in by_type(out, "GPU_MEM_INUSE")}
    assert sum(inuse[("train", 0)]["stacks"].values()) == 64
    assert inuse[("train", 10 * S)]["stacks"] == {} and inuse[("train", 10 * S)]["dropped"] == 1
    assert sum(inuse[("infer", 10 * S)]["stacks"].values()) == 8


def test_evictions_from_the_bounded_table_are_counted_in_dropped() -> None:
    fold = ProfileFold(ProfilerAggSettings(live_allocations=2, quiet_windows=0))
    out = run(fold, [call("cudaMalloc", (1 + i) * S, 0x1000 * (i + 1), 10) for i in range(3)])
    assert fold.counters()["gpu_evicted"] == 1
    [inuse] = by_type(out, "GPU_MEM_INUSE")
    assert (sum(inuse["stacks"].values()), inuse["samples"], inuse["dropped"]) == (20, 2, 1)


def test_late_samples_are_counted_not_folded() -> None:
    fold = ProfileFold(SETTINGS)
    out = run(fold, [sample(1 * S, ["a"]), sample(25 * S, ["b"]), sample(2 * S, ["c"])])
    assert fold.late_samples == 1
    assert [(r["window_start_ns"], r["samples"], r["dropped"]) for r in out] == [
        (0, 1, 0),
        (20 * S, 1, 1),
    ]


def test_tick_closes_quiet_input_only() -> None:
    fold = ProfileFold(SETTINGS)
    fold.add_stack(sample(1 * S, ["a"]))
    assert fold.tick(100 * S) == []  # input came since the last tick: its times rule
    [closed] = fold.tick(100 * S)
    assert closed["window_start_ns"] == 0
    assert fold.flush() == []


def encoded(codec: AvroCodec, records: list[dict[str, Any]]) -> list[Message]:
    out = []
    for i, r in enumerate(records):
        topic = names.RAW_GPU if "api" in r else names.RAW_STACK
        out.append(Message(topic.name, 0, i, b"100", codec.encode(topic.record, r), 1000 + i))
    return out


def test_poison_goes_to_dead_letters_with_its_reason(codec: AvroCodec) -> None:
    step = ProfileStep(codec, SETTINGS)
    good = encoded(codec, [sample(1 * S, ["a"])])[0]
    bad = [
        Message(names.RAW_STACK.name, 0, 1, None, b"junk", 5),
        Message(
            names.RAW_STACK.name,
            0,
            2,
            None,
            codec.encode(
                names.DERIVED_PROFILE.record,
                {
                    "window_id": "x",
                    "node_id": "n",
                    "service": "s",
                    "profile_type": "ON_CPU",
                    "window_start_ns": 0,
                    "window_end_ns": 1,
                    "stacks": {},
                    "samples": 0,
                },
            ),
            6,
        ),
        encoded(codec, [sample(2 * S, ["a"], profile_type="GPU_MEM_INUSE")])[0],
        encoded(codec, [sample(3 * S, ["a"], weight=-1)])[0],
    ]
    assert step.process(good) == []
    reasons = []
    for message in bad:
        [out] = step.process(message)
        assert out.topic == names.DEAD_LETTER.name
        _record, letter = codec.decode(out.value)
        assert letter["value"] == message.value and letter["ts_ns"] == message.timestamp_ms * 10**6
        reasons.append(letter["reason"])
    assert "not an Avro" in reasons[0] and "profiler-agg does not take" in reasons[1]
    assert "GPU_MEM_INUSE" in reasons[2] and "negative" in reasons[3]
    assert step.counters()["dead_letters"] == 4
    [window] = step.flush()
    assert codec.decode(window.value)[1]["samples"] == 1  # the good one, untouched by the rest


def test_a_late_free_is_applied_and_counted() -> None:
    fold = ProfileFold(SETTINGS)
    out = run(
        fold,
        [
            call("cudaMalloc", 1 * S, 0xA000, 64),
            call("cudaMalloc", 25 * S, 0xB000, 8),  # closes windows 0 and 10
            call("cudaFree", 5 * S, 0xA000),  # too late for them: still frees 0xA000
        ],
    )
    assert fold.counters()["gpu_late"] == 1
    inuse = {r["window_start_ns"]: r for r in by_type(out, "GPU_MEM_INUSE")}
    assert sum(inuse[0]["stacks"].values()) == 64  # as emitted before the free came
    assert sum(inuse[20 * S]["stacks"].values()) == 8 and inuse[20 * S]["dropped"] == 1


def test_a_process_seen_again_after_a_tick_makes_no_second_window() -> None:
    fold = ProfileFold(SETTINGS)
    first = fold.add_gpu(call("cudaMalloc", 1 * S, 0xA000, 64))
    first += fold.add_gpu(call("cudaFree", 2 * S, 0xA000))
    fold.tick(100 * S)
    first += fold.tick(100 * S)  # quiet: closes everything, the process is forgotten
    again = fold.add_gpu(call("cudaMalloc", 3 * S, 0xB000, 8))  # its windows are out already
    again += fold.add_gpu(call("cudaLaunchKernel", 4 * S))
    again += fold.flush()
    ids = [r["window_id"] for r in first + again]
    assert len(ids) == len(set(ids))
    assert fold.counters()["gpu_late"] == 2
    assert sum(r["dropped"] for r in again) == 2


def test_tick_closes_a_quiet_process_while_others_keep_sending() -> None:
    fold = ProfileFold(SETTINGS)
    fold.add_stack(sample(1 * S, ["a"], pid=7), source=("raw.stack", 0))
    closed = fold.tick(1000 * S)  # everyone sent since the last tick: nothing moves
    for t in range(2, 31):
        fold.add_stack(sample(t * S, ["b"], pid=8), source=("raw.stack", 0))
        closed += fold.tick(1000 * S)
    # pid 7 closed by the input's own time (17 s - 5 s lag reached 0 + 10 s + 2 s), not by the
    # clock; then forgotten, so later ticks leave it alone. pid 8 closes by its own records.
    assert [(r["pid"], r["window_start_ns"]) for r in closed] == [(7, 0)]
    assert fold.windows.mark(("n", 7, "stack")) == 12 * S


def test_tick_does_not_push_a_process_past_a_lagging_partition() -> None:
    fold = ProfileFold(SETTINGS)
    fold.add_stack(sample(8 * S, ["c"], pid=9), source=("raw.stack", 1))  # a partition behind
    fold.tick(1000 * S)
    fold.add_stack(sample(12 * S, ["c"], pid=10), source=("raw.stack", 1))
    fold.add_stack(sample(29 * S, ["d"], pid=8), source=("raw.stack", 0))
    assert fold.tick(1000 * S) == []  # pid 9 moves to 12 - 5 s only: its window stays open
    assert fold.add_stack(sample(9 * S, ["c"], pid=9), source=("raw.stack", 1)) == []
    assert fold.late_samples == 0


def test_gpu_device_samples_and_rdma_counters_become_device_windows(codec: AvroCodec) -> None:
    from tests.unit.test_device_windows import T0, gpu, rdma

    step = ProfileStep(codec, ProfilerAggSettings(device_window_ms=5_000, tick_lag_ms=2_000))
    assert set(step.input_topics) >= {names.RAW_GPUMETRICS.name, names.RAW_RDMA.name}
    topics = (names.RAW_GPUMETRICS, names.RAW_RDMA, names.RAW_STACK)
    raw = [
        (names.RAW_GPUMETRICS, 0, gpu(T0 + 1 * S, power_w=300.5, pcie_tx_bytes=10)),
        (names.RAW_RDMA, 4, rdma(T0 + 1 * S, {"port_xmit_data": 8}, {})),
        (names.RAW_STACK, 7, sample(T0 + 1 * S, ["a"])),
        (names.RAW_GPUMETRICS, 1, gpu(T0 + 2 * S, power_w=301.5, pcie_tx_bytes=25)),
    ]
    outputs = []
    for topic, offset, datum in raw:
        message = Message(topic.name, 0, offset, b"n", codec.encode(topic.record, datum), 1)
        outputs += step.process(message)
    assert outputs == []
    assert step.held() == {(t.name, 0): o for t, o in zip(topics, (0, 4, 7), strict=True)}
    # The GPU's and the port's windows close at the tick 2 s past their end; the profile
    # window (10 s, 2 s lateness and a 2 s lag) stays open.
    ticked = step.tick(T0 + 7 * S)
    assert [o.topic for o in ticked] == [names.DERIVED_DEVICE.name] * 2
    assert all(o.key == b"n" for o in ticked)
    gpu_window, port_window = (codec.decode(o.value)[1] for o in ticked)
    assert gpu_window["metrics"]["power_w"]["mean"] == 301.0
    assert gpu_window["counters"]["pcie_tx_bytes"] == {"first": 10, "last": 25, "increase": 15}
    assert port_window["counters"]["port_xmit_data"]["last"] == 8
    assert step.held() == {(names.RAW_STACK.name, 0): 7}
    counters = step.counters()
    assert (counters["device_gpu_samples"], counters["device_rdma_records"]) == (2, 1)
    assert (counters["produced"], counters["samples"]) == (2, 1)
    [profile] = step.flush()
    assert profile.topic == names.DERIVED_PROFILE.name and step.held() == {}


def test_a_device_record_from_before_the_epoch_is_a_dead_letter(codec: AvroCodec) -> None:
    from tests.unit.test_device_windows import gpu

    step = ProfileStep(codec, SETTINGS)
    value = codec.encode(names.RAW_GPUMETRICS.record, gpu(-1))
    [out] = step.process(Message(names.RAW_GPUMETRICS.name, 0, 0, b"n", value, 5))
    assert out.topic == names.DEAD_LETTER.name
    assert "before the epoch" in codec.decode(out.value)[1]["reason"]
    assert step.flush() == [] and step.counters()["dead_letters"] == 1
