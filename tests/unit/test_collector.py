"""The collector loop over the in-memory feed, bus and schema registry: what reaches which
topic with which key, the `keep` filter, the shared poll timeout, backpressure, counters.
The in-memory feed's own contract is in test_feed_memory.py, which shares these records."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.bus_memory import InMemoryBroker, InMemoryProducer
from zerotrace.codec import AvroCodec
from zerotrace.cpu_slices import CpuSlices
from zerotrace.errors import Backpressure
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_collector.collector import Collector
from zerotrace_collector.feed_memory import InMemoryFeed
from zerotrace_collector.feeds import RawRecord

pytestmark = pytest.mark.unit

SCHEMAS = load_schema_dir()


def file_open(pid: int, n: int = 0) -> RawRecord:
    datum = {
        "event_id": f"f-{pid}-{n}",
        "node_id": "n",
        "pid": pid,
        "tid": pid,
        "process_name": "python3",
        "service": None,
        "container_id": None,
        "cgroup_id": 1,
        "op": "OPEN",
        "path": f"/data/{n}.bin",
        "result": 3,
        "flags": 0,
        "start_ns": 1_000 + n,
        "end_ns": 2_000 + n,
    }
    return RawRecord(names.RAW_FILEIO.name, str(pid).encode(), names.RAW_FILEIO.record, datum)


def gpu_call(pid: int, n: int = 0) -> RawRecord:
    datum = {
        "event_id": f"g-{pid}-{n}",
        "node_id": "n",
        "pid": pid,
        "tid": pid,
        "process_name": "train",
        "service": None,
        "container_id": "c0ffee",
        "api": "cudaMalloc",
        "start_ns": 5_000 + n,
        "end_ns": 6_000 + n,
        "address": 0x1000 * (n + 1),
        "size": 4096,
        "result": 0,
        "stack_id": None,
        "frames": ["thread:1", "cuda:cudaMalloc"],
    }
    return RawRecord(names.RAW_GPU.name, str(pid).encode(), names.RAW_GPU.record, datum)


def make_codec() -> AvroCodec:
    return AvroCodec(SCHEMAS, InMemorySchemaRegistry())


def make_broker() -> InMemoryBroker:
    broker = InMemoryBroker()
    broker.ensure_topics()
    return broker


def attached(feed: InMemoryFeed) -> InMemoryFeed:
    feed.attach()
    return feed


def read_all(broker: InMemoryBroker, topics: Iterable[str]) -> list[Message]:
    consumer = broker.consumer("test-reader")
    consumer.subscribe(list(topics))
    out = []
    while (message := consumer.poll(0)) is not None:
        out.append(message)
    return out


def decoded(codec: AvroCodec, messages: Iterable[Message]) -> list[tuple[str, bytes | None, Any]]:
    return [(m.topic, m.key, codec.decode(m.value)) for m in messages]


def test_records_reach_their_topics_with_their_keys_and_decode_as_given() -> None:
    broker, codec = make_broker(), make_codec()
    files = attached(InMemoryFeed("file-open", [file_open(7, 0), file_open(8, 1)]))
    gpu = attached(InMemoryFeed("gpu", [gpu_call(9, 0)]))
    collector = Collector([files, gpu], broker.producer(), codec)
    assert collector.pump(0) == 3
    got = decoded(codec, read_all(broker, [names.RAW_FILEIO.name, names.RAW_GPU.name]))
    expected = [
        (r.topic, r.key, (r.record, r.datum))
        for r in (file_open(7, 0), file_open(8, 1), gpu_call(9, 0))
    ]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    # Nothing went anywhere else.
    others = [t.name for t in names.ALL_TOPICS if t not in (names.RAW_FILEIO, names.RAW_GPU)]
    assert read_all(broker, others) == []


def test_one_keys_records_stay_in_feed_order_on_one_partition() -> None:
    broker, codec = make_broker(), make_codec()
    feed = attached(InMemoryFeed("file-open", [file_open(7, n) for n in range(10)]))
    Collector([feed], broker.producer(), codec).pump(0)
    messages = read_all(broker, [names.RAW_FILEIO.name])
    assert len({m.partition for m in messages}) == 1
    assert [codec.decode(m.value)[1]["event_id"] for m in messages] == [
        f"f-7-{n}" for n in range(10)
    ]


def test_pump_counts_this_call_and_published_counts_them_all() -> None:
    broker, codec = make_broker(), make_codec()
    feed = attached(InMemoryFeed("file-open", [file_open(1), file_open(2)]))
    collector = Collector([feed], broker.producer(), codec)
    assert collector.pump(0) == 2
    assert collector.pump(0) == 0  # drained: an empty poll publishes nothing
    feed.push(file_open(3))
    assert collector.pump(0) == 1
    assert collector.published == 3
    assert broker.end_offsets(names.RAW_FILEIO.name) != [0] * names.RAW_FILEIO.partitions


def test_keep_filters_only_feeds_that_do_not_follow() -> None:
    broker, codec = make_broker(), make_codec()
    records = [file_open(pid, pid) for pid in (10, 11, 12)]
    plain = attached(InMemoryFeed("file-open", records))
    # A following feed's kernel side already kept only the followed processes; filtering
    # again in user space could lose a short-lived child that /proc no longer shows.
    following = attached(InMemoryFeed("gpu", [gpu_call(pid, pid) for pid in (10, 11)], True))
    seen: list[RawRecord] = []

    def keep(raw: RawRecord) -> bool:
        seen.append(raw)
        return raw.pid == 11

    collector = Collector([plain, following], broker.producer(), codec, keep=keep)
    assert collector.pump(0) == 3
    assert seen == records  # asked about every record of the plain feed, none of the other
    messages = decoded(codec, read_all(broker, [names.RAW_FILEIO.name, names.RAW_GPU.name]))
    assert sorted((topic, datum["pid"]) for topic, _key, (_r, datum) in messages) == [
        (names.RAW_FILEIO.name, 11),
        (names.RAW_GPU.name, 10),
        (names.RAW_GPU.name, 11),
    ]
    assert collector.published == 3


def test_the_timeout_goes_to_the_first_feed_the_others_are_only_drained() -> None:
    broker, codec = make_broker(), make_codec()
    feeds = [attached(InMemoryFeed(f"f{i}")) for i in range(3)]
    collector = Collector(feeds, broker.producer(), codec)
    collector.pump(0)
    feeds[1].push(file_open(1))  # the first feed has nothing: it waits its timeout out
    started = time.monotonic()
    assert collector.pump(30) == 1
    assert time.monotonic() - started < 5  # one short wait, not one per feed
    assert [f.polls for f in feeds] == [[0, 30], [0, 0], [0, 0]]


class SlowProducer:
    """A producer whose local queue is full for the first `refusals` produce calls."""

    def __init__(self, inner: InMemoryProducer, refusals: int) -> None:
        self._inner = inner
        self.refusals = refusals
        self.attempts: list[tuple[str, bytes | None]] = []
        self.flushes: list[float] = []

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.attempts.append((topic, key))
        if self.refusals > 0:
            self.refusals -= 1
            raise Backpressure("local queue full")
        self._inner.produce(topic, key, value)

    def flush(self, timeout_s: float) -> int:
        self.flushes.append(timeout_s)
        return self._inner.flush(timeout_s)

    @property
    def failed(self) -> int:
        return self._inner.failed

    def close(self) -> None:
        self._inner.close()


def test_backpressure_waits_for_the_broker_and_drops_nothing() -> None:
    broker, codec = make_broker(), make_codec()
    records = [file_open(5, n) for n in range(4)]
    producer = SlowProducer(broker.producer(), refusals=3)
    collector = Collector([attached(InMemoryFeed("file-open", records))], producer, codec)
    assert collector.pump(0) == 4
    assert collector.backpressure == 3
    # Every refusal is followed by a bounded flush, then the same record is offered again.
    assert producer.flushes == [1.0, 1.0, 1.0]
    assert producer.attempts == [(names.RAW_FILEIO.name, b"5")] * 7
    messages = read_all(broker, [names.RAW_FILEIO.name])
    assert [codec.decode(m.value)[1]["event_id"] for m in messages] == [
        f"f-5-{n}" for n in range(4)
    ]
    assert collector.counters()["backpressure"] == 3


def test_counters_merge_the_loop_and_every_feed_under_its_name() -> None:
    broker, codec = make_broker(), make_codec()
    files = attached(InMemoryFeed("file-open", [file_open(1)]))
    gpu = attached(InMemoryFeed("gpu"))
    files.lose(4)
    files.lose(2, "malformed")
    gpu.lose(1)
    gpu.lose(1)
    collector = Collector([files, gpu], SlowProducer(broker.producer(), 1), codec)
    collector.pump(0)
    assert collector.counters() == {
        "published": 1,
        "events": 1,
        "backpressure": 1,
        "file-open.lost": 4,
        "file-open.malformed": 2,
        "gpu.lost": 2,
    }


def test_a_record_that_does_not_fit_its_schema_is_a_bug_and_surfaces() -> None:
    broker, codec = make_broker(), make_codec()
    bad = RawRecord(names.RAW_FILEIO.name, b"1", names.RAW_FILEIO.record, {"pid": 1})
    collector = Collector([attached(InMemoryFeed("file-open", [bad]))], broker.producer(), codec)
    with pytest.raises(ValueError):
        collector.pump(0)
    assert collector.published == 0


def test_records_on_the_bus_before_an_error_are_counted() -> None:
    broker, codec = make_broker(), make_codec()
    bad = RawRecord(names.RAW_FILEIO.name, b"1", names.RAW_FILEIO.record, {"pid": 1})
    feed = attached(InMemoryFeed("file-open", [file_open(1), file_open(2), bad]))
    collector = Collector([feed], broker.producer(), codec)
    with pytest.raises(ValueError):
        collector.pump(0)
    assert len(read_all(broker, [names.RAW_FILEIO.name])) == 2
    assert collector.published == 2


feed_scripts = st.lists(
    st.tuples(
        st.booleans(),  # follows
        st.lists(st.integers(1, 6), max_size=12),  # pids, in the feed's order
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(feed_scripts, st.sets(st.integers(1, 6)))
def test_the_bus_holds_exactly_the_kept_records_each_key_in_feed_order(
    scripts: list[tuple[bool, list[int]]], followed: set[int]
) -> None:
    broker, codec = make_broker(), make_codec()
    feeds, expected = [], []
    n = 0
    for i, (follows, pids) in enumerate(scripts):
        records = []
        for pid in pids:
            records.append(file_open(pid, n))
            n += 1
        feeds.append(attached(InMemoryFeed(f"f{i}", records, follows)))
        expected += [r for r in records if follows or r.pid in followed]
    collector = Collector(feeds, broker.producer(), codec, keep=lambda r: r.pid in followed)
    assert collector.pump(0) == len(expected) == collector.published
    got = [codec.decode(m.value)[1] for m in read_all(broker, [names.RAW_FILEIO.name])]
    assert sorted(d["event_id"] for d in got) == sorted(r.datum["event_id"] for r in expected)
    for pid in {r.pid for r in expected}:
        assert [d["event_id"] for d in got if d["pid"] == pid] == [
            r.datum["event_id"] for r in expected if r.pid == pid
        ]


def test_the_loop_s_pause_point_comes_after_each_published_record() -> None:
    """zerotrace.cpu_slices paces the loop between records, so a poll's batch is pieces of CPU
    time a busy node's threads can run between."""
    broker, codec = make_broker(), make_codec()
    feed = attached(InMemoryFeed("file-open", [file_open(1, n) for n in range(4)]))
    order: list[str] = []
    producer = broker.producer()

    class Watching:
        def produce(self, topic: str, key: bytes, value: bytes) -> None:
            order.append("produce")
            producer.produce(topic, key, value)

        def flush(self, timeout: float) -> int:
            return producer.flush(timeout)

    slices = CpuSlices(1, sleep=lambda _s: order.append("pause"))
    slices._slice_ns = 0  # every point ends a slice
    collector = Collector([feed], Watching(), codec, slices=slices)  # type: ignore[arg-type]
    assert collector.pump(0) == 4
    assert order == ["produce", "pause"] * 4
    assert collector.counters()["cpu_pauses"] == 4  # shown as "collector: cpu_pauses 4"
