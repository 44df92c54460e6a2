"""The indexer never commits past an unwritten document (zerotrace_query.indexer): which store
refusals are retried and which dead-lettered, what a batch's outcome commits and reads again,
one line per outage, and the shell over the in-process bus with a store that goes away."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from tests.unit.test_query_service import publish_spans
from zerotrace import names
from zerotrace.bus import Message
from zerotrace.bus_memory import InMemoryBroker, InMemoryConsumer
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.errors import TransientIO
from zerotrace.store import BulkResult, Document, GroupKey, Histogram, IndexSpec, Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.indexer import (
    WRITTEN,
    Indexer,
    Outage,
    Outcome,
    item_fate,
    item_outcomes,
    run_indexer,
    settle,
)

pytestmark = pytest.mark.unit
S = 1_000_000_000


@pytest.mark.parametrize(
    ("reason", "fate"),
    [
        ("429 es_rejected_execution_exception: rejected execution of bulk", "retry"),
        ("503 unavailable_shards_exception: primary shard is not active", "retry"),
        ("500 exception: boom", "retry"),
        ("400 mapper_parsing_exception: failed to parse field [pid] of type [long]", "refused"),
        ("400 illegal_argument_exception: Document contains at least one immense term", "refused"),
        ("404 index_not_found_exception: no such index", "refused"),
        ("field 'pid' is str '12', expected long", "refused"),  # the store's own checks
        ("", "refused"),
    ],
)
def test_busy_or_broken_stores_are_retried_and_bad_documents_refused(
    reason: str, fate: str
) -> None:
    assert item_fate(reason) == fate


def test_item_outcomes_follow_the_documents_of_the_bulk() -> None:
    failed = [("b", "400 mapper_parsing_exception: x"), ("c", "429 busy: y")]
    assert item_outcomes(["a", "b", "c"], failed) == [
        WRITTEN,
        Outcome("refused", "400 mapper_parsing_exception: x"),
        Outcome("retry", "429 busy: y"),
    ]


def msg(partition: int, offset: int, topic: str = "t") -> Message:
    return Message(topic, partition, offset, None, b"", 0)


REFUSED = Outcome("refused", "400 bad")
RETRY = Outcome("retry", "store away")


def test_a_batch_all_settled_commits_the_last_message_of_each_partition() -> None:
    batch = [msg(0, 5), msg(1, 7), msg(0, 6), msg(1, 8), msg(0, 7)]
    done = settle(batch, [WRITTEN, WRITTEN, REFUSED, WRITTEN, WRITTEN])
    assert sorted(done.commit, key=lambda m: m.partition) == [msg(0, 7), msg(1, 8)]
    assert done.dead_letters == ((msg(0, 6), "400 bad"),)
    assert done.again == () and done.written == 4 and done.retry_reason == ""


def test_nothing_commits_from_the_first_document_to_retry_on() -> None:
    # Partition 0: written, refused, then one to retry: the refusal settles before it; the
    # documents after it (refused or written) are read again, not dead-lettered or committed.
    # Partition 1 fails at its first message.
    batch = [msg(0, 1), msg(0, 2), msg(1, 1), msg(0, 3), msg(0, 4), msg(0, 5), msg(1, 2)]
    busy = Outcome("retry", "429 busy")
    outcomes = [WRITTEN, REFUSED, RETRY, busy, REFUSED, WRITTEN, WRITTEN]
    done = settle(batch, outcomes)
    assert done.commit == (msg(0, 2),)
    assert done.dead_letters == ((msg(0, 2), "400 bad"),)
    assert done.again == (msg(1, 1), msg(0, 3), msg(0, 4), msg(0, 5), msg(1, 2))
    assert done.written == 1 and done.retry_reason == "store away"


def test_topics_are_partitions_apart() -> None:
    batch = [msg(0, 1, "a"), msg(0, 1, "b")]
    done = settle(batch, [RETRY, WRITTEN])
    assert done.commit == (msg(0, 1, "b"),) and done.again == (msg(0, 1, "a"),)


def test_an_outage_says_one_line_when_it_begins_and_one_when_it_ends() -> None:
    outage = Outage(first_s=0.5, max_s=4)
    assert outage.recovered(0) is None  # no outage: nothing to say
    delays, lines = [], []
    for i in range(7):
        delay, line = outage.failed(i * S, "OpenSearch at x is unreachable")
        delays.append(delay)
        lines.append(line)
    assert delays == [0.5, 1, 2, 4, 4, 4, 4]
    assert lines[0] is not None and "OpenSearch at x is unreachable" in lines[0]
    assert lines[1:] == [None] * 6
    assert outage.recovered(61 * S) == "indexing resumed after 61s paused (6 retries)"
    assert outage.recovered(62 * S) is None
    delay, line = outage.failed(100 * S, "again")  # a new outage starts over
    assert delay == 0.5 and line is not None and outage.retries == 0


# --- the shell, over the in-process bus and DuckDB -------------------------------------------


class FlakyStore:
    """DuckDB behind a store that is away for `down` bulk writes, and refuses some ids."""

    def __init__(self, down: int = 0, refuse: dict[str, str] | None = None) -> None:
        self.inner = DuckDBStore()
        self.down = down
        self.refuse = refuse or {}
        self.bulks = 0

    def ensure_index(self, spec: IndexSpec) -> None:
        self.inner.ensure_index(spec)

    def bulk_upsert(self, index: str, docs: Sequence[tuple[str, Document]]) -> BulkResult:
        self.bulks += 1
        if self.down > 0:
            self.down -= 1
            raise TransientIO("OpenSearch at test is unreachable")
        taken = [(i, d) for i, d in docs if i not in self.refuse]
        result = self.inner.bulk_upsert(index, taken)
        refused = tuple((i, self.refuse[i]) for i, _ in docs if i in self.refuse)
        return BulkResult(result.written, (*result.failed, *refused))

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


@pytest.fixture
def broker() -> InMemoryBroker:
    b = InMemoryBroker()
    b.ensure_topics()
    return b


@pytest.fixture
def store() -> Iterator[FlakyStore]:
    s = FlakyStore()
    yield s
    s.close()


def make(
    broker: InMemoryBroker, store: FlakyStore, codec: AvroCodec, reconnect: bool = False
) -> Indexer:
    def rejoin() -> InMemoryConsumer:
        return broker.consumer("g")

    return Indexer(
        broker.consumer("g"),
        broker.producer(),
        store,
        codec,
        ManualClock(7),
        reconnect=rejoin if reconnect else None,
    )


def uncommitted(broker: InMemoryBroker) -> list[Message]:
    """The spans a new member of group g would read: those not committed yet."""
    consumer = broker.consumer("g")
    consumer.subscribe([names.DERIVED_SPAN.name])
    out = []
    while (message := consumer.poll(0)) is not None:
        out.append(message)
    return out


@pytest.mark.parametrize("reconnect", [False, True])
def test_a_failed_write_commits_nothing_and_the_batch_is_written_once_later(
    broker: InMemoryBroker, store: FlakyStore, codec: AvroCodec, reconnect: bool
) -> None:
    publish_spans(broker, codec, 9)
    idx = make(broker, store, codec, reconnect)
    store.down = 2
    for _ in range(2):
        with pytest.raises(TransientIO, match="unreachable"):
            idx.run_once(0.1)
        assert idx.indexed == 0 and idx.settled == 0
        assert len(uncommitted(broker)) == 9  # nothing committed: a new member starts over
    assert idx.run_once(0.1) == 9
    assert idx.run_once(0.1) == 0  # all committed now: nothing read twice
    assert idx.indexed == 9 and store.count("spans", Query()) == 9
    assert uncommitted(broker) == []


def test_a_refused_document_is_dead_lettered_with_its_reason_counted_and_committed(
    broker: InMemoryBroker, store: FlakyStore, codec: AvroCodec
) -> None:
    publish_spans(broker, codec, 4)
    probe = broker.consumer("peek")
    probe.subscribe([names.DERIVED_SPAN.name])
    spans = [m for _ in range(4) if (m := probe.poll(0)) is not None]
    bad_id = codec.decode(spans[2].value)[1]["span_id"]
    reason = "400 mapper_parsing_exception: failed to parse field [pid] of type [long]"
    store.refuse = {bad_id: reason}
    idx = make(broker, store, codec)
    assert idx.run_once(0.1) == 3
    assert (idx.indexed, idx.dead_letters, idx.settled) == (3, 1, 4)
    assert uncommitted(broker) == []
    dlq = broker.consumer("dlq")
    dlq.subscribe([names.DEAD_LETTER.name])
    letter = dlq.poll(0)
    assert letter is not None and dlq.poll(0) is None
    _record, datum = codec.decode(letter.value)
    assert datum["reason"] == reason and datum["consumer"] == names.GROUP_QUERY_INDEXER
    assert datum["value"] == spans[2].value


def test_an_item_the_store_was_too_busy_for_is_retried_not_dead_lettered(
    broker: InMemoryBroker, store: FlakyStore, codec: AvroCodec
) -> None:
    publish_spans(broker, codec, 3)
    probe = broker.consumer("peek")
    probe.subscribe([names.DERIVED_SPAN.name])
    first = probe.poll(0)
    assert first is not None
    busy_id = codec.decode(first.value)[1]["span_id"]
    store.refuse = {busy_id: "429 es_rejected_execution_exception: queue full"}
    idx = make(broker, store, codec)
    with pytest.raises(TransientIO, match="429"):
        idx.run_once(0.1)
    # Its partition commits nothing from it on; the others commit.
    left = uncommitted(broker)
    assert first in left and idx.settled == 3 - len(left) and idx.dead_letters == 0
    store.refuse = {}
    idx.run_once(0.1)
    assert idx.indexed == 3 and idx.dead_letters == 0 and uncommitted(broker) == []
    assert store.count("spans", Query()) == 3


class Steps:
    """A stop flag for run_indexer that moves the clock instead of sleeping, and stops once
    `done()` holds."""

    def __init__(self, clock: ManualClock, done: Callable[[], bool]) -> None:
        self.clock = clock
        self.done = done

    def wait(self, timeout_s: float) -> bool:
        self.clock.advance(int(timeout_s * S))
        return self.done()


def test_the_loop_retries_with_backoff_and_says_one_line_per_outage(
    broker: InMemoryBroker, store: FlakyStore, codec: AvroCodec
) -> None:
    publish_spans(broker, codec, 5)
    idx = make(broker, store, codec)
    store.down = 6
    said: list[str] = []
    assert isinstance(idx.clock, ManualClock)
    stop = Steps(idx.clock, lambda: idx.indexed == 5)
    run_indexer(idx, stop, said.append, poll_s=0.05)
    assert len(said) == 2, said
    assert said[0].startswith("indexing paused: OpenSearch at test is unreachable")
    assert said[1] == "indexing resumed after 26s paused (5 retries)"  # .5+1+2+4+8+10
    assert store.count("spans", Query()) == 5 and store.bulks == 7
