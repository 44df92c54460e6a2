"""Spans as OTLP (pure): linked span documents -> an ExportTraceServiceRequest.

The input is what `trace_trees.link` returns: span documents with `trace_id` and
`parent_span_id` set from the links. The output is built from the official generated classes
of the `opentelemetry-proto` package, so a receiver built from the same definitions (an
OpenTelemetry Collector, Jaeger, Tempo) reads it as any SDK's export.

- One ResourceSpans per observed process, (service, node, pid): `service.name`, `host.name`
  (the node), `process.pid`, `process.executable.name`, `container.id` when known, and
  `telemetry.sdk.*` naming zerotrace (which observed the process; it runs no SDK). One
  ScopeSpans in each, scope "zerotrace".
- Kind from the kind's side: "*.client" CLIENT, "*.server" SERVER, anything else INTERNAL.
- Ids: our hex ids as bytes (trace 16, span 8). An id that is not hex of that length (never
  written by the correlator) becomes a hash of its text, the same wherever it appears, so a
  parent still matches its children.
- Status: ERROR, with the span's error message (or error type) as the message; every other
  span UNSET, as OpenTelemetry asks instrumentation to leave a span it saw no error on.
- Attributes: the span's own, typed: an attribute the registry knows as a count, size,
  duration, port or id is an int where its value is an integer, a known flag a bool; any
  other value stays a string. The process attributes the resource carries are not repeated
  on each span.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from zerotrace import __version__, names

# What observed the spans: the scope of every span, and the SDK name on every resource.
SCOPE_NAME = "zerotrace"
TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
_INT64 = (-(2**63), 2**63 - 1)

# Attributes whose values are integers (written as decimal strings, as the span schema's map
# holds strings); OpenTelemetry types these as int where it names them.
NUMERIC_ATTRIBUTES = frozenset(
    {
        names.ATTR_PROCESS_PID,
        names.ATTR_THREAD_ID,
        names.ATTR_FILE_FD,
        names.ATTR_HTTP_STATUS,
        names.ATTR_HTTP_REQUEST_BODY_SIZE,
        names.ATTR_HTTP_RESPONSE_BODY_SIZE,
        names.ATTR_SERVER_PORT,
        names.ATTR_CLIENT_PORT,
        names.ATTR_GEN_AI_INPUT_TOKENS,
        names.ATTR_GEN_AI_OUTPUT_TOKENS,
        names.ATTR_TCP_REQUEST_SEQ,
        names.ATTR_SOURCE_EVENTS,
        names.ATTR_DNS_DURATION,
        names.ATTR_CONNECT_DURATION,
        names.ATTR_TLS_HANDSHAKE_DURATION,
        names.ATTR_REQUEST_SEND_DURATION,
        names.ATTR_SERVER_DURATION,
        names.ATTR_RESPONSE_TRANSFER_DURATION,
        names.ATTR_FILE_READ_BYTES,
        names.ATTR_FILE_READ_DURATION,
        names.ATTR_FILE_READ_CALLS,
        names.ATTR_FILE_WRITE_BYTES,
        names.ATTR_FILE_WRITE_DURATION,
        names.ATTR_FILE_WRITE_CALLS,
        names.ATTR_FILE_KV_CACHE_BYTES,
        names.ATTR_FILE_MODEL_BYTES,
        names.ATTR_DNS_ANSWER_COUNT,
        names.ATTR_DB_OPERATION_BATCH_SIZE,
        names.ATTR_DB_RESPONSE_RETURNED_ROWS,
        names.ATTR_DB_AFFECTED_ROWS,
        names.ATTR_MESSAGING_BATCH_COUNT,
        names.ATTR_KAFKA_OFFSET,
        names.ATTR_KAFKA_API_KEY,
        names.ATTR_KAFKA_API_VERSION,
        names.ATTR_RPC_GRPC_STATUS_CODE,
        names.ATTR_RPC_REQUEST_MESSAGES,
        names.ATTR_RPC_RESPONSE_MESSAGES,
    }
)
# Attributes that are flags ("true"/"false").
BOOLEAN_ATTRIBUTES = frozenset(
    {names.ATTR_CAPTURE_GAP, names.ATTR_DNS_TRUNCATED, names.ATTR_TRACE_CUT}
)
# The process attributes a span also carries (exchange_records.endpoint_attributes): the
# resource holds them once.
_ON_RESOURCE = (names.ATTR_PROCESS_PID, names.ATTR_PROCESS_NAME)

CLIENT_SUFFIX = ".client"
SERVER_SUFFIX = ".server"

ResourceKey = tuple[str, str, int]


def span_kind(kind: str) -> Span.SpanKind.ValueType:
    if kind.endswith(CLIENT_SUFFIX):
        return Span.SpanKind.SPAN_KIND_CLIENT
    if kind.endswith(SERVER_SUFFIX):
        return Span.SpanKind.SPAN_KIND_SERVER
    return Span.SpanKind.SPAN_KIND_INTERNAL


def id_bytes(value: object, size: int) -> bytes:
    """Our hex id as `size` bytes; b"" for no id; any other text hashed to `size` bytes."""
    text = "" if value is None else str(value)
    if not text:
        return b""
    if len(text) == 2 * size:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    return hashlib.blake2b(text.encode(), digest_size=size).digest()


def any_value(key: str, value: object) -> AnyValue:
    """A value typed as the attribute is known to be (module docstring); otherwise a string."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    text = str(value)
    if key in NUMERIC_ATTRIBUTES:
        number = _integer(text)
        if number is not None:
            return AnyValue(int_value=number)
    if key in BOOLEAN_ATTRIBUTES and text in ("true", "false"):
        return AnyValue(bool_value=text == "true")
    return AnyValue(string_value=text)


