"""The one contract every bus keeps (bus.py). A suite subclasses BusContract and overrides
the `bus` and `topic` fixtures; the same tests run against Kafka and the in-process twin."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from zerotrace.bus import Consumer, Message


def drain(consumer: Consumer, expected: int, timeout_s: float = 30.0) -> list[Message]:
    import time

    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            out.append(message)
    return out


class BusContract:
    @pytest.fixture
    def bus(self) -> Any:
        raise NotImplementedError

    @pytest.fixture
    def topic(self, bus: Any) -> str:
        """A fresh topic with 3 partitions."""
        raise NotImplementedError

    def group(self) -> str:
        return f"ct-{uuid.uuid4().hex[:8]}"

    def test_produce_then_consume_everything(self, bus: Any, topic: str) -> None:
        producer = bus.producer()
        for i in range(20):
            producer.produce(topic, f"k{i % 4}".encode(), f"v{i}".encode())
        assert producer.flush(30) == 0
        assert producer.failed == 0
        consumer = bus.consumer(self.group())
        consumer.subscribe([topic])
        got = drain(consumer, 20)
        consumer.close()
        assert sorted(m.value for m in got) == sorted(f"v{i}".encode() for i in range(20))
        assert all(m.topic == topic for m in got)

    def test_same_key_same_partition_in_order(self, bus: Any, topic: str) -> None:
        producer = bus.producer()
        for i in range(30):
            producer.produce(topic, f"conn-{i % 3}".encode(), str(i).encode())
        assert producer.flush(30) == 0
        consumer = bus.consumer(self.group())
        consumer.subscribe([topic])
        got = drain(consumer, 30)
        consumer.close()
        by_key: dict[bytes | None, list[Message]] = {}
        for m in got:
            by_key.setdefault(m.key, []).append(m)
        assert len(by_key) == 3
        for messages in by_key.values():
            assert len({m.partition for m in messages}) == 1
            values = [int(m.value) for m in sorted(messages, key=lambda m: m.offset)]
            assert values == sorted(values)

    def test_uncommitted_messages_are_read_again(self, bus: Any, topic: str) -> None:
        producer = bus.producer()
        for i in range(6):
            producer.produce(topic, b"same-key", str(i).encode())
        assert producer.flush(30) == 0
        group = self.group()
        first = bus.consumer(group)
        first.subscribe([topic])
        got = drain(first, 6)
        first.commit(got[2])  # messages 0..2 are done; 3..5 are not
        first.close()
        second = bus.consumer(group)
        second.subscribe([topic])
        again = drain(second, 3)
        extra = second.poll(1.0)
        second.close()
        assert [m.value for m in again] == [b"3", b"4", b"5"]
        assert extra is None

    def test_groups_are_independent(self, bus: Any, topic: str) -> None:
        producer = bus.producer()
        producer.produce(topic, b"k", b"only")
        assert producer.flush(30) == 0
        for _ in range(2):
            consumer = bus.consumer(self.group())
            consumer.subscribe([topic])
            got = drain(consumer, 1)
            consumer.commit(got[0])
            consumer.close()
            assert [m.value for m in got] == [b"only"]

    def test_poll_times_out_with_none(self, bus: Any, topic: str) -> None:
        consumer = bus.consumer(self.group())
        consumer.subscribe([topic])
        assert consumer.poll(0.2) is None
        consumer.close()
