"""The indexer through an OpenSearch outage (zerotrace_query.indexer, issue 10 point 5).

Derived spans go to the real Kafka at a steady rate while the indexer (the query service's own
loop, `run_indexer`, with its Kafka consumer that rejoins the group to rewind) writes them into
an OpenSearch node of this test's own, on other ports and another home than the suite's. In the
middle that node is stopped for OUTAGE_S seconds, then started again. At the end:

- every span is in the index exactly once (each id checked), none lost;
- at every sample, taken once a second and throughout the outage, no committed offset is past a
  document the store had not acknowledged (the group's committed offsets against the ids the
  store's bulk responses acknowledged by then, through a spy around the real store);
- a span the store refuses for good (a keyword over Lucene's 32766-byte term limit: an item
  error 400) is on the dead-letter topic once, with the store's reason, and counted;
- the service told of the outage in one line when it began and one when it ended.

It prints one row of the README's fault table: fault, duration, sent, indexed, duplicates, lost.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.unit.test_correlator_pipeline import raw_open
from zerotrace import names
from zerotrace.bus_kafka import KafkaBus, read_topic_from_start
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.infra.opensearch_node import OpenSearchNode
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.store import BulkResult, Document, GroupKey, Histogram, IndexSpec, Query
from zerotrace.store_opensearch import OpenSearchStore
from zerotrace_correlator.fileio_spans import file_open_span
from zerotrace_query.indexer import Indexer, run_indexer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
OUTAGE_S = 60  # how long the node is down (issue 10: "stop that OpenSearch for 60 s")
BEFORE_S = 20  # steady indexing before the outage
AFTER_S = 25  # sending goes on this long after the node is asked to start again
RATE = 20  # spans a second
SENT = RATE * (BEFORE_S + OUTAGE_S + AFTER_S)
IMMENSE = 40_000  # bytes of one keyword: over Lucene's 32766, an item error 400
TOPIC = names.DERIVED_SPAN.name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def node(tmp_path: Path) -> Iterator[OpenSearchNode]:
    """This test's own OpenSearch; the suite's on 9200 is never touched."""
    home = tmp_path / "infra"
    for lib in ("opensearch", "opensearch-launcher"):  # reuse the suite's jars when present
        suite = REPO / ".zerotrace" / "infra" / "lib" / lib
        if suite.exists():
            shutil.copytree(suite, home / "lib" / lib)
    own = OpenSearchNode(home, port=free_port(), transport_port=free_port())
    own.up(lambda _line: None)
    try:
        yield own
    finally:
        own.down()


class SpyStore:
    """The real store, recording the ids each bulk write acknowledged and when."""

    def __init__(self, inner: OpenSearchStore) -> None:
        self.inner = inner
        self.acked: set[str] = set()
        self.lock = threading.Lock()

    def ensure_index(self, spec: IndexSpec) -> None:
        self.inner.ensure_index(spec)

    def bulk_upsert(self, index: str, docs: Sequence[tuple[str, Document]]) -> BulkResult:
        result = self.inner.bulk_upsert(index, docs)
        failed = {doc_id for doc_id, _ in result.failed}
        with self.lock:
            self.acked.update(doc_id for doc_id, _ in docs if doc_id not in failed)
        return result

    def refresh(self, index: str) -> None:
        self.inner.refresh(index)

    def search(self, index: str, query: Query) -> list[dict[str, object]]:
        return self.inner.search(index, query)

    def count(self, index: str, query: Query) -> int:
        return self.inner.count(index, query)

    def histogram(
        self,
        index: str,
        query: Query,
        field: str,
        bounds: Sequence[float],
        group_by: Sequence[str] = (),
    ) -> dict[GroupKey, Histogram]:
        return self.inner.histogram(index, query, field, bounds, group_by)

    def close(self) -> None:
        self.inner.close()


@dataclass
class Sample:
    phase: str  # "before", "outage", "after"
    committed: dict[int, int]  # partition -> committed offset (the next to read)
    acked: frozenset[str]  # ids the store had acknowledged when the offsets were read


@dataclass
class Sent:
    """Where each span landed: (partition, offset) -> span id, from the delivery reports."""

    where: dict[tuple[int, int], str] = field(default_factory=dict)
    refused: tuple[int, int, bytes] | None = None  # partition, offset, value of the bad one
    lock: threading.Lock = field(default_factory=threading.Lock)


def spans(run: str) -> Iterator[tuple[str, dict[str, object]]]:
    """(span id, span) of the run, one a call; the middle one is the refused one."""
    for i in range(SENT + 1):
        raw = raw_open(event_id=f"{run}/{i}", node_id=run, pid=100 + i % 7, start_ns=10**18 + i)
        if i == SENT // 2:
            raw["process_name"] = "x" * IMMENSE
        span = file_open_span(raw)
        yield str(span["span_id"]), span


def publish(bootstrap: str, codec: AvroCodec, run: str, sent: Sent, halt: threading.Event) -> None:
    """Send the run's spans at a steady RATE, recording where each one landed."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    start = time.monotonic()
    for i, (span_id, span) in enumerate(spans(run)):
        if halt.is_set():
            break
        delay = start + i / RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        value = codec.encode(names.DERIVED_SPAN.record, span)
        bad = i == SENT // 2

        def landed(err: Any, msg: Any, span_id: str = span_id, bad: bool = bad) -> None:
            assert err is None, err
            where = (int(msg.partition()), int(msg.offset()))
            with sent.lock:
                if bad:
                    sent.refused = (*where, bytes(msg.value()))
                else:
                    sent.where[where] = span_id

        producer.produce(TOPIC, value=value, key=str(span["trace_id"]).encode(), on_delivery=landed)
        producer.poll(0)
    assert producer.flush(60) == 0


