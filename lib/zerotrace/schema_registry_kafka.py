"""Schema registry on a compacted Kafka topic (names.SCHEMAS): key = fingerprint, value =
the schema's Parsing Canonical Form. No registry service to run; any Kafka reader can use it."""

from __future__ import annotations

import threading

from zerotrace import names
from zerotrace.bus_kafka import KafkaProducer, read_topic_from_start
from zerotrace.errors import TransientIO
from zerotrace.kafka_security import PLAINTEXT, KafkaSecurity
from zerotrace.schemas import Schema, parse_schema_text


class KafkaSchemaRegistry:
    def __init__(self, bootstrap: str, security: KafkaSecurity = PLAINTEXT) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._known: dict[bytes, Schema] = {}
        self._lock = threading.Lock()

    def register(self, schema: Schema) -> None:
        with self._lock:
            if schema.fingerprint in self._known:
                return
        producer = KafkaProducer(self._bootstrap, "zerotrace-schemas", security=self._security)
        producer.produce(names.SCHEMAS.name, schema.fingerprint, schema.canonical.encode())
        if producer.flush(30) != 0 or producer.failed:
            raise TransientIO(f"could not register schema {schema.full_name} on Kafka")
        with self._lock:
            self._known[schema.fingerprint] = schema

    def lookup(self, fingerprint: bytes) -> Schema | None:
        with self._lock:
            if fingerprint in self._known:
                return self._known[fingerprint]
        for message in read_topic_from_start(
            self._bootstrap, names.SCHEMAS.name, security=self._security
        ):
            if message.key is not None and message.value:
                schema = parse_schema_text(message.value.decode())
                with self._lock:
                    self._known[message.key] = schema
        with self._lock:
            return self._known.get(fingerprint)
