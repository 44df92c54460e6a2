"""Kafka for the distributed commands: the bus (topics ensured, one line when Kafka is away)
and the codec whose schema registry is Kafka's compacted schema topic."""

from __future__ import annotations

from typing import Any

from zerotrace import settings
from zerotrace.codec import AvroCodec
from zerotrace.schemas import load_schema_dir


def kafka_codec(bootstrap: str) -> AvroCodec:
    from zerotrace.schema_registry_kafka import KafkaSchemaRegistry

    return AvroCodec(load_schema_dir(), KafkaSchemaRegistry(bootstrap))


def kafka_bus(common: settings.CommonSettings) -> Any:
    from zerotrace.bus_kafka import KafkaBus

    bus = KafkaBus(common.kafka)
    bus.ensure_topics()  # raises TransientIO with one line when Kafka is away
    return bus
