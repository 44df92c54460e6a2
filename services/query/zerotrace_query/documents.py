"""Derived records as store documents (pure): which index, which id, which searchable fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerotrace import names
from zerotrace.errors import PoisonInput
from zerotrace.store import IndexSpec

SPANS = IndexSpec(
    name=names.INDEX_SPANS,
    fields={
        "span_id": "keyword",
        "trace_id": "keyword",
        "parent_span_id": "keyword",
        "node_id": "keyword",
        "pid": "long",
        "tid": "long",
        "process_name": "keyword",
        "container_id": "keyword",
        "service": "keyword",
        "kind": "keyword",
        "name": "text",
        "start_ns": "long",
        "end_ns": "long",
        "duration_ns": "long",
        "status": "keyword",
    },
    time_field="start_ns",
)

INDEX_SPECS = (SPANS,)


def span_document(span: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(document id, document). The id is the span id, so re-indexing replaces, never adds."""
    doc = dict(span)
    doc["duration_ns"] = int(span["end_ns"]) - int(span["start_ns"])
    return str(span["span_id"]), doc


def document_for(record: str, datum: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(index name, id, document) for a derived record; PoisonInput for any other record."""
    if record == names.DERIVED_SPAN.record:
        doc_id, doc = span_document(datum)
        return SPANS.name, doc_id, doc
    raise PoisonInput(f"the query service does not index {record} yet")
