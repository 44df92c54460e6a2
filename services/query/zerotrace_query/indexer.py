"""Derived topics -> store. Side effect first, then commit (STYLE.md rule 6): an offset is
committed only when every message up to it on its partition has its document acknowledged by
the store item by item, or was refused for good and sits on the dead-letter topic with the
reason. Nothing is committed past a document the store did not take.

Pure core: `item_fate` (is one refused item worth retrying?), `settle` (what a batch's outcome
commits, dead-letters and reads again), `Outage` (the backoff, and what a person is told).
Shell: `Indexer` (poll, decode, bulk write, dead-letter, commit, rewind) and `run_indexer`
(the query service's loop).

Rewind. After a failed write the consumer must read each partition again from its first
unsettled message. With `reconnect` (the distributed mode, Kafka) the consumer is closed and a
new member joins the group, which starts every partition at its committed offset: the bus port
needs no seek, and the indexer keeps polling through an outage, so a long one never outlives
the group's max.poll.interval. Without it (the in-process bus, which has no such deadline) the
messages to read again are held and taken before anything new is polled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from zerotrace import names
from zerotrace.bus import Consumer, Message, Producer
from zerotrace.clock import Clock
from zerotrace.codec import AvroCodec
from zerotrace.cpu_slices import no_pause
from zerotrace.deadletter import dead_letter
from zerotrace.errors import PoisonInput, TransientIO
from zerotrace.store import Store
from zerotrace_query.documents import INDEX_SPECS, document_for

log = logging.getLogger(__name__)
CONSUMER = names.GROUP_QUERY_INDEXER
INPUT_TOPICS = tuple(t.name for t in names.INDEXED_TOPICS)
# Backoff between retries while the store is away: quick for a blip, at most this slow for a
# long outage. A retry costs one bulk request and, with Kafka, a rejoin of the group; the cap
# is also how long indexing may lag once the store is back (30 s added 26 s to a 66 s outage
# in tests/integration/test_indexer_faults.py).
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 10.0

Fate = Literal["written", "refused", "retry"]


# --- pure core -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What became of one message's document: written, refused for good (dead-letter it with
    `reason`), or to retry (the store was away or busy; `reason` says how)."""

    fate: Fate
    reason: str = ""


WRITTEN = Outcome("written")


def item_fate(reason: str) -> Fate:
    """The fate of a document in BulkResult.failed. Its reason starts with the item's HTTP
    status (store_opensearch.bulk_failures): 429 and any 5xx mean the store was busy or broken
    for a moment, so the document is written again later; any other status (400 mapping
    conflict, immense term, ...) or none (the store's own checks, store_rules.check_document)
    means the document itself is at fault, and retrying cannot help."""
    head = reason.split(" ", 1)[0]
    if head.isdigit() and (int(head) == 429 or int(head) >= 500):
        return "retry"
    return "refused"


def item_outcomes(doc_ids: Sequence[str], failed: Sequence[tuple[str, str]]) -> list[Outcome]:
    """The outcome of each document of one bulk write, in order, from its refusals."""
    refused = dict(failed)
    return [
        WRITTEN if (reason := refused.get(doc_id)) is None else Outcome(item_fate(reason), reason)
        for doc_id in doc_ids
    ]


@dataclass(frozen=True)
class Settlement:
    commit: tuple[Message, ...]  # per partition, the last message now settled: commit it
    dead_letters: tuple[tuple[Message, str], ...]  # refused for good, with the reason
    again: tuple[Message, ...]  # to read again, in batch order; empty when all settled
    written: int  # settled messages whose document the store acknowledged
    retry_reason: str  # why `again` is not empty ("" when it is)


