"""profiler-agg distributed: the real `zerotrace profiler-agg` faust worker over the real Kafka
folds raw.stack and raw.gpu records into derived.profile records byte-identical to what the
same step computes in process from the same messages, dead letter included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.bus_kafka import KafkaBus
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_profiler_agg import profile_step
from zerotrace_profiler_agg.profile_step import ProfileStep
from zerotrace_profiler_agg.settings import ProfilerAggSettings

REPO = Path(__file__).resolve().parents[2]
S = 1_000_000_000
MB = 1 << 20


def ends(consumer: Consumer, topic: str) -> dict[int, int]:
    """End offset of each partition (retried: a topic created a moment ago may have no leader
    yet)."""
    for attempt in range(20):
        try:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in meta.partitions
            }
        except KafkaException:
            if attempt == 19:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def read_from(bootstrap: str, topic: str, start: dict[int, int]) -> list[Message]:
    """Everything on topic past `start` (partition -> offset), by partition then offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "zerotrace-reader"})
    try:
        stop = ends(consumer, topic)
        wanted = {p: o for p, o in start.items() if stop[p] > o}
        consumer.assign([TopicPartition(topic, p, o) for p, o in wanted.items()])
        out: list[Message] = []
        deadline = time.monotonic() + 20
        while wanted and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
            value, timestamp_ms = msg.value() or b"", msg.timestamp()[1]
            out.append(Message(topic, partition, offset, msg.key(), value, timestamp_ms))
            if offset + 1 >= stop[partition]:
                wanted.pop(partition, None)
        return sorted(out, key=lambda m: (m.partition, m.offset))
    finally:
        consumer.close()


def workload(node: str, base: int) -> list[tuple[str, dict[str, Any]]]:
    """Two processes over 30 s: CPU and off-CPU samples, GPU allocations, a partial free, a
    lost free, launches."""
    out: list[tuple[str, dict[str, Any]]] = []
    hot = ["thread:{t}", "py:handle_request (/srv/app.py:20)", "py:hot_loop (/srv/app.py:9)"]
    for i in range(60):
        pid = 4100 + i % 2
        frames = [f.format(t=pid) for f in hot]
        out.append(
            (
                names.RAW_STACK.record,
                {
                    "event_id": f"{node}-s{i}",
                    "node_id": node,
                    "pid": pid,
                    "tid": pid,
                    "process_name": f"app{pid}",
                    "container_id": None,
                    "ts_ns": base + i * S // 2,
                    "profile_type": "ON_CPU" if i % 3 else "OFF_CPU",
                    "weight": 1 if i % 3 else 7 * 10**6,
                    "frames": frames + ([] if i % 3 else ["kernel:schedule"]),
                },
            )
        )
    calls = [
        ("cudaMalloc", 2, 0xA000, 512 * MB, "py:Model.load (/srv/model.py:31)"),
        ("cudaMalloc", 3, 0xB000, 64 * MB, "py:Model.load (/srv/model.py:31)"),
        ("cudaLaunchKernel", 4, 0, 0, "py:Model.forward (/srv/model.py:57)"),
        ("cudaLaunchKernel", 14, 0, 0, "py:Model.forward (/srv/model.py:57)"),
        ("cudaFree", 15, 0xB000, 0, "py:Model.unload (/srv/model.py:70)"),
        ("cuMemFree_v2", 16, 0xDEAD, 0, "py:Model.unload (/srv/model.py:70)"),
        ("cudaMallocAsync", 25, 0xC000, 8 * MB, "py:Model.forward (/srv/model.py:57)"),
    ]
    for j, (api, sec, address, size, fn) in enumerate(calls):
        for pid in (4100, 4101):
            out.append(
                (
                    names.RAW_GPU.record,
                    {
                        "event_id": f"{node}-g{j}-{pid}",
                        "node_id": node,
                        "pid": pid,
                        "tid": pid,
                        "process_name": f"app{pid}",
                        "container_id": None,
                        "api": api,
                        "start_ns": base + sec * S - 5000,
                        "end_ns": base + sec * S,
                        "address": address,
                        "size": size,
                        "result": 0,
                        "stack_id": None,
                        "frames": [f"thread:{pid}", fn, f"cuda:{api}"],
                    },
                )
            )
    return out


