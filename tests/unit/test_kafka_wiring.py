"""Kafka for the distributed commands (zerotrace_cli/kafka_wiring.py), without a broker: the
codec reads its writers' schemas from Kafka's schema topic and connects only when used, and
the bus says in one line that Kafka is away. Against a running Kafka every distributed
command uses both (tests/integration)."""

from __future__ import annotations

import socket

import pytest

from zerotrace import settings
from zerotrace.errors import TransientIO
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_cli.kafka_wiring import kafka_bus, kafka_codec

pytestmark = pytest.mark.unit


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_the_codec_knows_every_schema_and_registers_on_kafka() -> None:
    codec = kafka_codec(f"127.0.0.1:{closed_port()}")  # nothing is asked of Kafka yet
    assert isinstance(codec._registry, KafkaSchemaRegistry)
    for full_name, schema in load_schema_dir().items():
        assert codec.schema(full_name).fingerprint == schema.fingerprint


def test_the_bus_says_in_one_line_that_kafka_is_away() -> None:
    bootstrap = f"127.0.0.1:{closed_port()}"
    common = settings.load(settings.CommonSettings, {"ZEROTRACE_KAFKA": bootstrap})
    with pytest.raises(TransientIO) as caught:
        kafka_bus(common)
    line = str(caught.value)
    assert line.startswith(f"Kafka at {bootstrap} does not answer") and "\n" not in line
    assert "zerotrace infra up" in line
