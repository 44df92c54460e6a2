"""Kernel + Kafka: a real eBPF program, a known workload of 23 opens, exactly 23 records on
the real raw.fileio topic with the workload's pid."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from tests.ebpf_required import require_ebpf
from zerotrace import names
from zerotrace.bus_kafka import KafkaBus, read_topic_from_start
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_collector.collector import Collector, monotonic_to_epoch_offset_ns
from zerotrace_collector.feeds import FileOpenFeed
from zerotrace_collector.probes.fileio import FileOpenProbe

require_ebpf()

BPF_DIR = Path(__file__).resolve().parents[2] / "bpf"
CALLS = 23

# Waits for a line on stdin so the probe is attached (filtered to this pid) before it opens.
WORKLOAD = textwrap.dedent(
    """
    import os, sys
    path, n = sys.argv[1], int(sys.argv[2])
    sys.stdin.readline()
    for _ in range(n):
        os.close(os.open(path, os.O_RDONLY))
    """
)


def test_23_opens_make_23_records_on_kafka(kafka_bootstrap: str, tmp_path: Path) -> None:
    target = tmp_path / "known-file"
    target.write_text("x")
    node_id = f"kernel-test-{uuid.uuid4().hex[:8]}"
    bus = KafkaBus(kafka_bootstrap)
    bus.ensure_topics()
    producer = bus.producer()
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    child = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, str(target), str(CALLS)], stdin=subprocess.PIPE
    )
    feed = FileOpenFeed(
        FileOpenProbe(BPF_DIR, pid_filter=child.pid), node_id, monotonic_to_epoch_offset_ns()
    )
    feed.attach()
    try:
        collector = Collector([feed], producer, codec)
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.close()
        while child.poll() is None:
            collector.pump(50)
        for _ in range(5):  # drain what is still in the ring buffer
            collector.pump(50)
    finally:
        feed.close()
    assert child.returncode == 0
    assert producer.flush(30) == 0 and producer.failed == 0

    reader = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    # The topic is shared (other tests put poison on it on purpose): read our key only.
    messages = read_topic_from_start(kafka_bootstrap, names.RAW_FILEIO.name)
    records = [reader.decode(m.value)[1] for m in messages if m.key == str(child.pid).encode()]
    ours = [r for r in records if r["node_id"] == node_id]
    assert len(ours) == CALLS
    assert {r["pid"] for r in ours} == {child.pid}
    assert {r["path"] for r in ours} == {str(target)}
    assert all(r["result"] >= 0 and r["end_ns"] >= r["start_ns"] for r in ours)
    assert len({r["event_id"] for r in ours}) == CALLS
