from __future__ import annotations

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
