"""In-process bus: the twin of Kafka for the embedded mode and unit tests.

Thread-safe: the collector, correlator and indexer of `zerotrace run` each use it from their
own thread. Messages are kept in memory for the life of the process, unless the broker is
made with `trim_committed` (as `zerotrace run` does: the store is the durable copy, and a long
run must not hold every byte it ever captured).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from zerotrace import names
from zerotrace.bus import Message, partition_for

# Committed messages are dropped in batches of at least this many (a list's prefix deletion
# copies the rest, so one message at a time would be quadratic).
TRIM_BATCH = 64


class InMemoryBroker:
    """trim_committed: drop messages once every group subscribed to their topic has committed
    them, so a long embedded run holds only its backlog, not all it ever saw. A group that
    subscribes later starts at the oldest message still kept."""

    def __init__(self, trim_committed: bool = False) -> None:
        self._logs: dict[str, list[list[Message]]] = {}
        self._base: dict[tuple[str, int], int] = {}  # offset of each log's first message
        self._groups: dict[str, set[str]] = {}  # topic -> groups subscribed to it
        self._trim = trim_committed
        self._committed: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> next
        self._counter = 0
        self._cond = threading.Condition()

    def ensure_topics(self) -> None:
        for topic in names.ALL_TOPICS:
            self.create_topic(topic.name, topic.partitions)

    def create_topic(self, name: str, partitions: int) -> None:
        with self._cond:
            self._logs.setdefault(name, [[] for _ in range(partitions)])

    def producer(self) -> InMemoryProducer:
        return InMemoryProducer(self)

    def consumer(self, group: str) -> InMemoryConsumer:
        return InMemoryConsumer(self, group)

    # Internal API of the producer and consumer below.

    def _append(self, topic: str, key: bytes | None, value: bytes) -> None:
        with self._cond:
            if topic not in self._logs:
                # Kafka with auto-create off refuses unknown topics; so does the twin.
                raise KeyError(f"topic {topic!r} does not exist (ensure_topics first)")
            parts = self._logs[topic]
            partition = partition_for(key, len(parts), self._counter)
            self._counter += 1
            log = parts[partition]
            offset = self._base.get((topic, partition), 0) + len(log)
            log.append(Message(topic, partition, offset, key, value, time.time_ns() // 1_000_000))
            self._cond.notify_all()

    def _next(
        self,
        group: str,
        topics: Sequence[str],
        positions: dict[tuple[str, int], int],
        timeout_s: float,
        turn: list[int],
    ) -> Message | None:
        """The next message of the subscription. Partitions take turns (turn[0] is where
        the last scan stopped), as a Kafka consumer interleaves them, so one busy partition
        does not hold the others back. turn[1] is the count of appends when a scan last found
        nothing: until another append, a poll does not scan again (the embedded node polls
        every step's input every turn, most of them empty)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if turn[1] == self._counter:  # nothing appended since it found nothing
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    self._cond.wait(remaining)
                    continue
                sources = [(t, p) for t in topics for p in range(len(self._logs.get(t, [])))]
                for i in range(len(sources)):
                    index = (turn[0] + i) % len(sources)
                    key = sources[index]
                    if key not in positions:
                        positions[key] = self._committed.get((group, *key), 0)
                    log = self._logs[key[0]][key[1]]
                    base = self._base.get(key, 0)
                    positions[key] = max(positions[key], base)  # trimmed: oldest kept
                    if positions[key] - base < len(log):
                        message = log[positions[key] - base]
                        positions[key] += 1
                        turn[0] = index + 1
                        return message
                turn[1] = self._counter
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def _commit(self, group: str, message: Message) -> None:
        with self._cond:
            self._committed[(group, message.topic, message.partition)] = message.offset + 1
            if self._trim:
                self._drop_committed(message.topic, message.partition)

    def _subscribe(self, group: str, topics: Sequence[str]) -> None:
        with self._cond:
            for topic in topics:
                self._groups.setdefault(topic, set()).add(group)

    def _drop_committed(self, topic: str, partition: int) -> None:
        groups = self._groups.get(topic)
        if not groups:
            return
        low = min(self._committed.get((g, topic, partition), 0) for g in groups)
        base = self._base.get((topic, partition), 0)
        if low - base >= TRIM_BATCH:
            del self._logs[topic][partition][: low - base]
            self._base[(topic, partition)] = low

    def end_offsets(self, topic: str) -> list[int]:
        with self._cond:
            return [
                self._base.get((topic, p), 0) + len(log)
                for p, log in enumerate(self._logs.get(topic, []))
            ]


class InMemoryProducer:
    def __init__(self, broker: InMemoryBroker) -> None:
        self._broker = broker

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._broker._append(topic, key, value)

    def flush(self, timeout_s: float) -> int:
        return 0  # appends are synchronous

    @property
    def failed(self) -> int:
        return 0

    def close(self) -> None:
        pass


class InMemoryConsumer:
    def __init__(self, broker: InMemoryBroker, group: str) -> None:
        self._broker = broker
        self._group = group
        self._topics: list[str] = []
        self._positions: dict[tuple[str, int], int] = {}
        self._turn = [0, -1]  # see InMemoryBroker._next

    def subscribe(self, topics: Sequence[str]) -> None:
        self._topics = list(topics)
        self._positions.clear()
        self._turn[1] = -1
        self._broker._subscribe(self._group, self._topics)

    def poll(self, timeout_s: float) -> Message | None:
        return self._broker._next(self._group, self._topics, self._positions, timeout_s, self._turn)

    def commit(self, message: Message) -> None:
        self._broker._commit(self._group, message)

    def close(self) -> None:
        self._topics = []
