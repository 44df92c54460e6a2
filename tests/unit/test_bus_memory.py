from __future__ import annotations

import uuid

import pytest

from tests.contract.bus_contract import BusContract
from zerotrace import names
from zerotrace.bus_memory import InMemoryBroker


class TestInMemoryBus(BusContract):
    @pytest.fixture
    def bus(self) -> InMemoryBroker:
        return InMemoryBroker()

    @pytest.fixture
    def topic(self, bus: InMemoryBroker) -> str:
        name = f"ct-{uuid.uuid4().hex[:8]}"
        bus.create_topic(name, 3)
        return name


def test_unknown_topic_is_refused_like_kafka_without_auto_create() -> None:
    broker = InMemoryBroker()
    with pytest.raises(KeyError, match="does not exist"):
        broker.producer().produce("nope", None, b"x")


def test_ensure_topics_creates_the_registry_topics() -> None:
    broker = InMemoryBroker()
    broker.ensure_topics()
    assert broker.end_offsets(names.RAW_FILEIO.name) == [0] * names.RAW_FILEIO.partitions
