"""Avro single-object encoding: every message names its writer schema.

Wire format (Avro specification, "Single object encoding"):
    C3 01 | 8-byte CRC-64-AVRO fingerprint of the writer schema (little-endian) | Avro binary

A reader resolves the fingerprint to the writer schema (locally, or through the schema
registry for schemas a newer writer added) and reads with its own version of the record as the
reader schema, so an old reader sees a newer writer's data minus the fields it does not know.
Pure apart from the registry calls; transports call `encode`/`decode` in one line.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from zerotrace.errors import PoisonInput
from zerotrace.schema_registry import SchemaRegistry
from zerotrace.schemas import Schema

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8


class AvroCodec:
    def __init__(self, schemas: Mapping[str, Schema], registry: SchemaRegistry) -> None:
        """schemas: this process's own versions of the records, by full name."""
        self._schemas = dict(schemas)
        self._by_fingerprint = {s.fingerprint: s for s in self._schemas.values()}
        self._registry = registry
        self._registered: set[bytes] = set()

    def schema(self, record: str) -> Schema:
        try:
            return self._schemas[record]
        except KeyError:
            raise KeyError(f"no schema for record {record!r} in schemas/") from None

    def encode(self, record: str, datum: Mapping[str, Any]) -> bytes:
        """Raises ValueError (fastavro's) when datum does not fit the schema: a bug in the
        caller, not poison input, so it is not wrapped."""
        schema = self.schema(record)
        if schema.fingerprint not in self._registered:
            self._registry.register(schema)
            self._registered.add(schema.fingerprint)
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(schema.fingerprint)
        schemaless_writer(out, schema.parsed, dict(datum), strict_allow_default=True)
        return out.getvalue()

    def decode(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """(record full name, datum). Raises PoisonInput with a one-line reason."""
        if len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise PoisonInput(
                f"not an Avro single-object message ({len(data)} bytes, starts {data[:4].hex()})"
            )
        writer = self._writer_schema(data[2:HEADER_LEN])
        reader = self._schemas.get(writer.full_name, writer)
        buf = io.BytesIO(data[HEADER_LEN:])
        try:
            datum = schemaless_reader(buf, writer.parsed, reader.parsed)
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, ...
            raise PoisonInput(
                f"{writer.full_name}: body does not decode ({type(exc).__name__}: {exc})"
            ) from exc
        if buf.tell() != len(data) - HEADER_LEN:
            raise PoisonInput(f"{writer.full_name}: trailing bytes after the record")
        if not isinstance(datum, dict):
            raise PoisonInput(
                f"{writer.full_name}: decoded to {type(datum).__name__}, not a record"
            )
        return writer.full_name, datum

    def _writer_schema(self, fingerprint: bytes) -> Schema:
        known = self._by_fingerprint.get(fingerprint)
        if known is not None:
            return known
        found = self._registry.lookup(fingerprint)
        if found is None:
            raise PoisonInput(f"unknown writer schema fingerprint {fingerprint.hex()}")
        self._by_fingerprint[fingerprint] = found
        return found
