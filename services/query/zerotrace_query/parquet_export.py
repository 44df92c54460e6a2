"""Store documents as Parquet rows, and where each row goes (pure): the Arrow schema of each
record type, a document's row, its Hive-style partition and the file a window's export writes.

Layout, one folder per record type, UTC date and node, so DuckDB, Spark, Trino and pandas read
the partition keys from the path as they are:

    DIR/record=spans/date=2026-12-05/node=gpu-07/part-20261205T100000Z_20261205T110000Z.parquet

- `record` is the store index the rows come from: spans, llm, profiles, trace-edges.
- `date` is the UTC day of the record's time field (start_ns, window_start_ns, ts_ns).
- `node` is the record's node_id. A trace edge has none: it is filed under the node of its
  child span (the span whose parent it names, observed on that node), so a node's folder holds
  the links into its spans; under `__HIVE_DEFAULT_PARTITION__` (read as NULL) when that span is
  not among the window's spans. Every record type has the same three keys, which is what lets
  `read_parquet('DIR/**/*.parquet', hive_partitioning=true, union_by_name=true)` read them all.
- Each file is named after the exported window, so exporting the same window again writes the
  same names (the export replaces them), and other windows' files stay beside them.

Columns are the store document's fields, typed (the record schema's fields, then any other
field of the store's index spec, as the spec types it): every long is int64 (pid and tid too, as the
store keeps them), attributes a map<string, string>, a profile's stacks a
list<struct<stack: string, weight: int64>>, with no timestamp types (Spark reads no ns
timestamps): times stay ns since the epoch, as everywhere in zerotrace.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from zerotrace.store import IndexSpec
from zerotrace_query.documents import LLM_REQUESTS, PROFILES, SPANS, TRACE_EDGES

NS_PER_S = 1_000_000_000
# Hive's name for a partition whose value is missing; Spark and DuckDB read it back as NULL.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# A partition value keeps these characters; any other is written %XX (Hive's escaping, which
# Spark and DuckDB undo), so a node id with '/', '=' or ' ' cannot make another folder.
_PLAIN = re.compile(r"[A-Za-z0-9._-]")

_STRING = pa.string()
_LONG = pa.int64()
_ATTRIBUTES = pa.map_(pa.string(), pa.string())
_STACKS = pa.list_(pa.struct([("stack", pa.string()), ("weight", pa.int64())]))
# The column type of a store spec field (store.FieldType).
SPEC_TYPES: dict[str, pa.DataType] = {
    "keyword": _STRING,
    "text": _STRING,
    "long": _LONG,
    "double": pa.float64(),
    "boolean": pa.bool_(),
}


@dataclass(frozen=True)
class RecordType:
    """One kind of record: the store index it is read from and its Parquet columns."""

    spec: IndexSpec
    schema: pa.Schema

    @property
    def name(self) -> str:
        """The `record=` partition value: the store index's name."""
        return self.spec.name

    @property
    def time_field(self) -> str:
        return self.spec.time_field

    @classmethod
    def of(cls, spec: IndexSpec, columns: list[tuple[str, pa.DataType]]) -> RecordType:
        """The record's columns: the record schema's fields as listed, then every searchable
        field of the store spec not among them (a field the document adds, typed as the spec
        types it), so a field added to the spec is exported without a change here."""
        listed = {name for name, _ in columns}
        extra = [(n, SPEC_TYPES[t]) for n, t in spec.fields.items() if n not in listed]
        return cls(spec, pa.schema(columns + extra))


SPAN_RECORDS = RecordType.of(
    SPANS,
    [
        ("span_id", _STRING),
        ("trace_id", _STRING),
        ("parent_span_id", _STRING),
        ("node_id", _STRING),
        ("pid", _LONG),
        ("tid", _LONG),
        ("process_name", _STRING),
        ("container_id", _STRING),
        ("service", _STRING),
        ("kind", _STRING),
        ("name", _STRING),
        ("start_ns", _LONG),
        ("end_ns", _LONG),
        ("duration_ns", _LONG),
        ("status", _STRING),
        ("attributes", _ATTRIBUTES),
        ("source_event_ids", pa.list_(pa.string())),
    ],
)

