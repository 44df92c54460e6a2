"""`zerotrace collector` (zerotrace_cli/collector_cmd.py) without probes or Kafka: the hidden
--ebpf flag prints the programs the flags ask for, the producer spools per node under home
and sends an earlier run's spool first, and the publishing loop runs its feeds to the bus until
its duration, then reports in one line. Attached probes and a real Kafka are
tests/kernel/test_collector_kafka.py's."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import cast
from unittest.mock import patch

import pytest

from tests.unit.test_collector import file_open
from tests.unit.test_spool import Disk, TwinBroker
from zerotrace import names, settings
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.cpu_budget import CpuBudget
from zerotrace.self_cost import SelfCost
from zerotrace.spool_file import SpoolFile, encode_frame
from zerotrace.spooling_producer import SpoolingProducer
from zerotrace_cli import build_parser, main
from zerotrace_cli.collector_cmd import _collector_producer, _publish, _SpoolWatch, _Status
from zerotrace_cli.node_feeds import NodeFeeds
from zerotrace_collector.collector import Collector
from zerotrace_collector.feed_memory import InMemoryFeed

pytestmark = pytest.mark.unit


class Bus:
    def __init__(self) -> None:
        self.broker = TwinBroker(ManualClock())

    def producer(self) -> TwinBroker:
        return self.broker


@pytest.fixture
def restore_signals() -> Iterator[None]:
    """The loop's stop flag installs process-wide handlers: put pytest's back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def common(home: Path, node_id: str = "node-a") -> settings.CommonSettings:
    return settings.load(
        settings.CommonSettings, {"ZEROTRACE_HOME": str(home), "ZEROTRACE_NODE_ID": node_id}
    )


def test_ebpf_prints_the_programs_of_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collector", "--ebpf", "--pid", "42"]) == 0
    text = capsys.readouterr().out
    assert text.count("/* bcc cflags: ") == 2  # sockets and file opens
    assert "-DZT_FILTER_PID=42" in text and "-DZT_FOLLOW=1" in text


