"""Store documents as Parquet rows (zerotrace_query/parquet_export.py): every field of every
derived record schema and of every index spec has a column of the right type; rows carry the
document's values and None for what it lacks; partitions are the record's index, its UTC
date and its node, escaped as Hive escapes them; a window's file name is the same for the
same window and differs for another."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from tests.harness.export_data import gateway_world
from zerotrace import names
from zerotrace.settings import REPO_ROOT
from zerotrace.store import IndexSpec
from zerotrace_query.documents import document_for
from zerotrace_query.parquet_export import (
    EDGE_RECORDS,
    LLM_RECORDS,
    NULL_PARTITION,
    PROFILE_RECORDS,
    RECORD_NAMES,
    RECORD_TYPES,
    SPAN_RECORDS,
    Partition,
    RecordType,
    escape,
    file_name,
    left_out,
    partition,
    record_type,
    row,
    table,
    utc_date,
)

pytestmark = pytest.mark.unit
S = 1_000_000_000
AVRO_LONG = {"long": pa.int64(), "int": pa.int64()}
SCHEMA_FILES = {
    SPAN_RECORDS.name: "span.avsc",
    LLM_RECORDS.name: "llm_request.avsc",
    PROFILE_RECORDS.name: "profile_window.avsc",
    EDGE_RECORDS.name: "trace_edge.avsc",
}


def avro_fields(record: RecordType) -> dict[str, Any]:
    schema = json.loads((REPO_ROOT / "schemas" / "derived" / SCHEMA_FILES[record.name]).read_text())
    return {f["name"]: f["type"] for f in schema["fields"]}


def expected_type(avro: Any) -> pa.DataType:
    """The column type an Avro field's values take in the document."""
    if isinstance(avro, list):  # ["null", T]
        (avro,) = [t for t in avro if t != "null"]
    if isinstance(avro, dict):
        if avro["type"] == "enum":
            return pa.string()
        if avro["type"] == "map" and avro["values"] == "long":  # stacks: a list in the store
            return pa.list_(pa.struct([("stack", pa.string()), ("weight", pa.int64())]))
        if avro["type"] == "map":
            return pa.map_(pa.string(), pa.string())
        return pa.list_(pa.string())
    return {"string": pa.string(), "boolean": pa.bool_(), "double": pa.float64()}.get(
        avro, AVRO_LONG.get(avro)
    )


@pytest.mark.parametrize("record", RECORD_TYPES, ids=RECORD_NAMES)
def test_every_schema_field_and_spec_field_has_a_typed_column(record: RecordType) -> None:
    for name, avro in avro_fields(record).items():
        assert record.schema.field(name).type == expected_type(avro), name
    spec_types = {"keyword": pa.string(), "text": pa.string(), "long": pa.int64()}
    spec_types |= {"double": pa.float64(), "boolean": pa.bool_()}
    for name, ftype in record.spec.fields.items():
        assert record.schema.field(name).type == spec_types[ftype], name
    assert not any(pa.types.is_timestamp(f.type) for f in record.schema)


def test_a_field_the_spec_adds_gets_a_column_of_its_type() -> None:
    spec = IndexSpec("spans", {"span_id": "keyword", "gpu": "long", "at": "long"}, "at")
    record = RecordType.of(spec, [("span_id", pa.string())])
    assert record.schema.names == ["span_id", "gpu", "at"]
    assert record.schema.field("gpu").type == pa.int64()


def test_record_names_are_the_index_names() -> None:
    assert set(RECORD_NAMES) == {
        names.INDEX_SPANS,
        names.INDEX_LLM,
        names.INDEX_PROFILES,
        names.INDEX_TRACE_EDGES,
    }
    assert record_type(names.INDEX_LLM) is LLM_RECORDS
    with pytest.raises(ValueError, match="unknown record type 'logs': use spans, llm"):
        record_type("logs")


def test_rows_of_real_documents_make_a_table_with_every_value() -> None:
    world = gateway_world(3)
    for record_name, items, record in (
        (names.DERIVED_SPAN.record, world.spans, SPAN_RECORDS),
        (names.DERIVED_LLM.record, world.llm, LLM_RECORDS),
        (names.DERIVED_PROFILE.record, world.profiles, PROFILE_RECORDS),
        (names.DERIVED_TRACE.record, world.edges, EDGE_RECORDS),
    ):
        docs = [document_for(record_name, item)[2] for item in items]
        out = table(record, [row(record, doc) for doc in docs]).to_pylist()
        for doc, got in zip(docs, out, strict=True):
            assert left_out(record, {**doc, "_id": "x"}) == set()
            for name, value in doc.items():
                if isinstance(value, dict):  # a map column reads back as (key, value) pairs
                    assert dict(got[name]) == value
                else:
                    assert got[name] == value, name


def test_a_missing_field_is_null_and_an_unknown_one_is_named() -> None:
    doc = {"edge_id": "e", "ts_ns": 5, "new_field": 1, "_id": "e"}
    assert row(EDGE_RECORDS, doc) == {
        "edge_id": "e",
        "trace_id": None,
        "parent_span_id": None,
        "child_span_id": None,
        "rule": None,
        "ts_ns": 5,
    }
    assert left_out(EDGE_RECORDS, doc) == {"new_field"}


def test_a_value_that_does_not_fit_its_column_is_refused() -> None:
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError)):
        table(EDGE_RECORDS, [row(EDGE_RECORDS, {"edge_id": "e", "ts_ns": "soon"})])


def test_partitions_by_index_utc_date_and_node() -> None:
    midnight = 1_796_601_600 * S  # 2026-12-07T00:00:00Z
    assert utc_date(midnight - 1) == "2026-12-06" and utc_date(midnight) == "2026-12-07"
    span = {"start_ns": midnight + 5, "node_id": "gpu-07"}
    assert partition(SPAN_RECORDS, span) == Partition("spans", "2026-12-07", "gpu-07")
    edge = {"ts_ns": midnight - 5}
    assert partition(EDGE_RECORDS, edge, "gpu-07").folder() == (
        "record=trace-edges/date=2026-12-06/node=gpu-07"
    )
    assert partition(EDGE_RECORDS, edge, "").folder().endswith(f"node={NULL_PARTITION}")
    window = {"window_start_ns": midnight, "node_id": "rack 2/gpu=7"}
    assert partition(PROFILE_RECORDS, window).folder() == (
        "record=profiles/date=2026-12-07/node=rack%202%2Fgpu%3D7"
    )


def test_escape_is_hive_escaping() -> None:
    assert escape("node-a.example_1") == "node-a.example_1"
    assert escape("a:b/c d%é") == "a%3Ab%2Fc%20d%25%C3%A9"
    assert escape("") == NULL_PARTITION


def test_the_same_window_names_the_same_file() -> None:
    start = 1_796_515_080 * S
    assert file_name(start, start + 3600 * S) == "part-20261205T235800Z_20261206T005800Z.parquet"
    assert file_name(start + 1, start + 2) == (
        "part-20261205T235800.000000001Z_20261205T235800.000000002Z.parquet"
    )
    assert file_name(start, start + S) != file_name(start, start + 2 * S)
