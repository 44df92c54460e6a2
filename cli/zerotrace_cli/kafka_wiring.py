"""Kafka for the distributed commands: the bus (topics ensured, one line when Kafka is away)
and the codec whose schema registry is Kafka's compacted schema topic, both with the
security of the common settings (TLS, SASL; zerotrace.kafka_security)."""

from __future__ import annotations

from typing import Any

from zerotrace import settings
from zerotrace.codec import AvroCodec
from zerotrace.kafka_security import kafka_security
from zerotrace.schemas import load_schema_dir


def kafka_codec(kafka: settings.CommonSettings | str) -> AvroCodec:
    """The codec over the Kafka of the settings, or of a bare bootstrap address (PLAINTEXT)."""
    from zerotrace.schema_registry_kafka import KafkaSchemaRegistry

    if isinstance(kafka, str):
        return AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka))
    registry = KafkaSchemaRegistry(kafka.kafka, kafka_security(kafka))
    return AvroCodec(load_schema_dir(), registry)


def kafka_bus(common: settings.CommonSettings) -> Any:
    from zerotrace.bus_kafka import KafkaBus

    bus = KafkaBus(common.kafka, security=kafka_security(common))
    # One line when Kafka is away (TransientIO) or refuses these settings (ConfigError).
    bus.ensure_topics()
    return bus
