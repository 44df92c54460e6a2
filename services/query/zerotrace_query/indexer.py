"""Derived topics -> store. Side effect first, then commit: a batch's offsets are committed only
after the store acknowledged every document of it (STYLE.md rule 6)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from zerotrace import names
from zerotrace.bus import Consumer, Message, Producer
from zerotrace.clock import Clock
from zerotrace.codec import AvroCodec
from zerotrace.deadletter import dead_letter
from zerotrace.errors import PoisonInput, TransientIO
from zerotrace.store import Store
from zerotrace_query.documents import INDEX_SPECS, document_for

log = logging.getLogger(__name__)
CONSUMER = names.GROUP_QUERY_INDEXER
INPUT_TOPICS = tuple(t.name for t in names.INDEXED_TOPICS)


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
    ) -> None:
        self._consumer = consumer
        self._dlq = dlq
        self._store = store
        self._codec = codec
        self._clock = clock
        self._on_document = on_document
        self.batch_size = batch_size  # documents a run_once writes at most
        self.indexed = 0
        self.dead_letters = 0
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
        the store is away (nothing committed, so the batch is read again later)."""
        batch: list[Message] = []
        message = self._consumer.poll(timeout_s)
        while message is not None:
            batch.append(message)
            if len(batch) >= self.batch_size:
                break
            message = self._consumer.poll(0)
        if not batch:
            return 0
        by_index: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for msg in batch:
            try:
                record, datum = self._codec.decode(msg.value)
                index, doc_id, doc = document_for(record, datum)
            except PoisonInput as exc:
                self._send_dead_letter(msg, exc.reason)
                continue
            by_index.setdefault(index, []).append((doc_id, doc))
        written = 0
        for index, docs in by_index.items():
            result = self._store.bulk_upsert(index, docs)
            for doc_id, reason in result.failed:
                # A refusal of one document is its own fault (mapping); retrying cannot help.
                log.warning("store refused %s/%s: %s", index, doc_id, reason)
                self.dead_letters += 1
            written += result.written
            self._store.refresh(index)
            if self._on_document is not None:
                failed = {doc_id for doc_id, _ in result.failed}
                for doc_id, doc in docs:
                    if doc_id not in failed:
                        self._on_document(index, doc)
        if self._dlq.flush(30) != 0:
            raise TransientIO("dead letters not acknowledged; batch not committed")
        last: dict[tuple[str, int], Message] = {}
        for msg in batch:
            last[(msg.topic, msg.partition)] = msg
        for msg in last.values():
            self._consumer.commit(msg)
        self.indexed += written
        return written

    def _send_dead_letter(self, msg: Message, reason: str) -> None:
        self.dead_letters += 1
        topic, key, value = dead_letter(self._codec, msg, CONSUMER, reason, self._clock.now_ns())
        self._dlq.produce(topic, key, value)
