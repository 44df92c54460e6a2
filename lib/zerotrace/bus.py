"""The bus port: topics of keyed byte messages, partitioned by key, consumed in groups.

Implementations: Kafka (`bus_kafka`, distributed mode) and in-process (`bus_memory`, embedded
mode and unit tests). One contract suite (tests/contract/bus_contract.py) runs against both.

Semantics the code relies on, on both sides:
- messages with the same key land on the same partition, in produce order;
- a consumer group reads each partition from its last committed offset (or from the start
  when it has none), so an uncommitted message is read again after a restart;
- commit(message) commits that message and everything before it on its partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int


class Producer(Protocol):
    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Queue one message. Does not wait for the broker; may raise Backpressure when the
        local queue is full (the caller slows down, it does not drop)."""
        ...

    def flush(self, timeout_s: float) -> int:
        """Wait until queued messages are acknowledged; returns how many are still pending
        (0 means everything produced so far is durable on the broker)."""
        ...

    @property
    def failed(self) -> int:
        """Messages whose delivery failed for good since this producer was made."""
        ...

    def close(self) -> None: ...


class Consumer(Protocol):
    def subscribe(self, topics: Sequence[str]) -> None: ...

    def poll(self, timeout_s: float) -> Message | None:
        """The next message, or None when none came within timeout_s."""
        ...

    def commit(self, message: Message) -> None:
        """Commit synchronously: `message` and everything before it on its partition are done."""
        ...

    def close(self) -> None: ...


class Bus(Protocol):
    """What a service is given: a way to make producers and consumers, and topic set-up."""

    def ensure_topics(self) -> None:
        """Create every topic of the names registry that does not exist yet; idempotent."""
        ...

    def producer(self) -> Producer: ...

    def consumer(self, group: str) -> Consumer: ...


def partition_for(key: bytes | None, partitions: int, counter: int) -> int:
    """Partition of a message in the in-process bus. Keyless messages go round-robin.

    Kafka uses murmur2 for keys; the in-process bus needs only the same guarantee (same key,
    same partition), not the same numbers, so it uses a cheap stable hash.
    """
    if key is None:
        return counter % partitions
    import zlib

    return zlib.crc32(key) % partitions
