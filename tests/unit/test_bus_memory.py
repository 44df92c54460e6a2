from __future__ import annotations

import uuid

import pytest

from tests.contract.bus_contract import BusContract
from zerotrace import names
from zerotrace.bus import Message
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


def test_an_empty_poll_scans_again_only_after_an_append() -> None:
    """A consumer that found nothing does not scan every partition again until a message is
    appended somewhere (the embedded node polls each step's input every turn); what comes
    after that is still read, on any topic it follows."""
    broker = InMemoryBroker()
    broker.create_topic("a", 4)
    broker.create_topic("b", 4)
    consumer = broker.consumer("g")
    consumer.subscribe(["a"])
    assert consumer.poll(0) is None
    broker._logs["a"][2].append(Message("a", 2, 0, None, b"planted", 0))  # not an append
    assert consumer.poll(0) is None  # no scan: the count of appends did not move
    broker.producer().produce("b", b"k", b"elsewhere")
    assert consumer.poll(0) == Message("a", 2, 0, None, b"planted", 0)  # an append: it scans
    consumer.subscribe(["b"])
    message = consumer.poll(0)
    assert message is not None and message.value == b"elsewhere"
