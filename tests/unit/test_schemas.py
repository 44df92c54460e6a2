"""The Avro schemas as parsed objects (lib/zerotrace/schemas.py): full names, canonical form
and CRC-64-AVRO fingerprints from text; every schema in schemas/ by its record name; a bad or
doubly defined schema is a ConfigError of one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastavro.schema import fingerprint

from zerotrace import names
from zerotrace.errors import ConfigError
from zerotrace.schemas import SCHEMA_DIR, load_schema_dir, parse_schema_text

pytestmark = pytest.mark.unit

POINT = {
    "type": "record",
    "name": "Point",
    "namespace": "demo",
    "doc": "docs are not part of the canonical form",
    "fields": [{"name": "x", "type": "long"}, {"name": "y", "type": "long", "default": 0}],
}


def test_a_schema_text_gives_its_name_canonical_form_and_fingerprint() -> None:
    schema = parse_schema_text(json.dumps(POINT))
    assert schema.full_name == "demo.Point"
    assert "doc" not in schema.canonical and '"name":"demo.Point"' in schema.canonical
    assert len(schema.fingerprint) == 8
    assert schema.fingerprint == bytes.fromhex(fingerprint(schema.canonical, "CRC-64-AVRO"))


def test_the_fingerprint_ignores_what_the_canonical_form_drops() -> None:
    spaced = json.dumps({**POINT, "doc": "another doc"}, indent=4)
    assert parse_schema_text(spaced).fingerprint == parse_schema_text(json.dumps(POINT)).fingerprint
    renamed = {**POINT, "fields": [{"name": "x", "type": "long"}]}
    assert parse_schema_text(json.dumps(renamed)).fingerprint != (
        parse_schema_text(json.dumps(POINT)).fingerprint
    )


def test_a_record_without_namespace_is_named_plainly() -> None:
    bare = {k: v for k, v in POINT.items() if k != "namespace"}
    assert parse_schema_text(json.dumps(bare)).full_name == "Point"


BAD_FIELD = {"type": "record", "name": "X", "fields": [{"name": "a", "type": "nosuch"}]}


DUPLICATE_SYMBOLS = {
    "type": "record",
    "name": "Y",
    "fields": [{"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "A"]}}],
}


@pytest.mark.parametrize(
    "text",
    ["{not json", json.dumps(BAD_FIELD), '"nosuch"', '"long"', "[]", json.dumps(DUPLICATE_SYMBOLS)],
)
def test_a_bad_schema_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="not a valid Avro schema"):
        parse_schema_text(text)


def test_the_schema_folder_holds_every_record_of_the_registry() -> None:
    schemas = load_schema_dir()
    assert SCHEMA_DIR.is_dir()
    for topic in names.ALL_TOPICS:
        assert topic.record in schemas or not topic.record  # the schema topic holds schemas
    assert all(full_name == s.full_name for full_name, s in schemas.items())


def test_a_folder_is_read_recursively_and_a_record_defined_twice_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "point.avsc").write_text(json.dumps(POINT))
    (tmp_path / "notes.txt").write_text("not a schema")
    assert list(load_schema_dir(tmp_path)) == ["demo.Point"]
    (tmp_path / "b.avsc").write_text(json.dumps(POINT))
    with pytest.raises(ConfigError, match=r"demo\.Point is defined twice"):
        load_schema_dir(tmp_path)