def key_values(attributes: Mapping[str, object]) -> list[KeyValue]:
    """Sorted by key, so the same span always encodes to the same bytes."""
    return [KeyValue(key=k, value=any_value(k, attributes[k])) for k in sorted(attributes)]


def resource_key(span: Mapping[str, Any]) -> ResourceKey:
    return (str(span.get("service") or ""), str(span.get("node_id") or ""), int(span["pid"]))


def resource_attributes(span: Mapping[str, Any]) -> dict[str, object]:
    service, node, pid = resource_key(span)
    attributes: dict[str, object] = {
        names.ATTR_SERVICE_NAME: service,
        names.ATTR_HOST_NAME: node,
        names.ATTR_PROCESS_PID: pid,
        names.ATTR_TELEMETRY_SDK_NAME: SCOPE_NAME,
        names.ATTR_TELEMETRY_SDK_VERSION: __version__,
    }
    if span.get("process_name"):
        attributes[names.ATTR_PROCESS_NAME] = str(span["process_name"])
    if span.get("container_id"):
        attributes[names.ATTR_CONTAINER_ID] = str(span["container_id"])
    return attributes


def otlp_span(span: Mapping[str, Any]) -> Span:
    attributes: dict[str, object] = dict(span.get("attributes") or {})
    own = resource_attributes(span)
    for key in _ON_RESOURCE:
        if key in attributes and str(attributes[key]) == str(own.get(key)):
            del attributes[key]
    if span.get("tid") is not None:
        attributes.setdefault(names.ATTR_THREAD_ID, int(span["tid"]))
    status = Status()
    if str(span.get("status", "")).upper() == "ERROR":
        message = attributes.get(names.ATTR_ERROR_MESSAGE) or attributes.get(names.ATTR_ERROR_TYPE)
        status = Status(code=Status.StatusCode.STATUS_CODE_ERROR, message=str(message or ""))
    return Span(
        trace_id=id_bytes(span["trace_id"], TRACE_ID_BYTES),
        span_id=id_bytes(span["span_id"], SPAN_ID_BYTES),
        parent_span_id=id_bytes(span.get("parent_span_id"), SPAN_ID_BYTES),
        name=str(span.get("name") or span.get("kind") or ""),
        kind=span_kind(str(span.get("kind", ""))),
        start_time_unix_nano=max(int(span["start_ns"]), 0),
        end_time_unix_nano=max(int(span["end_ns"]), int(span["start_ns"]), 0),
        attributes=key_values(attributes),
        status=status,
    )


def export_request(spans: Iterable[Mapping[str, Any]]) -> ExportTraceServiceRequest:
    """One request holding these spans, grouped by process (module docstring), processes and
    spans in the order they came. A process's resource is made from its first span."""
    groups: dict[ResourceKey, ResourceSpans] = {}
    for span in spans:
        key = resource_key(span)
        group = groups.get(key)
        if group is None:
            group = ResourceSpans(
                resource=Resource(attributes=key_values(resource_attributes(span)))
            )
            group.scope_spans.add(scope=InstrumentationScope(name=SCOPE_NAME, version=__version__))
            groups[key] = group
        group.scope_spans[0].spans.append(otlp_span(span))
    return ExportTraceServiceRequest(resource_spans=list(groups.values()))


def _integer(text: str) -> int | None:
    """A plain decimal integer in int64's range ("-12", not "1_000", "0x1f" or "1.0")."""
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        return None
    number = int(text)
    return number if _INT64[0] <= number <= _INT64[1] else None