@pytest.fixture
def worker_env(kafka_bootstrap: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    group = f"zerotrace-profiler-agg-test-{uuid.uuid4().hex[:8]}"
    KafkaBus(kafka_bootstrap).ensure_topics()
    # The new group starts where the raw topics end now: it reads this test's records (and
    # whatever else is produced meanwhile), not the history of every earlier run.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        offsets = [
            TopicPartition(topic, p, end)
            for topic in profile_step.INPUT_TOPICS
            for p, end in ends(consumer, topic).items()
        ]
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()
    yield {
        **os.environ,
        "ZEROTRACE_KAFKA": kafka_bootstrap,
        "ZEROTRACE_HOME": str(tmp_path),
        "ZEROTRACE_PROFILE_GROUP": group,
    }


def test_faust_worker_output_is_identical_to_the_in_process_step(
    kafka_bootstrap: str, worker_env: dict[str, str], tmp_path: Path
) -> None:
    node = f"it-{uuid.uuid4().hex[:8]}"
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "zerotrace-reader"})
    start = {
        t: ends(probe, t)
        for t in (
            names.RAW_STACK.name,
            names.RAW_GPU.name,
            names.DERIVED_PROFILE.name,
            names.DEAD_LETTER.name,
        )
    }
    probe.close()
    # Event times two minutes back: once the input is quiet, the worker's ticks close every
    # window at once (the in-process step is flushed instead).
    base = (time.time_ns() - 120 * S) // (10 * S) * (10 * S)
    producer = KafkaBus(kafka_bootstrap).producer()
    for record, datum in workload(node, base):
        topic = names.RAW_STACK if record == names.RAW_STACK.record else names.RAW_GPU
        producer.produce(topic.name, str(datum["pid"]).encode(), codec.encode(record, datum))
    poison = f"not avro {node}".encode()
    producer.produce(names.RAW_GPU.name, b"4100", poison)
    assert producer.flush(30) == 0

    # The reference: the same messages, as Kafka holds them, through the step in process.
    raw = [
        m
        for t in (names.RAW_STACK.name, names.RAW_GPU.name)
        for m in read_from(kafka_bootstrap, t, start[t])
    ]
    ours = [m for m in raw if m.value == poison or node.encode() in m.value]
    # The worker's group: a dead letter names the consumer group that refused the message.
    step = ProfileStep(codec, ProfilerAggSettings(group=worker_env["ZEROTRACE_PROFILE_GROUP"]))
    expected = [o for m in ours for o in step.process(m)] + step.flush()
    want_profiles = sorted((o.key, o.value) for o in expected if o.topic != names.DEAD_LETTER.name)
    [letter] = [o for o in expected if o.topic == names.DEAD_LETTER.name]
    assert len(want_profiles) > 10

    log = tmp_path / "profiler-agg.log"
    with open(log, "w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "zerotrace_cli", "profiler-agg"],
            cwd=REPO,
            env=worker_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        got: list[tuple[bytes | None, bytes]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(got) < len(want_profiles):
            assert worker.poll() is None, log.read_text()[-3000:]
            time.sleep(1)
            got = sorted(
                (m.key, m.value)
                for m in read_from(
                    kafka_bootstrap, names.DERIVED_PROFILE.name, start[names.DERIVED_PROFILE.name]
                )
                if codec.decode(m.value)[1]["node_id"] == node
            )
        time.sleep(2)  # nothing more may come
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
    got = sorted(
        (m.key, m.value)
        for m in read_from(
            kafka_bootstrap, names.DERIVED_PROFILE.name, start[names.DERIVED_PROFILE.name]
        )
        if codec.decode(m.value)[1]["node_id"] == node
    )
    assert got == want_profiles, log.read_text()[-3000:]
    letters = read_from(kafka_bootstrap, names.DEAD_LETTER.name, start[names.DEAD_LETTER.name])
    assert letter.value in [m.value for m in letters]
    windows = [codec.decode(v)[1] for _k, v in got]
    inuse = [w for w in windows if w["profile_type"] == "GPU_MEM_INUSE" and w["pid"] == 4100]
    # 576 MB allocated, 64 MB freed at 15 s, 8 MB more at 25 s; the lost free is counted.
    assert [sum(w["stacks"].values()) // MB for w in inuse][:3] == [576, 512, 520]
    assert inuse[1]["dropped"] == 1
