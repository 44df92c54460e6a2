"""Feeds (zerotrace_collector/feeds.py): a probe's samples as raw records for the bus, over
stand-in probes (attached probes are tests/kernel/test_collector_kafka.py's): which topic,
key and record each sample becomes, its container looked up once per pid, the probe's
counters under the feed, and attach and close handed to the probe."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

from tests.unit.test_collector_records import SAMPLE
from tests.unit.test_socket_records import ENDS, conn, data
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.socket_batch import socket_data_of
from zerotrace_collector import feeds as feeds_module
from zerotrace_collector.cgroup import container_id_of
from zerotrace_collector.feeds import FileOpenFeed, RawRecord, SocketFeed
from zerotrace_collector.probes.event_layout import ConnKind
from zerotrace_collector.records import file_open_record
from zerotrace_collector.socket_records import conn_event_record, socket_data_record

pytestmark = pytest.mark.unit

OFFSET = 1_700_000_000_000_000_000


class Probe:
    """What a feed asks of its probe, with samples scripted per poll."""

    def __init__(self, *polls: list[Any], follow: bool = False) -> None:
        self.polls = list(polls)
        self.follow = follow
        self.timeouts: list[int] = []
        self.calls: list[str] = []
        self.lost, self.malformed, self.truncated = 3, 1, 2
        self.ciphertext_dropped, self.filtered = 4, 5
        self.conns_shed, self.calls_shed = 6, 7
        self.tls_rebound = 8
        self.conns_resumed = 9
        self.unplaced = 10
        self.port_filtered = 11

    def attach(self) -> None:
        self.calls.append("attach")

    def close(self) -> None:
        self.calls.append("close")

    def poll(self, timeout_ms: int) -> list[Any]:
        self.timeouts.append(timeout_ms)
        return self.polls.pop(0) if self.polls else []

    def endpoints(self, sample: Any) -> Any:
        return ENDS


@pytest.fixture
def containers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Container lookups, by pid (none of these processes runs in one)."""
    asked: list[int] = []

    def read(pid: int) -> str | None:
        asked.append(pid)
        return None

    monkeypatch.setattr(feeds_module, "container_id_of", read)
    return asked


def test_a_raw_record_knows_its_pid() -> None:
    assert RawRecord("t", b"k", "r", {"pid": 42}).pid == 42
    assert RawRecord("t", b"k", "r", {"pid": None}).pid == 0
    assert RawRecord("t", b"k", "r", {}).pid == 0


def test_file_opens_go_to_raw_fileio_keyed_by_pid(containers: list[int], codec: AvroCodec) -> None:
    probe = Probe([SAMPLE, SAMPLE])
    feed = FileOpenFeed(probe, "node-a", OFFSET)  # type: ignore[arg-type]
    assert (feed.name, feed.follows) == ("file-open", False)
    feed.attach()
    records = feed.poll(25)
    expected = file_open_record(SAMPLE, "node-a", OFFSET, None)
    assert (
        records == [RawRecord(names.RAW_FILEIO.name, b"10", names.RAW_FILEIO.record, expected)] * 2
    )
    assert codec.decode(codec.encode(records[0].record, records[0].datum))[1] == expected
    assert probe.timeouts == [25] and containers == [10, 10]
    assert feed.counters() == {"malformed": 1, "lost": 3}
    feed.close()
    assert probe.calls == ["attach", "close"]