def settle(batch: Sequence[Message], outcomes: Sequence[Outcome]) -> Settlement:
    """Per partition, in offset order: messages settle (written, or refused and dead-lettered)
    up to the first one to retry; from there on nothing settles and everything is read again,
    even documents written meanwhile (ids are deterministic, so writing them again replaces
    them) and refusals (dead-lettered once, when they settle, never once per retry)."""
    stuck: set[tuple[str, int]] = set()
    last: dict[tuple[str, int], Message] = {}
    dead: list[tuple[Message, str]] = []
    again: list[Message] = []
    written = 0
    reason = ""
    for msg, outcome in zip(batch, outcomes, strict=True):
        part = (msg.topic, msg.partition)
        if outcome.fate == "retry" and part not in stuck:
            stuck.add(part)
            reason = reason or outcome.reason
        if part in stuck:
            again.append(msg)
            continue
        last[part] = msg
        if outcome.fate == "refused":
            dead.append((msg, outcome.reason))
        else:
            written += 1
    return Settlement(tuple(last.values()), tuple(dead), tuple(again), written, reason)


class Outage:
    """Backoff between retries, and what a person is told: one line when the store goes away
    and one when it is back with how long it was down; never one line per retry."""

    def __init__(self, first_s: float = FIRST_BACKOFF_S, max_s: float = MAX_BACKOFF_S) -> None:
        self._first_s = first_s
        self._max_s = max_s
        self._delay_s = first_s
        self.since_ns: int | None = None  # when the current outage began; None: no outage
        self.retries = 0

    def failed(self, now_ns: int, reason: str) -> tuple[float, str | None]:
        """Seconds to wait before the next try, and the line to show (only at the start)."""
        line = None
        if self.since_ns is None:
            self.since_ns, self.retries, self._delay_s = now_ns, 0, self._first_s
            line = (
                f"indexing paused: {reason.rstrip('.')}; no offset is committed past an"
                f" unwritten document, retrying with backoff up to {self._max_s:.0f}s"
            )
        else:
            self.retries += 1
        delay, self._delay_s = self._delay_s, min(self._delay_s * 2, self._max_s)
        return delay, line

    def recovered(self, now_ns: int) -> str | None:
        """The line to show when a write succeeded after an outage; None without one."""
        if self.since_ns is None:
            return None
        down_s = (now_ns - self.since_ns) / 1e9
        line = f"indexing resumed after {down_s:.0f}s paused ({self.retries} retries)"
        self.since_ns = None
        return line


# --- the shell -----------------------------------------------------------------------------


