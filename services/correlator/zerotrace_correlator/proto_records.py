"""Spans of protocols other than HTTP (proto_conversation.ProtoExchange) as derived.span
records. Pure. Ids are deterministic as HTTP's are (exchange_records.py): the connection, the
span's start and its rank among spans starting at the same nanosecond."""

from __future__ import annotations

from typing import Any

from zerotrace import names
from zerotrace.service_identity import record_service
from zerotrace_correlator.exchange_records import endpoint_attributes
from zerotrace_correlator.fileio_spans import stable_id
from zerotrace_correlator.proto_conversation import SERVER, ProtoExchange


def proto_span(px: ProtoExchange) -> dict[str, Any]:
    span, origin = px.span, px.origin
    attributes = {key: _text(value) for key, value in span.attributes.items()}
    attributes.update(endpoint_attributes(origin, px.requests_sent_locally))
    attributes[names.ATTR_OBSERVATION_POINT] = px.observation_point
    failed = span.status != "ok"
    if failed:
        attributes[names.ATTR_ERROR_TYPE] = span.error_type or span.status
    ids = (px.conn_id, span.protocol, str(px.start_rank), str(span.start_ns))
    side = "server" if px.observation_point == SERVER else "client"
    return {
        "span_id": stable_id(span.protocol, *ids, length=8),
        "trace_id": stable_id("trace", *ids, length=16),
        "parent_span_id": None,
        "node_id": str(origin.get("node_id", "")),
        "pid": int(origin.get("pid", 0)),
        "tid": int(origin.get("tid", 0)),
        "process_name": str(origin.get("process_name", "")),
        "container_id": origin.get("container_id"),
        "service": record_service(origin),
        "kind": names.protocol_span_kind(span.protocol, side),
        "name": span.name,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "status": "ERROR" if failed else "OK",
        "attributes": attributes,
        "source_event_ids": [],
    }


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
