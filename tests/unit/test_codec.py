from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.avro_examples import example
from zerotrace.codec import MAGIC, AvroCodec
from zerotrace.errors import PoisonInput
from zerotrace.schema_registry import InMemorySchemaRegistry, SchemaRegistry
from zerotrace.schemas import SCHEMA_DIR, load_schema_dir, parse_schema_text

SCHEMAS = load_schema_dir()


def test_every_expected_record_has_a_schema() -> None:
    from zerotrace import names

    for topic in names.ALL_TOPICS:
        if topic.record:
            assert topic.record in SCHEMAS, topic.name


@pytest.mark.parametrize("record", sorted(SCHEMAS))
def test_every_schema_round_trips(codec: AvroCodec, record: str) -> None:
    raw = json.loads(
        next(
            p
            for p in SCHEMA_DIR.rglob("*.avsc")
            if record.endswith("." + json.loads(p.read_text())["name"])
        ).read_text()
    )
    for seed in range(20):
        datum = example(raw, random.Random(seed))
        data = codec.encode(record, datum)
        assert data[:2] == MAGIC
        assert data[2:10] == SCHEMAS[record].fingerprint
        assert codec.decode(data) == (record, datum)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_is_poison_never_a_crash(data: bytes) -> None:
    codec = AvroCodec(SCHEMAS, InMemorySchemaRegistry())
    try:
        codec.decode(data)
    except PoisonInput as exc:
        assert "\n" not in exc.reason


def test_truncated_message_is_poison(codec: AvroCodec) -> None:
    record = "zerotrace.derived.TraceEdge"
    data = codec.encode(
        record,
        {
            "edge_id": "e",
            "trace_id": "t",
            "parent_span_id": "p",
            "child_span_id": "c",
            "rule": "same-thread",
            "ts_ns": 5,
        },
    )
    for cut in (1, 5, 10, len(data) - 1):
        with pytest.raises(PoisonInput):
            codec.decode(data[:cut])
    with pytest.raises(PoisonInput, match="trailing"):
        codec.decode(data + b"\x00")


def test_unknown_fingerprint_is_poison(codec: AvroCodec) -> None:
    with pytest.raises(PoisonInput, match="unknown writer schema"):
        codec.decode(MAGIC + b"\x01" * 8 + b"\x00")


OLD = {
    "type": "record",
    "name": "Probe",
    "namespace": "zt.test",
    "fields": [{"name": "pid", "type": "int"}, {"name": "path", "type": "string"}],
}
NEW = {
    **OLD,
    "fields": [
        *OLD["fields"],
        {"name": "inode", "type": "long", "default": 0},
        {"name": "mount", "type": ["null", "string"], "default": None},
    ],
}


def evolution_codecs(registry: SchemaRegistry) -> tuple[AvroCodec, AvroCodec]:
    old = parse_schema_text(json.dumps(OLD))
    new = parse_schema_text(json.dumps(NEW))
    return AvroCodec({old.full_name: old}, registry), AvroCodec({new.full_name: new}, registry)


def test_old_reader_reads_newer_writer_through_the_registry() -> None:
    registry = InMemorySchemaRegistry()
    old_reader, new_writer = evolution_codecs(registry)
    data = new_writer.encode("zt.test.Probe", {"pid": 7, "path": "/x", "inode": 9, "mount": "/"})
    assert old_reader.decode(data) == ("zt.test.Probe", {"pid": 7, "path": "/x"})


def test_new_reader_fills_defaults_for_old_writer() -> None:
    registry = InMemorySchemaRegistry()
    old_writer, new_reader = evolution_codecs(registry)
    data = old_writer.encode("zt.test.Probe", {"pid": 7, "path": "/x"})
    assert new_reader.decode(data) == (
        "zt.test.Probe",
        {"pid": 7, "path": "/x", "inode": 0, "mount": None},
    )


def test_every_added_field_in_schemas_has_a_default() -> None:
    """The contract rule: fields are only added with a default. Optional fields (unions with
    null) must default to null so old data stays readable."""
    for path in SCHEMA_DIR.rglob("*.avsc"):
        for field in json.loads(path.read_text())["fields"]:
            if isinstance(field["type"], list) and "null" in field["type"]:
                assert field.get("default", "missing") is None, f"{path.name}: {field['name']}"