LLM_RECORDS = RecordType.of(
    LLM_REQUESTS,
    [
        ("request_id", _STRING),
        ("span_id", _STRING),
        ("node_id", _STRING),
        ("service", _STRING),
        ("pid", _LONG),
        ("observation_point", _STRING),
        ("model", _STRING),
        ("endpoint", _STRING),
        ("path", _STRING),
        ("stream", pa.bool_()),
        ("start_ns", _LONG),
        ("end_ns", _LONG),
        ("duration_ns", _LONG),
        ("first_byte_ns", _LONG),
        ("ttft_ns", _LONG),
        ("tpot_ns", _LONG),
        ("itl_p50_ns", _LONG),
        ("itl_p99_ns", _LONG),
        ("itl_max_ns", _LONG),
        ("input_tokens", _LONG),
        ("output_tokens", _LONG),
        ("output_tokens_estimated", pa.bool_()),
        ("cached_tokens", _LONG),
        ("content_events", _LONG),
        ("tokens_per_s", pa.float64()),
        ("finish_reason", _STRING),
        ("status_code", _LONG),
        ("status", _STRING),
        ("error", _STRING),
    ],
)

PROFILE_RECORDS = RecordType.of(
    PROFILES,
    [
        ("window_id", _STRING),
        ("node_id", _STRING),
        ("service", _STRING),
        ("pid", _LONG),
        ("profile_type", _STRING),
        ("window_start_ns", _LONG),
        ("window_end_ns", _LONG),
        ("samples", _LONG),
        ("dropped", _LONG),
        ("stacks", _STACKS),
    ],
)

EDGE_RECORDS = RecordType.of(
    TRACE_EDGES,
    [
        ("edge_id", _STRING),
        ("trace_id", _STRING),
        ("parent_span_id", _STRING),
        ("child_span_id", _STRING),
        ("rule", _STRING),
        ("ts_ns", _LONG),
    ],
)

RECORD_TYPES = (SPAN_RECORDS, LLM_RECORDS, EDGE_RECORDS, PROFILE_RECORDS)
RECORD_NAMES = tuple(r.name for r in RECORD_TYPES)


def record_type(name: str) -> RecordType:
    """The record type of a `record=` name; ValueError naming the known ones."""
    for record in RECORD_TYPES:
        if record.name == name:
            return record
    raise ValueError(f"unknown record type {name!r}: use {', '.join(RECORD_NAMES)}")


def row(record: RecordType, doc: Mapping[str, Any]) -> dict[str, Any]:
    """The Parquet row of a store document: its schema's columns, None where it has none."""
    return {name: doc.get(name) for name in record.schema.names}


def left_out(record: RecordType, doc: Mapping[str, Any]) -> set[str]:
    """The document's fields no column holds (`_id`, the store's own, aside): a field added to
    a schema after this module, which the export must say it did not write."""
    return set(doc) - set(record.schema.names) - {"_id"}


def table(record: RecordType, rows: list[dict[str, Any]]) -> pa.Table:
    """Rows as an Arrow table of the record's schema; TypeError/ArrowInvalid on a value that
    does not fit its column (a schema change the export has not followed)."""
    return pa.Table.from_pylist(rows, schema=record.schema)


def utc_date(ns: int) -> str:
    """'2026-12-05': the UTC day of a time in ns since the epoch."""
    return datetime.fromtimestamp(ns // NS_PER_S, UTC).strftime("%Y-%m-%d")


def escape(value: str) -> str:
    """A partition value as a path segment: Hive's %XX escaping of anything but [A-Za-z0-9._-];
    '' and None are the NULL partition."""
    if not value:
        return NULL_PARTITION
    return "".join(
        c if _PLAIN.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode()) for c in value
    )


@dataclass(frozen=True, order=True)
class Partition:
    record: str
    date: str
    node: str  # "" when unknown: the NULL partition

    def folder(self) -> str:
        """'record=spans/date=2026-12-05/node=gpu-07', relative to the export folder."""
        return f"record={self.record}/date={self.date}/node={escape(self.node)}"


def partition(record: RecordType, doc: Mapping[str, Any], node: str | None = None) -> Partition:
    """Where a document's row goes: its type, the UTC date of its time field and its node
    (`node` given for records that carry none: trace edges)."""
    where = doc.get("node_id") if node is None else node
    return Partition(record.name, utc_date(int(doc[record.time_field])), str(where or ""))


def _stamp(ns: int) -> str:
    """'20261205T100000Z', with '.123456789' before the Z when not a whole second."""
    whole = datetime.fromtimestamp(ns // NS_PER_S, UTC).strftime("%Y%m%dT%H%M%S")
    fraction = ns % NS_PER_S
    return f"{whole}.{fraction:09d}Z" if fraction else f"{whole}Z"


def file_name(from_ns: int, to_ns: int) -> str:
    """The file a window's export writes in each of its partitions. The same window, the same
    name: exporting it again replaces the file, never adds a second one."""
    return f"part-{_stamp(from_ns)}_{_stamp(to_ns)}.parquet"