class Indexer:
    def __init__(
        self,
        consumer: Consumer,
        dlq: Producer,
        store: Store,
        codec: AvroCodec,
        clock: Clock,
        on_document: Callable[[str, dict[str, Any]], None] | None = None,
        batch_size: int = 500,
        reconnect: Callable[[], Consumer] | None = None,
        pause: Callable[[], None] = no_pause,
    ) -> None:
        """`reconnect` makes a new consumer of the same group (see the module's docstring);
        `pause` is called after each index's write (zerotrace.cpu_slices: an embedded store's
        write is a few ms of CPU in one call, so a batch of several indices is pieces)."""
        self._pause = pause
        self._consumer = consumer
        self._dlq = dlq
        self._store = store
        self._codec = codec
        self.clock = clock
        self._on_document = on_document
        self._reconnect = reconnect
        self._held: list[Message] = []  # read again before polling (no reconnect)
        self.batch_size = batch_size  # documents a run_once writes at most
        self.indexed = 0
        self.dead_letters = 0
        self.settled = 0  # messages committed: written or dead-lettered
        for spec in INDEX_SPECS:
            store.ensure_index(spec)
        consumer.subscribe(INPUT_TOPICS)

    def close(self) -> None:
        """Leave the consumer group at once. Without it the group keeps the gone member
        until its session times out, and the next indexer of the group (a restart) waits
        for it before it gets any partition."""
        self._consumer.close()
        self._dlq.close()

    def run_once(self, timeout_s: float = 0.5) -> int:
        """Index one batch; returns how many documents were written. Raises TransientIO when
        the store (or the dead-letter topic) did not take all of it: what settled before the
        first unwritten document of each partition is committed, the rest is read again."""
        batch = self._next_batch(timeout_s)
        if not batch:
            return 0
        outcomes, docs = self._write(batch)
        result = settle(batch, outcomes)
        for msg, reason in result.dead_letters:
            log.warning("dead letter %s/%d@%d: %s", msg.topic, msg.partition, msg.offset, reason)
            self._dlq.produce(*dead_letter(self._codec, msg, CONSUMER, reason, self.clock.now_ns()))
        if result.dead_letters and self._dlq.flush(30) != 0:
            self._rewind(batch)
            raise TransientIO("dead letters not acknowledged by Kafka; batch not committed")
        for msg in result.commit:
            self._consumer.commit(msg)
        self.indexed += result.written
        self.dead_letters += len(result.dead_letters)
        self.settled += len(batch) - len(result.again)
        if self._on_document is not None:
            again = set(result.again)
            for msg, outcome, (index, doc) in zip(batch, outcomes, docs, strict=True):
                if outcome.fate == "written" and msg not in again:
                    self._on_document(index, doc)
        if result.again:
            self._rewind(result.again)
            raise TransientIO(result.retry_reason)
        return result.written

    def _next_batch(self, timeout_s: float) -> list[Message]:
        if self._held:
            held, self._held = self._held, []
            return held
        batch: list[Message] = []
        message = self._consumer.poll(timeout_s)
        while message is not None:
            batch.append(message)
            if len(batch) >= self.batch_size:
                break
            message = self._consumer.poll(0)
        return batch

    def _write(
        self, batch: Sequence[Message]
    ) -> tuple[list[Outcome], list[tuple[str, dict[str, Any]]]]:
        """Each message's outcome, and its (index, document) (("", {}) for poison)."""
        outcomes = [WRITTEN] * len(batch)
        docs: list[tuple[str, dict[str, Any]]] = [("", {})] * len(batch)
        by_index: dict[str, list[tuple[int, str]]] = {}
        for i, msg in enumerate(batch):
            try:
                record, datum = self._codec.decode(msg.value)
                index, doc_id, doc = document_for(record, datum)
            except PoisonInput as exc:
                outcomes[i] = Outcome("refused", exc.reason)
                continue
            docs[i] = (index, doc)
            by_index.setdefault(index, []).append((i, doc_id))
        away = ""  # once the store is away, the other indices are not tried in this batch
        for index, items in by_index.items():
            if not away:
                try:
                    result = self._store.bulk_upsert(index, [(d, docs[i][1]) for i, d in items])
                    self._store.refresh(index)
                except TransientIO as exc:
                    away = str(exc)
                self._pause()
            if away:
                for i, _ in items:
                    outcomes[i] = Outcome("retry", away)
                continue
            written = item_outcomes([doc_id for _, doc_id in items], result.failed)
            for (i, _), outcome in zip(items, written, strict=True):
                outcomes[i] = outcome
        return outcomes, docs

    def _rewind(self, again: Sequence[Message]) -> None:
        if self._reconnect is None:
            self._held = list(again)
            return
        self._consumer.close()
        self._consumer = self._reconnect()  # starts at the committed offsets
        self._consumer.subscribe(INPUT_TOPICS)


class Stop(Protocol):
    def wait(self, timeout_s: float) -> bool:
        """Wait up to timeout_s; True once the loop must stop (threading.Event, StopFlag)."""
        ...


def run_indexer(
    indexer: Indexer, stop: Stop, say: Callable[[str], None], poll_s: float = 0.5
) -> None:
    """The query service's loop until `stop`: index, and through an outage retry with backoff,
    telling `say` once when it begins and once when it ends."""
    outage = Outage()
    while not stop.wait(0):
        before = indexer.settled
        try:
            indexer.run_once(poll_s)
        except TransientIO as exc:
            delay, line = outage.failed(indexer.clock.now_ns(), str(exc))
            if line is not None:
                say(line)
            stop.wait(delay)
            continue
        if indexer.settled > before and (line := outage.recovered(indexer.clock.now_ns())):
            say(line)
