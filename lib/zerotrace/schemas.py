"""The Avro schemas in schemas/ as parsed objects, by record full name and by fingerprint.

Read, then parse: `load_schema_dir` reads files; `parse_schema_text` is pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import SchemaParseException, fingerprint, to_parsing_canonical_form

from zerotrace.errors import ConfigError

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


@dataclass(frozen=True)
class Schema:
    full_name: str
    parsed: Any  # fastavro's parsed form, what its readers and writers take (marked parsed)
    canonical: str  # Avro Parsing Canonical Form: the text the fingerprint is taken of
    fingerprint: bytes  # 8 bytes, CRC-64-AVRO, little-endian as the single-object spec says


def parse_schema_text(text: str) -> Schema:
    """One record schema. Anything else (bad JSON, a bad Avro schema, a schema that is not a
    record) is a ConfigError saying why."""
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("type") != "record":
            raise ValueError("each .avsc holds one record")
        # With fastavro's "parsed" mark (its default), which its readers and writers check
        # to skip parsing the schema again on every call: without it a 20-field record
        # took ~3x as long to encode or decode (bench.collector_stages).
        parsed = parse_schema(raw)
    except (ValueError, TypeError, KeyError, SchemaParseException) as exc:
        raise ConfigError(f"not a valid Avro schema: {exc}") from exc
    canonical = to_parsing_canonical_form(parsed)
    full_name = f"{raw['namespace']}.{raw['name']}" if "namespace" in raw else raw["name"]
    digest = bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
    return Schema(full_name, parsed, canonical, digest)


def load_schema_dir(root: Path = SCHEMA_DIR) -> dict[str, Schema]:
    """Every `.avsc` under root, by record full name."""
    schemas: dict[str, Schema] = {}
    for path in sorted(root.rglob("*.avsc")):
        schema = parse_schema_text(path.read_text())
        if schema.full_name in schemas:
            raise ConfigError(f"{path}: record {schema.full_name} is defined twice")
        schemas[schema.full_name] = schema
    return schemas
