"""Derived records as store documents (pure): which index, which id, which searchable fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerotrace import names
from zerotrace.errors import PoisonInput
from zerotrace.store import IndexSpec
from zerotrace_query.llm_stats import is_error

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
        # The span's server.address and server.port attributes, searchable: the service map
        # groups calls by the peer they went to inside the store (service_map.py).
        "server_address": "keyword",
        "server_port": "long",
    },
    time_field="start_ns",
)

LLM_REQUESTS = IndexSpec(
    name=names.INDEX_LLM,
    fields={
        "request_id": "keyword",
        "span_id": "keyword",
        "node_id": "keyword",
        "pid": "long",
        "service": "keyword",
        "model": "keyword",
        "endpoint": "keyword",
        "observation_point": "keyword",
        "stream": "boolean",
        "start_ns": "long",
        "end_ns": "long",
        "duration_ns": "long",
        "ttft_ns": "long",
        "tpot_ns": "long",
        "input_tokens": "long",
        "output_tokens": "long",
        "output_tokens_estimated": "boolean",
        "tokens_per_s": "double",
        "finish_reason": "keyword",
        "status_code": "long",
        # "ok" or "error" (llm_stats.is_error), so `status=error` is one term query.
        "status": "keyword",
        # Free text of any length: `text` keeps a long reason from refusing the document.
        "error": "text",
        "path": "text",
    },
    time_field="start_ns",
)

PROFILES = IndexSpec(
    name=names.INDEX_PROFILES,
    fields={
        "window_id": "keyword",
        "node_id": "keyword",
        "service": "keyword",
        "pid": "long",
        "profile_type": "keyword",
        "window_start_ns": "long",
        "window_end_ns": "long",
        "samples": "long",
        "dropped": "long",
    },
    time_field="window_start_ns",
)

# The links between spans that trace assembly found (one per child and rule); a trace is the
# spans these join, put together when read (trace_trees.py).
TRACE_EDGES = IndexSpec(
    name=names.INDEX_TRACE_EDGES,
    fields={
        "edge_id": "keyword",
        "trace_id": "keyword",
        "parent_span_id": "keyword",
        "child_span_id": "keyword",
        "rule": "keyword",
        "ts_ns": "long",
    },
    time_field="ts_ns",
)

# GPU and RDMA device windows (profiler-agg's device_windows.py): one device, port, counter set
# or RoCE flow over one window. Its metrics, counters, events and processes are stored, not
# searched: a panel reads a device's windows by time and draws them.
DEVICE_WINDOWS = IndexSpec(
    name=names.INDEX_DEVICES,
    fields={
        "window_id": "keyword",
        "kind": "keyword",  # "gpu" or "rdma"
        "node_id": "keyword",
        "vendor": "keyword",
        "model": "keyword",
        "device": "keyword",  # a GPU's UUID; an RDMA device's name
        "device_index": "long",  # a GPU's index; an RDMA port
        "source": "keyword",
        "flow": "keyword",
        "pid": "long",
        "counter_id": "long",  # RDMA_STATISTIC: the kernel's counter set id (else absent)
        "process_name": "keyword",
        "window_start_ns": "long",
        "window_end_ns": "long",
        "samples": "long",
        "event_count": "long",
    },
    time_field="window_start_ns",
)

INDEX_SPECS = (SPANS, LLM_REQUESTS, PROFILES, TRACE_EDGES, DEVICE_WINDOWS)
LLM_STATUS_OK = "ok"
LLM_STATUS_ERROR = "error"


def span_document(span: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(document id, document). The id is the span id, so re-indexing replaces, never adds."""
    doc = dict(span)
    doc["duration_ns"] = int(span["end_ns"]) - int(span["start_ns"])
    attributes = span.get("attributes") or {}
    doc["server_address"] = attributes.get(names.ATTR_SERVER_ADDRESS) or None
    port = str(attributes.get(names.ATTR_SERVER_PORT) or "")
    doc["server_port"] = int(port) if port.isdigit() and len(port) <= 5 else None
    return str(span["span_id"]), doc


def llm_document(request: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(document id, document). The id is the request id (deterministic), so a replay of the
    same raw events replaces the document instead of adding a second one."""
    doc = dict(request)
    doc["duration_ns"] = int(request["end_ns"]) - int(request["start_ns"])
    doc["status"] = LLM_STATUS_ERROR if is_error(request) else LLM_STATUS_OK
    return str(request["request_id"]), doc


def profile_document(window: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(document id, document). The id is the window id (deterministic), so a replay replaces.
    The stacks map becomes a list of {"stack", "weight"}: folded stacks are free text with '.'
    in them, and a map keyed by them would be read by OpenSearch as object paths."""
    doc = dict(window)
    stacks = window.get("stacks") or {}
    doc["stacks"] = [{"stack": str(k), "weight": int(v)} for k, v in sorted(stacks.items())]
    return str(window["window_id"]), doc


def document_for(record: str, datum: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(index name, id, document) for a derived record; PoisonInput for any other record."""
    if record == names.DERIVED_SPAN.record:
        doc_id, doc = span_document(datum)
        return SPANS.name, doc_id, doc
    if record == names.DERIVED_LLM.record:
        doc_id, doc = llm_document(datum)
        return LLM_REQUESTS.name, doc_id, doc
    if record == names.DERIVED_PROFILE.record:
        doc_id, doc = profile_document(datum)
        return PROFILES.name, doc_id, doc
    if record == names.DERIVED_TRACE.record:
        return TRACE_EDGES.name, str(datum["edge_id"]), dict(datum)
    if record == names.DERIVED_DEVICE.record:
        return DEVICE_WINDOWS.name, str(datum["window_id"]), dict(datum)
    raise PoisonInput(f"the query service does not index {record} yet")