def start_at_the_end(bootstrap: str, group: str) -> Consumer:
    """Commit the end of every indexed topic for `group` (the index starts with this run, not
    with the history of the shared Kafka); the consumer returned reads the group's offsets."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    ends = []
    for topic in names.INDEXED_TOPICS:
        for p in range(topic.partitions):
            _low, high = reader.get_watermark_offsets(TopicPartition(topic.name, p), timeout=10)
            ends.append(TopicPartition(topic.name, p, high))
    reader.commit(offsets=ends, asynchronous=False)
    return reader


def committed(reader: Consumer) -> dict[int, int]:
    parts = [TopicPartition(TOPIC, p) for p in range(names.DERIVED_SPAN.partitions)]
    return {tp.partition: tp.offset for tp in reader.committed(parts, timeout=10)}


def test_an_opensearch_outage_loses_and_duplicates_nothing(
    node: OpenSearchNode, kafka_bootstrap: str
) -> None:
    run = f"fault-{uuid.uuid4().hex[:8]}"
    group = f"zerotrace-indexer-faults-{run}"
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    bus = KafkaBus(kafka_bootstrap)
    bus.ensure_topics()
    reader = start_at_the_end(kafka_bootstrap, group)
    start = committed(reader)
    store = SpyStore(OpenSearchStore(node.url, prefix=f"{run}-"))
    indexer = Indexer(
        bus.consumer(group),
        bus.producer(),
        store,
        codec,
        SystemClock(),
        reconnect=lambda: bus.consumer(group),
    )
    said: list[str] = []
    stop, halt, sent = threading.Event(), threading.Event(), Sent()
    loop = threading.Thread(target=run_indexer, args=(indexer, stop, said.append), daemon=True)
    sender = threading.Thread(
        target=publish, args=(kafka_bootstrap, codec, run, sent, halt), daemon=True
    )
    samples: list[Sample] = []

    def sample(phase: str) -> None:
        offsets = committed(reader)  # first the offsets, then what the store had acknowledged
        with store.lock:
            samples.append(Sample(phase, offsets, frozenset(store.acked)))

    began = time.monotonic()
    loop.start()
    sender.start()
    try:
        while time.monotonic() - began < BEFORE_S:
            sample("before")
            time.sleep(1)
        assert node.down()
        down_at = time.monotonic()
        while time.monotonic() - down_at < OUTAGE_S:
            sample("outage")
            time.sleep(1)
        outage_s = time.monotonic() - down_at
        node.up(lambda _line: None)
        unavailable_s = time.monotonic() - down_at
        sender.join(timeout=BEFORE_S + OUTAGE_S + AFTER_S + 60)
        assert not sender.is_alive()
        with sent.lock:
            last: dict[int, int] = {}
            for p, o in sent.where:
                last[p] = max(o, last.get(p, o))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            sample("after")
            if all(samples[-1].committed[p] > o for p, o in last.items()):
                break  # every span of the run settled and committed
            time.sleep(1)
    finally:
        halt.set()
        stop.set()
        loop.join(timeout=60)
        indexer.close()
        reader.close()
    took = time.monotonic() - began
    ours = set(sent.where.values())

    # Every span in the index exactly once, each id checked; the refused one not there.
    found = store.search("spans", Query(equals={"node_id": run}, limit=10_000))
    ids = [str(doc["_id"]) for doc in found]
    duplicates = len(ids) - len(set(ids))
    lost = len(ours - set(ids))
    indexed = len(ours & set(ids))
    print(
        f"\n| OpenSearch down (stopped, started again) | {outage_s:.0f} s | {len(ours)} | "
        f"{indexed} | {duplicates} | {lost} |  (unavailable {unavailable_s:.0f} s in all,"
        f" test took {took:.0f} s)"
    )
    assert len(ours) == SENT and len(sent.where) == SENT
    assert (indexed, duplicates, lost) == (SENT, 0, 0)
    assert store.count("spans", Query(equals={"node_id": run})) == SENT
    store.close()

    # No committed offset past a document the store had not acknowledged, at any sample.
    assert sent.refused is not None
    bad_partition, bad_offset, bad_value = sent.refused
    assert sum(s.phase == "outage" for s in samples) >= OUTAGE_S // 2
    for s in samples:
        for (partition, offset), span_id in sent.where.items():
            if offset < s.committed[partition] and offset >= start[partition]:
                assert span_id in s.acked, (s.phase, partition, offset, s.committed)
    outage = [s for s in samples if s.phase == "outage"]
    assert outage[-1].committed == outage[len(outage) // 4].committed  # nothing moves while down
    assert all(samples[-1].committed[p] >= start[p] for p in start)

    # The refused span: dead-lettered once with the store's reason, counted, committed.
    letters = [
        codec.decode(m.value)[1]
        for m in read_topic_from_start(kafka_bootstrap, names.DEAD_LETTER.name, timeout_s=30)
    ]
    ours_dead = [
        d
        for d in letters
        if d["source_topic"] == TOPIC
        and (d["source_partition"], d["source_offset"]) == (bad_partition, bad_offset)
    ]
    assert len(ours_dead) == 1, ours_dead
    assert ours_dead[0]["value"] == bad_value
    assert ours_dead[0]["reason"].startswith("400 illegal_argument_exception: Document contains")
    assert "immense term" in ours_dead[0]["reason"]
    assert indexer.dead_letters >= 1
    assert samples[-1].committed[bad_partition] > bad_offset

    # One line when the outage began, one when it ended with how long; not one per retry.
    paused = [line for line in said if line.startswith("indexing paused")]
    resumed = [line for line in said if line.startswith("indexing resumed")]
    print("\n".join(said))
    assert 1 <= len(paused) == len(resumed) <= 2, said
