"""The schema registry port: fingerprint -> writer schema.

A reader needs the writer's schema to decode Avro. Writers register every schema they use;
readers look up fingerprints they do not know (a newer writer added a field, say). The Kafka
implementation (`schema_registry_kafka`) keeps them on a compacted topic, so lake jobs can
read them too; this in-memory twin serves the embedded mode and unit tests.
"""

from __future__ import annotations

import threading
from typing import Protocol

from zerotrace.schemas import Schema, parse_schema_text


class SchemaRegistry(Protocol):
    def register(self, schema: Schema) -> None:
        """Make the schema findable by its fingerprint. Idempotent; may block on I/O."""
        ...

    def lookup(self, fingerprint: bytes) -> Schema | None:
        """The schema with this fingerprint, or None when nobody registered it."""
        ...


class InMemorySchemaRegistry:
    def __init__(self) -> None:
        self._by_fingerprint: dict[bytes, str] = {}
        self._lock = threading.Lock()

    def register(self, schema: Schema) -> None:
        with self._lock:
            self._by_fingerprint[schema.fingerprint] = schema.canonical

    def lookup(self, fingerprint: bytes) -> Schema | None:
        with self._lock:
            text = self._by_fingerprint.get(fingerprint)
        return None if text is None else parse_schema_text(text)
