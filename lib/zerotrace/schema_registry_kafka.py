"""Schema registry on a compacted Kafka topic (names.SCHEMAS): key = fingerprint, value =
the schema's Parsing Canonical Form. No registry service to run; any Kafka reader can use it.

A fingerprint not known yet is looked up by reading the whole topic. A writer registers its
schema (acknowledged by the broker) before its first message, so a fingerprint the topic lacks
is poison (garbage bytes, a writer whose registration failed) and stays missing: it is not
looked up again for MISS_TTL_S (negative_cache.py), so a flood of such messages costs a topic
read per fingerprint per MISS_TTL_S, not one per message.
"""

from __future__ import annotations

import threading
from typing import Final

from zerotrace import names
from zerotrace.bus_kafka import KafkaProducer, read_topic_from_start
from zerotrace.clock import Clock, SystemClock
from zerotrace.errors import TransientIO
from zerotrace.kafka_security import PLAINTEXT, KafkaSecurity
from zerotrace.negative_cache import NegativeCache
from zerotrace.schemas import Schema, parse_schema_text

# Long enough that a stream of poison costs little (a topic read takes ~0.1-1 s), short enough
# that a schema registered late (by hand, or after a failed registration) is found soon.
MISS_TTL_S: Final = 30.0
# Unknown fingerprints remembered at once (~100 bytes each); a stream of distinct garbage
# fingerprints gains nothing from more, since each is read for once anyway.
MISSES_KEPT: Final = 1024


class KafkaSchemaRegistry:
    def __init__(
        self,
        bootstrap: str,
        security: KafkaSecurity = PLAINTEXT,
        *,
        clock: Clock | None = None,
        miss_ttl_s: float = MISS_TTL_S,
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._clock = clock or SystemClock()
        self._known: dict[bytes, Schema] = {}
        self._misses: NegativeCache[bytes] = NegativeCache(int(miss_ttl_s * 1e9), MISSES_KEPT)
        self._lock = threading.Lock()
        self.topic_reads = 0
        """Times the schema topic was read, for tests and reports."""

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
            if self._misses.missing(fingerprint, self._clock.now_ns()):
                return None
            self.topic_reads += 1
        for message in read_topic_from_start(
            self._bootstrap, names.SCHEMAS.name, security=self._security
        ):
            if message.key is not None and message.value:
                schema = parse_schema_text(message.value.decode())
                with self._lock:
                    self._known[message.key] = schema
        with self._lock:
            found = self._known.get(fingerprint)
            if found is None:
                self._misses.note(fingerprint, self._clock.now_ns())
            return found
