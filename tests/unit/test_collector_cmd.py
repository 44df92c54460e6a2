"""`zerotrace collector` (zerotrace_cli/collector_cmd.py) without probes or Kafka: the hidden
--ebpf flag prints the programs the flags ask for, the producer spools per node under home
and sends an earlier run's spool first, and the publishing loop runs its feeds to the bus until
its duration, then reports in one line. Attached probes and a real Kafka are
tests/kernel/test_collector_kafka.py's."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_collector import file_open
from tests.unit.test_spool import TwinBroker
from zerotrace import names, settings
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.spool_file import SpoolFile
from zerotrace_cli import main
from zerotrace_cli.collector_cmd import _collector_producer, _publish
from zerotrace_cli.node_feeds import NodeFeeds
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
    assert capsys.readouterr().err == (
        "zerotrace: published 3 records, 0 unacknowledged, 0 failed; "
        "backpressure 0, file-open.lost 0\n"
    )