def test_socket_samples_go_to_their_topics_keyed_by_connection(
    containers: list[int], codec: AvroCodec
) -> None:
    connect, sent, other = conn(ConnKind.CONNECT), data(), data(pid=20)
    probe = Probe([connect, sent, other, conn(ConnKind.CLOSE)], follow=True)
    cpu = iter(range(0, 10**9, 5_000))  # each read of the CPU clock 5 µs after the last
    feed = SocketFeed(probe, "node-a", OFFSET, cpu_ns=lambda: next(cpu))  # type: ignore[arg-type]
    assert (feed.name, feed.follows) == ("socket", True)
    records = list(feed.poll(0))
    # The closing connection's calls go out before its close; the other's at the end.
    assert [(r.topic, r.record) for r in records] == [
        (names.RAW_CONN.name, names.RAW_CONN.record),
        (names.RAW_SOCKET.name, names.SOCKET_BATCH_RECORD),
        (names.RAW_CONN.name, names.RAW_CONN.record),
        (names.RAW_SOCKET.name, names.SOCKET_BATCH_RECORD),
    ]
    assert records[0].datum == conn_event_record(connect, "node-a", OFFSET, None, ENDS)
    assert socket_data_of(records[1].datum) == [
        socket_data_record(sent, "node-a", OFFSET, None, ENDS)
    ]
    assert socket_data_of(records[3].datum) == [
        socket_data_record(other, "node-a", OFFSET, None, ENDS)
    ]
    assert [r.events for r in records] == [1, 1, 1, 1]
    for record in records:
        assert record.key == str(record.datum["conn_id"]).encode()
        codec.encode(record.record, record.datum)
    assert records[0].key == records[1].key == records[2].key != records[3].key
    assert containers == [10, 20]  # once per pid
    assert feed.counters() == {
        "lost": 3,
        "shed": 6,
        "shed_calls": 7,
        "resumed": 9,
        "malformed": 1,
        "truncated": 2,
        "ciphertext_dropped": 4,
        "filtered": 5,
        "port_filtered": 11,
        "tls_rebound": 8,
        "unplaced": 10,
        "redacted": 0,
        "masked": 0,
        "h2_resync": 0,
        "redact_cpu_us": 5 * 2,  # two data records, their redaction timed 5 µs each
    }


def test_a_connections_calls_of_one_poll_share_a_record_in_order(
    containers: list[int], codec: AvroCodec
) -> None:
    calls = [
        data(start_mono_ns=100 + i, end_mono_ns=100 + i)
        for i in range(feeds_module.BATCH_CALLS + 3)
    ]
    calls[2] = dataclasses.replace(calls[2], comm="worker-2")  # another thread's name
    other = data(pid=20)  # another connection, between them
    probe = Probe([*calls[:2], other, *calls[2:]])
    records = list(SocketFeed(probe, "node-a", OFFSET).poll(0))  # type: ignore[arg-type]
    # A new batch where the thread name changes, and where BATCH_CALLS is reached; the
    # records of one connection, read one after the other, give its calls in order.
    assert [r.events for r in records] == [2, 1, feeds_module.BATCH_CALLS, 1]
    assert [r.datum["pid"] for r in records] == [10, 10, 10, 20]
    assert [len(r.datum["calls"]["tid"]) for r in records] == [r.events for r in records]
    assert [r.datum["process_name"] for r in records[:3]] == ["python3", "worker-2", "python3"]
    got = [
        call
        for r in records
        if r.datum["pid"] == 10
        for call in socket_data_of(codec.decode(codec.encode(r.record, r.datum))[1])
    ]
    assert got == [socket_data_record(s, "node-a", OFFSET, None, ENDS) for s in calls]


def test_a_batch_is_bounded_by_its_payload_bytes(containers: list[int]) -> None:
    big = data(payload=b"x" * (feeds_module.BATCH_PAYLOAD_BYTES // 2))
    records = list(SocketFeed(Probe([big, big, big]), "n", 0).poll(0))  # type: ignore[arg-type]
    assert [r.events for r in records] == [2, 1]


def test_a_socket_poll_hands_records_over_as_they_are_read(containers: list[int]) -> None:
    probe = Probe([data(), data(pid=20)])
    feed = SocketFeed(probe, "node-a", OFFSET)  # type: ignore[arg-type]
    records = feed.poll(10)
    assert probe.timeouts == []  # a generator: the probe is polled when records are read
    next(records)
    assert probe.timeouts == [10] and probe.polls == []
    assert len(list(records)) == 1


def test_the_container_of_our_own_process_is_read_from_proc() -> None:
    sample = dataclasses.replace(SAMPLE, pid=os.getpid())
    [record] = FileOpenFeed(Probe([sample]), "n", 0).poll(0)  # type: ignore[arg-type]
    assert record.datum["container_id"] == container_id_of(os.getpid())
