"""The embedded runner (zerotrace/step_runner.py): over the in-process bus it gives the same
messages as the step fed directly, whatever the partitions' interleaving; it lets time pass
on a quiet input; and it commits no further than the step holds."""

from __future__ import annotations

from tests.unit.test_profile_step import SETTINGS, call, sample
from zerotrace import names
from zerotrace.bus import Message
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.step_runner import StepRunner
from zerotrace_profiler_agg.profile_step import ProfileStep

S = 1_000_000_000


def drain(broker: InMemoryBroker, group: str, topics: tuple[str, ...]) -> list[Message]:
    consumer = broker.consumer(group)
    consumer.subscribe(topics)
    out = []
    while (message := consumer.poll(0)) is not None:
        out.append(message)
    return out


def test_embedded_output_equals_the_step_fed_directly(codec: AvroCodec) -> None:
    broker = InMemoryBroker()
    broker.ensure_topics()
    producer = broker.producer()
    for i in range(40):
        pid = 300 + i % 4
        frames = [f"thread:{pid}", f"py:work{i % 3} (w.py:{i % 3})"]
        datum = sample(i * S // 2, frames, pid=pid, tid=pid)
        producer.produce(
            names.RAW_STACK.name, str(pid).encode(), codec.encode(names.RAW_STACK.record, datum)
        )
    for i, (api, address, size) in enumerate(
        [("cudaMalloc", 0x10, 4096), ("cudaLaunchKernel", 0, 0), ("cudaFree", 0x10, 0)] * 3
    ):
        for pid in (300, 301):
            datum = call(api, (i + 1) * 3 * S, address + i, size, pid=pid, tid=pid)
            if api == "cudaFree":
                datum["address"] = address + i - 2  # the allocation two calls before
            producer.produce(
                names.RAW_GPU.name, str(pid).encode(), codec.encode(names.RAW_GPU.record, datum)
            )
    producer.produce(names.RAW_GPU.name, b"300", b"poison")

    step = ProfileStep(codec, SETTINGS)
    runner = StepRunner(broker, [step], batch=7)
    assert runner.run_once(now_ns=0) == 7
    while runner.run_once(now_ns=0):
        pass
    runner.finish(now_ns=0)

    reference = ProfileStep(codec, SETTINGS)
    expected = [
        o
        for m in drain(broker, "reference", (names.RAW_STACK.name, names.RAW_GPU.name))
        for o in reference.process(m)
    ]
    expected += reference.flush()
    got = drain(broker, "check", (names.DERIVED_PROFILE.name, names.DEAD_LETTER.name))
    assert sorted((m.topic, m.key, m.value) for m in got) == sorted(
        (o.topic, o.key, o.value) for o in expected
    )
    counters = runner.counters()[step.group]
    assert counters["consumed"] == 40 + 18 + 1 and counters["dead_letters"] == 1
    assert counters["gpu_unknown_frees"] == 0 and counters["live_allocations"] == 0
    profiles = [codec.decode(m.value)[1] for m in got if m.topic == names.DERIVED_PROFILE.name]
    assert sum(sum(p["stacks"].values()) for p in profiles if p["profile_type"] == "ON_CPU") == 40
    assert {p["profile_type"] for p in profiles} == {
        "ON_CPU",
        "GPU_MEM_ALLOC",
        "GPU_MEM_INUSE",
        "GPU_LAUNCH",
    }


def test_a_quiet_input_closes_its_windows_by_the_clock_without_finish(codec: AvroCodec) -> None:
    broker = InMemoryBroker()
    broker.ensure_topics()
    producer = broker.producer()
    for i in range(5):
        datum = sample(i * S, ["thread:7", "py:work (w.py:1)"], pid=7, tid=7)
        producer.produce(names.RAW_STACK.name, b"7", codec.encode(names.RAW_STACK.record, datum))
    runner = StepRunner(broker, [ProfileStep(codec, SETTINGS)])
    runner.run_once(now_ns=5 * S)
    assert drain(broker, "early", (names.DERIVED_PROFILE.name,)) == []  # the window is open
    # Nothing more comes; the clock goes on past the window, its lateness and the tick lag.
    later = 5 * S + SETTINGS.window_ms * 1_000_000 + SETTINGS.lateness_ms * 1_000_000
    later += SETTINGS.tick_lag_ms * 1_000_000 + 2 * S
    runner.run_once(now_ns=later)
    runner.run_once(now_ns=later + 2 * S)
    [window] = drain(broker, "late", (names.DERIVED_PROFILE.name,))
    _record, datum = codec.decode(window.value)
    assert datum["samples"] == 5 and datum["profile_type"] == "ON_CPU" and datum["pid"] == 7


def test_everything_taken_is_committed_even_what_an_open_window_holds(codec: AvroCodec) -> None:
    """In process no successor could read held records again: the runner commits all it took,
    so the in-process bus can drop them (a long exchange's records are not kept in memory)."""
    broker = three_samples(codec)
    step = ProfileStep(codec, SETTINGS)
    runner = StepRunner(broker, [step])
    runner.run_once(now_ns=0)
    assert step.held(), "the window is open"
    assert drain(broker, step.group, (names.RAW_STACK.name,)) == []


def test_the_loop_s_pause_point_comes_after_each_message(codec: AvroCodec) -> None:
    """zerotrace.cpu_slices paces the embedded node between messages: a step's batch is never
    one piece of CPU time."""
    broker = three_samples(codec)
    points: list[int] = []
    runner = StepRunner(broker, [ProfileStep(codec, SETTINGS)], pause=lambda: points.append(1))
    assert runner.run_once(now_ns=0) == 3
    assert len(points) == 3


def three_samples(codec: AvroCodec) -> InMemoryBroker:
    """A bus holding three stack samples of one thread, a second apart."""
    broker = InMemoryBroker(trim_committed=True)
    broker.ensure_topics()
    producer = broker.producer()
    for i in range(3):
        datum = sample(i * S, ["thread:7", "py:work (w.py:1)"], pid=7, tid=7)
        producer.produce(names.RAW_STACK.name, b"7", codec.encode(names.RAW_STACK.record, datum))
    return broker