def test_without_a_filter_sockets_stay_off(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collector", "--ebpf"]) == 0
    text = capsys.readouterr().out
    assert text.count("/* bcc cflags: ") == 1
    assert "TRACEPOINT_PROBE(syscalls, sys_enter_openat)" in text


def test_a_status_line_every_ten_seconds_unless_told_otherwise() -> None:
    assert build_parser().parse_args(["collector"]).status_every == 10.0
    assert build_parser().parse_args(["collector", "--status-every", "0"]).status_every == 0


def test_the_spool_is_one_folder_per_node_under_home(tmp_path: Path) -> None:
    producer = _collector_producer(Bus(), common(tmp_path, "rack 1/node:a"), spool_mb=1)
    try:
        assert producer.spool_folder == str(tmp_path / "spool" / "collector-rack_1_node_a")
        assert producer.spooled == 0
    finally:
        producer.close()


def test_an_earlier_runs_spool_is_sent_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "spool" / "collector-node-a"
    earlier = SpoolFile(folder, 1 << 20)
    earlier.append(names.RAW_FILEIO.name, b"1", b"kept while Kafka was away")
    earlier.close()
    bus = Bus()
    producer = _collector_producer(bus, common(tmp_path), spool_mb=1)
    try:
        assert capsys.readouterr().err == (
            f"zerotrace: sending 1 records kept in {folder} by an earlier run first\n"
        )
        producer.tick()
        assert bus.broker.topic == [b"kept while Kafka was away"]
    finally:
        producer.close()


@pytest.mark.usefixtures("restore_signals")
def test_the_loop_publishes_until_its_duration_and_reports(
    tmp_path: Path, codec: AvroCodec, capsys: pytest.CaptureFixture[str]
) -> None:
    feed = InMemoryFeed("file-open", [file_open(7, n) for n in range(3)])
    feed.attach()
    feeds = NodeFeeds([feed], None, [])
    bus = Bus()
    producer = _collector_producer(bus, common(tmp_path), spool_mb=1)
    try:
        assert _publish(feeds, producer, codec, duration=0.05) == 0
    finally:
        producer.close()
    assert [codec.decode(v)[1]["event_id"] for v in bus.broker.topic] == [
        f"f-7-{n}" for n in range(3)
    ]
    assert feed.closed
    published, losses, own = capsys.readouterr().err.splitlines()
    assert published == "zerotrace: published 3 records (3 events), 0 unacknowledged, 0 failed"
    assert losses == "zerotrace: file-open: lost 0, shed 0"  # the zeros shown, not left out
    assert re.fullmatch(
        r"zerotrace: own cost: \d+\.\d s CPU over 0\.\d s \(\d+\.\d\d core\)"
        r"( plus \d+\.\d s starting)?, RSS \d+ MiB \(peak \d+ MiB\); events published [\d.,]+/s",
        own,
    )


@pytest.mark.usefixtures("restore_signals")
def test_a_status_line_comes_every_few_seconds_while_it_runs(
    tmp_path: Path, codec: AvroCodec, capsys: pytest.CaptureFixture[str]
) -> None:
    feed = InMemoryFeed("file-open", [file_open(7, n) for n in range(3)])
    feed.attach()
    feed.lose(2)
    producer = _collector_producer(Bus(), common(tmp_path), spool_mb=1)
    budget = CpuBudget(0.5, "cgroup v2 cpu.max", "")
    try:
        _publish(NodeFeeds([feed], None, []), producer, codec, 0.5, status_every=0.1, budget=budget)
    finally:
        producer.close()
    status = [line for line in capsys.readouterr().err.splitlines() if "status: " in line]
    assert 1 <= len(status) <= 5  # every 0.1 s of 0.5 s, polls of up to 0.1 s between
    assert all(" core; budget 0.5 core, cgroup v2 cpu.max), RSS " in line for line in status)
    assert all(line.endswith("/s; file-open: lost 2, shed 0") for line in status)
    assert "; events published " in status[0]


def test_the_status_line_covers_the_interval_since_the_last(tmp_path: Path) -> None:
    """Over a /proc/self laid out in a folder and a clock that moves when told."""
    stat = "9 (zt) S " + " ".join(["0"] * 10) + " {u} 0 0 0\n"  # utime is field 14
    (tmp_path / "stat").write_text(stat.format(u=100))
    (tmp_path / "status").write_text("VmHWM:\t 204800 kB\nVmRSS:\t 102400 kB\n")
    now = [0.0]
    col = Collector([InMemoryFeed("socket")], InMemoryBroker().producer(), cast(AvroCodec, None))
    status = _Status(col, SelfCost(lambda: now[0], tmp_path, 100), None, every=10)
    said: list[str] = []
    with patch("zerotrace_cli.collector_cmd.say", said.append):
        now[0] = 9.9
        status.tick()  # not due: nothing read, nothing said
        (tmp_path / "stat").write_text(stat.format(u=150))
        now[0] = 10.0
        col.events = 2500
        status.tick()
        (tmp_path / "stat").write_text(stat.format(u=160))
        now[0] = 25.0
        col.events = 4000
        status.tick()
    assert said == [
        "status: 0.5 s CPU over 10.0 s (0.05 core), RSS 100 MiB (peak 200 MiB); "
        "events published 250/s; socket: lost 0, shed 0",
        "status: 0.1 s CPU over 15.0 s (0.01 core), RSS 100 MiB (peak 200 MiB); "
        "events published 100/s; socket: lost 0, shed 0",
    ]
    assert status.report()[-1] == (
        "own cost: 0.6 s CPU over 25.0 s (0.02 core) plus 1.0 s starting, RSS 100 MiB "
        "(peak 200 MiB); events published 160/s"
    )


def spool_on_a_full_disk(
    tmp_path: Path, room: int
) -> tuple[SpoolingProducer, TwinBroker, ManualClock]:
    """A producer whose Kafka takes nothing (every record goes to the spool) and whose spool's
    disk has *room* bytes left."""
    clock = ManualClock()
    broker = TwinBroker(clock, queue_limit=0)
    disk = Disk()
    disk.room = room
    spool = SpoolFile(tmp_path / "spool", 1 << 20, disk.write)
    producer = SpoolingProducer(broker, spool, clock, sleep=lambda s: clock.advance(int(s * 1e9)))
    return producer, broker, clock


@pytest.mark.usefixtures("restore_signals")
def test_a_full_spool_disk_is_said_once_counted_and_the_loop_goes_on(
    tmp_path: Path, codec: AvroCodec, capsys: pytest.CaptureFixture[str]
) -> None:
    records = [file_open(7, n) for n in range(5)]
    room = sum(len(encode_frame(r.topic, r.key, codec.encode(r.record, r.datum))) for r in records)
    feed = InMemoryFeed("file-open", records)
    feed.attach()
    producer, _broker, _clock = spool_on_a_full_disk(tmp_path, room * 2 // 5)  # two fit
    try:
        assert _publish(NodeFeeds([feed], None, []), producer, codec, duration=0.05) == 1
    finally:
        producer.close()
    folder = tmp_path / "spool"
    full = f"cannot write the spool in {folder}: No space left on device"
    said = capsys.readouterr().err.splitlines()
    assert said[:3] == [
        "zerotrace: Kafka takes nothing: records go to the spool in "
        f"{folder}, to be sent in order when it is back",
        f"zerotrace: records are dropped, the spool cannot keep them ({full}): counted in "
        "spool_full_dropped until it can again; what it holds is kept and sent",
        "zerotrace: published 5 records (5 events), 2 unacknowledged "
        f"(2 on disk in {folder}: sent next run), 3 failed",
    ]
    assert said[3:5] == [
        "zerotrace: collector: spool_full_dropped 3",  # the status line's and the report's
        "zerotrace: file-open: lost 0, shed 0",
    ]
    assert len(said) == 7  # and own cost, the last failure: no traceback
    assert [f.value for f in SpoolFile(folder, 1 << 20).peek(5)] == [
        codec.encode(r.record, r.datum) for r in records[:2]
    ]


def test_the_end_of_a_spell_of_drops_is_said_with_its_count(tmp_path: Path) -> None:
    producer, broker, clock = spool_on_a_full_disk(tmp_path, room=0)
    watch = _SpoolWatch(producer)
    said: list[str] = []
    with patch("zerotrace_cli.collector_cmd.say", said.append):
        for i in range(3):
            producer.produce("raw.fileio", None, f"m{i}".encode())
            watch.tick()
        broker.queue_limit = 10  # Kafka is back
        for i in range(3, 10):
            producer.produce("raw.fileio", None, f"m{i}".encode())
            clock.advance(1_000_000_000)
            watch.tick()
    producer.close()
    assert len(said) == 2 and said[0].startswith("records are dropped, the spool cannot keep")
    assert said[1] == "the spool keeps records again: 3 were dropped while it could not"
    assert broker.topic == [f"m{i}".encode() for i in range(3, 10)]
