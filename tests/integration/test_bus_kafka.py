"""The bus contract against the real broker, and how the Kafka clients say what goes wrong."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from tests.contract.bus_contract import BusContract
from zerotrace.bus_kafka import KafkaBus
from zerotrace.names import Topic


class TestKafkaBus(BusContract):
    @pytest.fixture
    def bus(self, kafka_bootstrap: str) -> KafkaBus:
        return KafkaBus(kafka_bootstrap)

    @pytest.fixture
    def topic(self, bus: KafkaBus) -> str:
        topic = Topic(f"ct-{uuid.uuid4().hex[:8]}", "", "test", 3, 3_600_000)
        bus.ensure_topics([topic])
        return topic.name


def test_unreachable_broker_is_one_clear_line() -> None:
    from zerotrace.bus_kafka import check_reachable
    from zerotrace.errors import TransientIO

    with pytest.raises(TransientIO) as info:
        check_reachable("127.0.0.1:1", timeout_s=2)
    assert "\n" not in str(info.value)
    assert "zerotrace infra up" in str(info.value)


def test_a_subscribed_topic_that_does_not_exist_is_said_once_and_counted_each_time(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker would make a topic a producer names (auto.create.topics.enable), a consumer
    never does: librdkafka reports each missing topic, which poll() used to swallow."""
    consumer = KafkaBus(kafka_bootstrap).consumer(f"it-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([f"it-missing-{uuid.uuid4().hex[:8]}" for _ in range(2)])
    deadline = time.monotonic() + 30
    try:
        with caplog.at_level(logging.WARNING, logger="zerotrace.bus_kafka"):
            while len(caplog.records) < 1 or consumer.counters() != {"UNKNOWN_TOPIC_OR_PART": 2}:
                assert consumer.poll(0.5) is None  # and polling goes on
                assert time.monotonic() < deadline, consumer.counters()
            for _ in range(4):
                assert consumer.poll(0.5) is None
    finally:
        consumer.close()
    assert consumer.counters() == {"UNKNOWN_TOPIC_OR_PART": 2}  # one per topic
    [line] = [r.getMessage() for r in caplog.records]
    assert "UNKNOWN_TOPIC_OR_PART: a subscribed topic does not exist (yet)" in line
    assert "Broker: Unknown topic or partition" in line and "\n" not in line
