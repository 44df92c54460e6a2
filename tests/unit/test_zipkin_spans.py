"""Spans as Zipkin v2 JSON (zerotrace_query/zipkin_spans.py): ids, kinds, microsecond times
that keep a child inside its parent, endpoints from the connection's addresses, the remote
service Zipkin's dependency graph needs, tags with Zipkin's error tag."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace import names
from zerotrace.errors import PoisonInput
from zerotrace_query.zipkin_spans import (
    encode,
    endpoint,
    microseconds,
    remote_service,
    zipkin_kind,
    zipkin_span,
)

pytestmark = pytest.mark.unit

T0 = 1_764_000_000_123_456_789


def client_span(**over: Any) -> dict[str, Any]:
    span: dict[str, Any] = {
        "span_id": "a1b2c3d4e5f60718",
        "trace_id": "0123456789abcdef0123456789abcdef",
        "parent_span_id": "1111222233334444",
        "node_id": "node-a",
        "pid": 4242,
        "tid": 4243,
        "process_name": "uvicorn",
        "container_id": None,
        "service": "gateway",
        "kind": names.protocol_span_kind(names.PROTOCOL_REDIS, "client"),
        "name": "GET",
        "start_ns": T0,
        "end_ns": T0 + 1_250_300,
        "status": "OK",
        "attributes": {
            names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_REDIS,
            names.ATTR_DB_OPERATION_NAME: "GET",
            names.ATTR_SERVER_ADDRESS: "127.0.0.1",
            names.ATTR_SERVER_PORT: "6379",
            names.ATTR_CLIENT_ADDRESS: "127.0.0.1",
            names.ATTR_CLIENT_PORT: "51234",
            names.ATTR_PROCESS_PID: "4242",
        },
        "duration_ns": 1_250_300,
    }
    span.update(over)
    return span


def test_a_client_span_maps_field_for_field() -> None:
    out = zipkin_span(client_span())
    assert out == {
        "traceId": "0123456789abcdef0123456789abcdef",
        "id": "a1b2c3d4e5f60718",
        "parentId": "1111222233334444",
        "kind": "CLIENT",
        "name": "GET",
        "timestamp": T0 // 1000,
        "duration": 1252,  # 123456.789 µs .. 124707.089 µs: rounded out on both sides
        "localEndpoint": {"serviceName": "gateway", "ipv4": "127.0.0.1", "port": 51234},
        "remoteEndpoint": {"serviceName": "redis", "ipv4": "127.0.0.1", "port": 6379},
        "tags": {
            names.ATTR_CLIENT_ADDRESS: "127.0.0.1",
            names.ATTR_CLIENT_PORT: "51234",
            names.ATTR_DB_OPERATION_NAME: "GET",
            names.ATTR_DB_SYSTEM_NAME: "redis",
            names.ATTR_PROCESS_PID: "4242",
            names.ATTR_SERVER_ADDRESS: "127.0.0.1",
            names.ATTR_SERVER_PORT: "6379",
        },
        "shared": False,
    }


def test_a_server_span_has_the_server_address_as_its_own_and_no_remote_name() -> None:
    attrs = {
        names.ATTR_HTTP_METHOD: "POST",
        names.ATTR_SERVER_ADDRESS: "::ffff:10.0.0.5",
        names.ATTR_SERVER_PORT: "8000",
        names.ATTR_CLIENT_ADDRESS: "fe80::1%eth0",
        names.ATTR_CLIENT_PORT: "40000",
    }
    out = zipkin_span(
        client_span(
            kind=names.SPAN_KIND_HTTP_SERVER,
            name="POST /v1/chat/completions",
            parent_span_id=None,
            service="llm-upstream",
            attributes=attrs,
        )
    )
    assert out["kind"] == "SERVER" and "parentId" not in out
    assert out["localEndpoint"] == {"serviceName": "llm-upstream", "ipv4": "10.0.0.5", "port": 8000}
    assert out["remoteEndpoint"] == {"ipv6": "fe80::1", "port": 40000}


def test_kinds_come_from_the_side() -> None:
    assert zipkin_kind(names.SPAN_KIND_HTTP_CLIENT) == "CLIENT"
    assert zipkin_kind(names.protocol_span_kind(names.PROTOCOL_POSTGRESQL, "server")) == "SERVER"
    assert zipkin_kind(names.SPAN_KIND_FILE_OPEN) is None


def test_a_local_span_has_no_kind_and_only_its_service() -> None:
    out = zipkin_span(
        client_span(
            kind=names.SPAN_KIND_FILE_OPEN,
            name="open /models/llama.gguf",
            attributes={names.ATTR_FILE_PATH: "/models/llama.gguf"},
        )
    )
    assert "kind" not in out and "remoteEndpoint" not in out
    assert out["localEndpoint"] == {"serviceName": "gateway"}


def test_the_remote_end_is_named_by_system_then_address() -> None:
    pg = {names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_POSTGRESQL, names.ATTR_SERVER_ADDRESS: "db"}
    assert remote_service(pg) == "postgresql"
    kafka = {names.ATTR_MESSAGING_SYSTEM: names.PROTOCOL_KAFKA, names.ATTR_SERVER_ADDRESS: "b"}
    assert remote_service(kafka) == "kafka"
    assert remote_service({names.ATTR_SERVER_ADDRESS: "api.openai.com"}) == "api.openai.com"
    assert remote_service({}) is None
    http = client_span(
        kind=names.SPAN_KIND_HTTP_CLIENT,
        attributes={names.ATTR_SERVER_ADDRESS: "api.openai.com", names.ATTR_SERVER_PORT: "443"},
    )
    # A host name is no IP: it names the remote end, and the port stays.
    assert zipkin_span(http)["remoteEndpoint"] == {"serviceName": "api.openai.com", "port": 443}


def test_an_endpoint_keeps_only_what_zipkin_can_read() -> None:
    assert endpoint("not an ip", "0") is None
    assert endpoint("", "", "svc") == {"serviceName": "svc"}
    assert endpoint("2001:db8::1", "70000") == {"ipv6": "2001:db8::1"}
    assert endpoint("[::1]", 443) == {"ipv6": "::1", "port": 443}


def test_an_error_span_carries_zipkins_error_tag() -> None:
    message = "WRONGTYPE Operation against a key holding the wrong kind of value"
    attrs = {names.ATTR_ERROR_TYPE: "WRONGTYPE", names.ATTR_ERROR_MESSAGE: message}
    assert zipkin_span(client_span(status="ERROR", attributes=attrs))["tags"]["error"] == message
    typed = {names.ATTR_ERROR_TYPE: "503"}
    assert zipkin_span(client_span(status="ERROR", attributes=typed))["tags"]["error"] == "503"
    assert zipkin_span(client_span(status="ERROR", attributes={}))["tags"] == {"error": "true"}
    assert "error" not in zipkin_span(client_span(attributes=attrs))["tags"]


def test_no_attributes_no_tags_and_upper_case_ids_are_lowered() -> None:
    out = zipkin_span(client_span(attributes={}, span_id="A1B2C3D4E5F60718"))
    assert "tags" not in out and out["id"] == "a1b2c3d4e5f60718"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("trace_id", "t-123"),
        ("span_id", "abc"),
        ("span_id", "zzzzzzzzzzzzzzzz"),
        ("parent_span_id", "xyz"),
        ("parent_span_id", "a1b2c3d4e5f60718"),  # its own parent
    ],
)
def test_malformed_ids_are_refused(field: str, value: str) -> None:
    with pytest.raises(PoisonInput):
        zipkin_span(client_span(**{field: value}))


def test_a_64_bit_trace_id_is_kept() -> None:
    assert zipkin_span(client_span(trace_id="0123456789abcdef"))["traceId"] == "0123456789abcdef"


@given(st.integers(0, 2**62), st.integers(0, 10**12))
def test_microseconds_cover_the_span_and_are_never_empty(start: int, length: int) -> None:
    timestamp, duration = microseconds(start, start + length)
    assert duration >= 1
    assert timestamp * 1000 <= start
    assert (timestamp + duration) * 1000 >= start + length
    # never more than one µs wider at each end (and at least 1 µs long)
    assert duration <= max(length // 1000 + 2, 1)


def test_encode_is_a_json_list() -> None:
    spans = [zipkin_span(client_span()), zipkin_span(client_span(span_id="00000000000000aa"))]
    assert json.loads(encode(spans)) == spans
    assert encode([]) == b"[]"
