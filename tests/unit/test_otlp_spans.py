"""Spans as OTLP (zerotrace_query/otlp_spans.py): one resource per observed process with the
resource attributes OpenTelemetry names, kinds from the kind's side, ids as bytes, ERROR
status with its message, and attributes typed where the registry knows them numeric or flags;
the bytes decode with the official classes and are the same for the same spans."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.harness.otlp_receiver import decode_attributes
from zerotrace import __version__, names
from zerotrace_query.otlp_spans import (
    SCOPE_NAME,
    any_value,
    export_request,
    id_bytes,
    otlp_span,
    span_kind,
)

pytestmark = pytest.mark.unit
S = 1_000_000_000
T0 = 1_760_000_000 * S


def span(span_id: str, **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "span_id": span_id,
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "parent_span_id": None,
        "node_id": "node-a",
        "pid": 4242,
        "tid": 4250,
        "process_name": "uvicorn",
        "container_id": None,
        "service": "gateway",
        "kind": names.SPAN_KIND_HTTP_SERVER,
        "name": "POST /v1/chat/completions",
        "start_ns": T0,
        "end_ns": T0 + 250_000_000,
        "status": "OK",
        "attributes": {
            names.ATTR_HTTP_METHOD: "POST",
            names.ATTR_URL_PATH: "/v1/chat/completions",
            names.ATTR_HTTP_STATUS: "200",
            names.ATTR_SERVER_PORT: "8000",
            names.ATTR_PROCESS_PID: "4242",
            names.ATTR_PROCESS_NAME: "uvicorn",
            names.ATTR_THREAD_ID: "4250",
        },
        "source_event_ids": [],
    }
    doc.update(fields)
    return doc


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (names.SPAN_KIND_HTTP_CLIENT, Span.SpanKind.SPAN_KIND_CLIENT),
        (names.SPAN_KIND_HTTP_SERVER, Span.SpanKind.SPAN_KIND_SERVER),
        (names.protocol_span_kind(names.PROTOCOL_REDIS, "client"), Span.SpanKind.SPAN_KIND_CLIENT),
        (
            names.protocol_span_kind(names.PROTOCOL_POSTGRESQL, "server"),
            Span.SpanKind.SPAN_KIND_SERVER,
        ),
        (names.SPAN_KIND_FILE_OPEN, Span.SpanKind.SPAN_KIND_INTERNAL),
        ("", Span.SpanKind.SPAN_KIND_INTERNAL),
        ("http.clientele", Span.SpanKind.SPAN_KIND_INTERNAL),
    ],
)
def test_kind_from_the_kinds_side(kind: str, expected: int) -> None:
    assert span_kind(kind) == expected


def test_ids_are_our_hex_as_bytes_and_other_text_a_stable_hash() -> None:
    assert id_bytes("00f067aa0ba902b7", 8) == bytes.fromhex("00f067aa0ba902b7")
    assert id_bytes("4bf92f3577b34da6a3ce929d0e0e4736", 16) == bytes.fromhex(
        "4bf92f3577b34da6a3ce929d0e0e4736"
    )
    assert id_bytes(None, 8) == id_bytes("", 8) == b""
    hashed = id_bytes("gw-1", 8)
    assert len(hashed) == 8 and hashed == id_bytes("gw-1", 8) != id_bytes("gw-2", 8)
    assert len(id_bytes("zz" * 8, 8)) == 8  # right length, not hex: hashed, not refused
    assert len(id_bytes("00f067aa0ba902b7", 16)) == 16  # a span id where a trace id goes


def test_known_numeric_and_flag_attributes_are_typed_others_stay_strings() -> None:
    def typed(key: str, value: object) -> object:
        av = any_value(key, value)
        return getattr(av, str(av.WhichOneof("value")))

    assert typed(names.ATTR_HTTP_STATUS, "503") == 503
    assert typed(names.ATTR_SERVER_DURATION, "81234567") == 81_234_567
    assert typed(names.ATTR_TCP_REQUEST_SEQ, "4294967295") == 4_294_967_295
    assert typed(names.ATTR_SERVER_PORT, "") == ""  # numeric key, no number: kept as text
    assert typed(names.ATTR_SERVER_PORT, "80a") == "80a"
    assert typed(names.ATTR_SERVER_PORT, "1_000") == "1_000"
    assert typed(names.ATTR_SERVER_PORT, str(2**63)) == str(2**63)  # past int64
    assert typed(names.ATTR_URL_PATH, "12") == "12"  # not a numeric attribute
    assert typed(names.ATTR_DB_NAMESPACE, "3") == "3"  # OpenTelemetry types it string
    assert typed(names.ATTR_CAPTURE_GAP, "true") is True
    assert typed(names.ATTR_DNS_TRUNCATED, "false") is False
    assert typed(names.ATTR_CAPTURE_GAP, "yes") == "yes"
    assert typed(names.ATTR_KAFKA_OFFSET, 17) == 17  # already an int
    assert typed("x.ratio", 0.5) == 0.5


def test_one_resource_per_process_with_its_attributes() -> None:
    spans = [
        span("00000000000000a1"),
        span("00000000000000a2", tid=4251, container_id="3f2ac0ffee"),  # same process
        span("00000000000000b1", pid=4243),  # same service, another process
        span("00000000000000c1", node_id="node-b", service="redis-server", process_name=""),
    ]
    request = ExportTraceServiceRequest.FromString(export_request(spans).SerializeToString())
    assert len(request.resource_spans) == 3
    resources = [decode_attributes(rs.resource.attributes) for rs in request.resource_spans]
    sdk = {names.ATTR_TELEMETRY_SDK_NAME: SCOPE_NAME, names.ATTR_TELEMETRY_SDK_VERSION: __version__}
    assert resources == [
        {
            names.ATTR_SERVICE_NAME: "gateway",
            names.ATTR_HOST_NAME: "node-a",
            names.ATTR_PROCESS_PID: 4242,
            names.ATTR_PROCESS_NAME: "uvicorn",
            **sdk,
        },  # the process's resource is its first span's: that one knew no container
        {
            names.ATTR_SERVICE_NAME: "gateway",
            names.ATTR_HOST_NAME: "node-a",
            names.ATTR_PROCESS_PID: 4243,
            names.ATTR_PROCESS_NAME: "uvicorn",
            **sdk,
        },
        {
            names.ATTR_SERVICE_NAME: "redis-server",
            names.ATTR_HOST_NAME: "node-b",
            names.ATTR_PROCESS_PID: 4242,
            **sdk,
        },
    ]
    spans_per_resource = [
        [s.span_id.hex() for ss in rs.scope_spans for s in ss.spans]
        for rs in request.resource_spans
    ]
    assert spans_per_resource == [
        ["00000000000000a1", "00000000000000a2"],
        ["00000000000000b1"],
        ["00000000000000c1"],
    ]
    for rs in request.resource_spans:
        assert [(ss.scope.name, ss.scope.version) for ss in rs.scope_spans] == [
            (SCOPE_NAME, __version__)
        ]


def test_container_id_is_a_resource_attribute_when_known() -> None:
    request = export_request([span("00000000000000a1", container_id="3f2ac0ffee")])
    resource = decode_attributes(request.resource_spans[0].resource.attributes)
    assert resource[names.ATTR_CONTAINER_ID] == "3f2ac0ffee"


def test_a_span_with_ids_times_kind_and_typed_attributes() -> None:
    doc = span(
        "00f067aa0ba902b7",
        parent_span_id="53995c3f42cd8ad8",
        kind=names.SPAN_KIND_HTTP_CLIENT,
        attributes={
            **span("x")["attributes"],
            names.ATTR_CAPTURE_GAP: "true",
            names.ATTR_OBSERVATION_POINT: "client",
        },
    )
    got = otlp_span(doc)
    assert got.trace_id == bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
    assert got.span_id == bytes.fromhex("00f067aa0ba902b7")
    assert got.parent_span_id == bytes.fromhex("53995c3f42cd8ad8")
    assert got.kind == Span.SpanKind.SPAN_KIND_CLIENT
    assert got.name == "POST /v1/chat/completions"
    assert (got.start_time_unix_nano, got.end_time_unix_nano) == (T0, T0 + 250_000_000)
    # pid and executable name are on the resource, not repeated on the span
    assert decode_attributes(got.attributes) == {
        names.ATTR_HTTP_METHOD: "POST",
        names.ATTR_URL_PATH: "/v1/chat/completions",
        names.ATTR_HTTP_STATUS: 200,
        names.ATTR_SERVER_PORT: 8000,
        names.ATTR_THREAD_ID: 4250,
        names.ATTR_CAPTURE_GAP: True,
        names.ATTR_OBSERVATION_POINT: "client",
    }
    assert [kv.key for kv in got.attributes] == sorted(kv.key for kv in got.attributes)
    assert got.status.code == Status.StatusCode.STATUS_CODE_UNSET


def test_a_pid_that_differs_from_the_resources_stays_on_the_span() -> None:
    doc = span("00f067aa0ba902b7", attributes={names.ATTR_PROCESS_PID: "77"})
    assert decode_attributes(otlp_span(doc).attributes)[names.ATTR_PROCESS_PID] == 77


def test_thread_id_comes_from_the_span_when_no_attribute_names_it() -> None:
    doc = span("00f067aa0ba902b7", attributes={})
    assert decode_attributes(otlp_span(doc).attributes) == {names.ATTR_THREAD_ID: 4250}


def test_an_error_span_says_why() -> None:
    failed = span(
        "00f067aa0ba902b7",
        status="ERROR",
        attributes={names.ATTR_ERROR_TYPE: "503", names.ATTR_ERROR_MESSAGE: "upstream 503"},
    )
    status = otlp_span(failed).status
    assert (status.code, status.message) == (Status.StatusCode.STATUS_CODE_ERROR, "upstream 503")
    only_type = span(
        "00f067aa0ba902b7", status="ERROR", attributes={names.ATTR_ERROR_TYPE: "ENOENT"}
    )
    assert otlp_span(only_type).status.message == "ENOENT"
    bare = span("00f067aa0ba902b7", status="ERROR", attributes={})
    assert otlp_span(bare).status == Status(code=Status.StatusCode.STATUS_CODE_ERROR)
    unset = span("00f067aa0ba902b7", status="UNSET")
    assert otlp_span(unset).status.code == Status.StatusCode.STATUS_CODE_UNSET


def test_the_same_spans_encode_to_the_same_bytes() -> None:
    spans = [span(f"{i:016x}", start_ns=T0 + i, end_ns=T0 + 2 * i + 1) for i in range(20)]
    shuffled = [dict(s, attributes=dict(reversed(list(s["attributes"].items())))) for s in spans]
    assert export_request(spans).SerializeToString() == export_request(shuffled).SerializeToString()


def test_no_spans_no_resources() -> None:
    assert export_request([]) == ExportTraceServiceRequest()
