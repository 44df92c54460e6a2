"""A replay's period read back from the real Kafka by time: exactly the messages stamped in
[from, to), in time order across partitions, each partition in offset order, with memory
bounded by pausing a partition that runs ahead."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from zerotrace import names, replay_source_kafka
from zerotrace.bus import Message
from zerotrace.bus_kafka import KafkaBus
from zerotrace.replay_source_kafka import KafkaPeriod

pytestmark = pytest.mark.integration

# Recent enough that no retention deletes them, old enough to be clearly in the past.
BASE_MS = time.time_ns() // 1_000_000 - 600_000
FROM_MS, TO_MS = BASE_MS + 10_000, BASE_MS + 20_000

# Per partition, the timestamps of its messages in produce (offset) order: a burst before the
# period, one inside (interleaved across partitions, with a tie, the first on `from` exactly)
# and one after (the first on `to` exactly: excluded). Partition 1 ends inside the period.
STAMPS = {
    0: [
        *(BASE_MS, BASE_MS + 1, BASE_MS + 2),
        *(FROM_MS, FROM_MS + 30, FROM_MS + 60, FROM_MS + 90),
        *(TO_MS + 5, TO_MS + 6),
    ],
    1: [BASE_MS + 3, *(FROM_MS + 10, FROM_MS + 20, FROM_MS + 40, FROM_MS + 50, FROM_MS + 9_999)],
    2: [*(FROM_MS + 30, FROM_MS + 31, FROM_MS + 95), *(TO_MS, TO_MS + 1, TO_MS + 2)],
}
Stamped = tuple[str, int, int, int]  # topic, partition, offset, timestamp


def make_topic(bootstrap: str, name: str, partitions: int = 3) -> str:
    KafkaBus(bootstrap).ensure_topics([names.Topic(name, "", "test", partitions, 3_600_000)])
    return name


def produce(bootstrap: str, topic: str, stamps: dict[int, list[int]]) -> list[Stamped]:
    """Every message, as (topic, partition, offset, timestamp); the value names it too."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    out = []
    for partition, times in stamps.items():
        for offset, ms in enumerate(times):
            value = f"{partition}/{offset}".encode()
            producer.produce(topic, value, b"k", partition=partition, timestamp=ms)
            out.append((topic, partition, offset, ms))
    assert producer.flush(30) == 0
    return out


def in_time_order(messages: list[Stamped], from_ms: int, to_ms: int) -> list[Stamped]:
    inside = [m for m in messages if from_ms <= m[3] < to_ms]
    return sorted(inside, key=lambda m: (m[3], m[0], m[1], m[2]))


def stamped(messages: Iterator[Message]) -> list[Stamped]:
    out = []
    for m in messages:
        assert m.value == f"{m.partition}/{m.offset}".encode() and m.key == b"k"
        out.append((m.topic, m.partition, m.offset, m.timestamp_ms))
    return out


@pytest.fixture
def topic(kafka_bootstrap: str, unique: str) -> str:
    return make_topic(kafka_bootstrap, f"replay-src-{unique}")


@pytest.fixture
def everything(kafka_bootstrap: str, topic: str) -> list[Stamped]:
    return produce(kafka_bootstrap, topic, STAMPS)


def test_a_period_is_exactly_the_messages_stamped_in_it_in_time_order(
    kafka_bootstrap: str, topic: str, everything: list[Stamped]
) -> None:
    period = KafkaPeriod(kafka_bootstrap, [topic], FROM_MS, TO_MS)
    try:
        assert period.ranges() == {(topic, 0): (3, 7), (topic, 1): (1, 6), (topic, 2): (0, 3)}
        out = stamped(period.messages())
    finally:
        period.close()
    assert out == in_time_order(everything, FROM_MS, TO_MS)
    assert out[:5] == [
        (topic, 0, 3, FROM_MS),
        (topic, 1, 1, FROM_MS + 10),
        (topic, 1, 2, FROM_MS + 20),
        (topic, 0, 4, FROM_MS + 30),  # a tie in time: by partition
        (topic, 2, 0, FROM_MS + 30),
    ]
    for partition in STAMPS:
        offsets = [o for _t, p, o, _ms in out if p == partition]
        assert offsets == sorted(offsets)


@pytest.mark.parametrize(
    ("from_ms", "to_ms"),
    [
        (BASE_MS + 5_000, FROM_MS),  # between the bursts, up to the first inside, excluded
        (TO_MS + 3_600_000, TO_MS + 7_200_000),  # after every message
        (BASE_MS - 60_000, BASE_MS),  # before every message
    ],
    ids=["between", "after", "before"],
)
def test_a_period_with_nothing_in_it_yields_nothing(
    kafka_bootstrap: str, topic: str, everything: list[Stamped], from_ms: int, to_ms: int
) -> None:
    period = KafkaPeriod(kafka_bootstrap, [topic], from_ms, to_ms)
    try:
        assert period.ranges() == {}
        assert list(period.messages()) == []
    finally:
        period.close()


def test_a_topic_that_does_not_exist_is_skipped(
    kafka_bootstrap: str, topic: str, everything: list[Stamped], unique: str
) -> None:
    missing = f"replay-src-missing-{unique}"
    period = KafkaPeriod(kafka_bootstrap, [missing, topic], FROM_MS, TO_MS)
    try:
        assert {t for t, _p in period.ranges()} == {topic}
        assert stamped(period.messages()) == in_time_order(everything, FROM_MS, TO_MS)
    finally:
        period.close()


def test_a_partition_far_ahead_is_paused_and_resumed_and_nothing_is_lost(
    kafka_bootstrap: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partition 0 holds an old run and a new one, partition 1 the middle: whichever the
    consumer hears first, it buffers past the high mark while the other has nothing yet."""
    topic = make_topic(kafka_bootstrap, f"replay-src-ahead-{unique}", partitions=2)
    run = 150
    stamps = {
        0: [FROM_MS + i for i in range(run)] + [FROM_MS + 5_000 + i for i in range(run)],
        1: [FROM_MS + 2_000 + i for i in range(run)],
    }
    everything = produce(kafka_bootstrap, topic, stamps)

    calls: list[tuple[str, tuple[str, int]]] = []

    class Recording(Consumer):
        def pause(self, partitions: list[TopicPartition]) -> Any:
            calls.extend(("pause", (tp.topic, tp.partition)) for tp in partitions)
            return super().pause(partitions)

        def resume(self, partitions: list[TopicPartition]) -> Any:
            calls.extend(("resume", (tp.topic, tp.partition)) for tp in partitions)
            return super().resume(partitions)

    monkeypatch.setattr(replay_source_kafka, "HIGH_BUFFERED", 5)
    monkeypatch.setattr(replay_source_kafka, "LOW_BUFFERED", 2)
    monkeypatch.setattr(replay_source_kafka, "Consumer", Recording)
    period = KafkaPeriod(kafka_bootstrap, [topic], FROM_MS, TO_MS)
    try:
        out = stamped(period.messages())
    finally:
        period.close()
    assert out == in_time_order(everything, FROM_MS, TO_MS)
    assert len(out) == 3 * run
    assert any(kind == "resume" for kind, _ in calls)  # the high mark was reached, and left
