"""OTLP trace export of a window (zerotrace_query/otlp_export.py) to a real OTLP receiver the
test starts, built from the official opentelemetry-proto definitions (tests/harness/
otlp_receiver.py), over gRPC and HTTP.

The spans are a client -> gateway -> {Redis, PostgreSQL, upstream LLM server} topology on
three nodes, linked by the edges trace assembly writes (tcp_seq between a client's and a
server's span of one exchange, same_thread inside the gateway). The truth is the topology
the test built: every span that started in the window arrives once, with its trace's root
id (also when the root started before the window), its parent, kind, times, typed
attributes and its process's resource. Then the retry rules against the same receiver: 503
with Retry-After then 200, UNAVAILABLE then OK, RetryInfo, 400 never retried, giving up in
time, partial success counted."""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTracePartialSuccess
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.harness.otlp_receiver import GrpcFailure, HttpFailure, OtlpReceiver, decode_attributes
from zerotrace import __version__, names
from zerotrace.clock import ManualClock
from zerotrace.errors import ConfigError, TransientIO
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query import otlp_export
from zerotrace_query.documents import INDEX_SPECS, SPANS, TRACE_EDGES, span_document
from zerotrace_query.otlp_export import export_window, grpc_target, http_url, window_spans
from zerotrace_query.otlp_retry import Backoff, rpc_status

pytestmark = pytest.mark.unit
MS = 1_000_000
S = 1_000 * MS
T0 = 1_760_000_000 * S
TRACES = 40
FROM_NS = T0 + 3 * MS + MS // 2  # trace 0's client, gateway server and Redis call are before
TO_NS = T0 + 35 * 20 * MS  # traces 35.. start after
PROTOCOLS = ("grpc", "http")


@dataclass(frozen=True)
class Process:
    service: str
    node: str
    pid: int
    executable: str
    container: str | None = None


LOADGEN = Process("loadgen", "node-a", 4100, "python3")
GATEWAY = Process("gateway", "node-b", 5200, "uvicorn", "3f2ac0ffee7d4b1e9a11")
UPSTREAM = Process("llm-upstream", "node-c", 6300, "llama-server")
# The test's own list of the attributes below that OpenTelemetry types as int or bool.
INTS = {
    names.ATTR_SERVER_PORT,
    names.ATTR_CLIENT_PORT,
    names.ATTR_THREAD_ID,
    names.ATTR_HTTP_STATUS,
    names.ATTR_HTTP_REQUEST_BODY_SIZE,
    names.ATTR_TCP_REQUEST_SEQ,
    names.ATTR_SOURCE_EVENTS,
    names.ATTR_SERVER_DURATION,
    names.ATTR_GEN_AI_INPUT_TOKENS,
    names.ATTR_GEN_AI_OUTPUT_TOKENS,
    names.ATTR_DB_RESPONSE_RETURNED_ROWS,
}
BOOLS = {names.ATTR_CAPTURE_GAP}
KINDS = {"client": Span.SpanKind.SPAN_KIND_CLIENT, "server": Span.SpanKind.SPAN_KIND_SERVER}


def make_span(
    role: int, i: int, proc: Process, kind: str, name: str, start: int, end: int, **attrs: str
) -> dict[str, Any]:
    return {
        "span_id": f"{role:02x}{i:014x}",
        "trace_id": f"{role:02x}{i:030x}",  # each span its own, as the correlator writes them
        "parent_span_id": None,
        "node_id": proc.node,
        "pid": proc.pid,
        "tid": proc.pid + 1 + i % 16,
        "process_name": proc.executable,
        "container_id": proc.container,
        "service": proc.service,
        "kind": kind,
        "name": name,
        "start_ns": start,
        "end_ns": end,
        "status": "OK",
        "attributes": {
            names.ATTR_PROCESS_PID: str(proc.pid),
            names.ATTR_PROCESS_NAME: proc.executable,
            names.ATTR_THREAD_ID: str(proc.pid + 1 + i % 16),
            names.ATTR_SOURCE_EVENTS: str(4 + i % 3),
            **attrs,
        },
        "source_event_ids": [],
    }


def edge(parent: dict[str, Any], child: dict[str, Any], rule: str) -> dict[str, Any]:
    return {
        "edge_id": f"{parent['span_id']}>{child['span_id']}",
        "trace_id": parent["trace_id"],
        "parent_span_id": parent["span_id"],
        "child_span_id": child["span_id"],
        "rule": rule,
        "ts_ns": child["start_ns"],
    }


def http_attrs(
    method: str, path: str, server: str, port: int, client_port: int, status: int
) -> dict[str, str]:
    return {
        names.ATTR_HTTP_METHOD: method,
        names.ATTR_URL_PATH: path,
        names.ATTR_SERVER_ADDRESS: server,
        names.ATTR_SERVER_PORT: str(port),
        names.ATTR_CLIENT_ADDRESS: "10.0.0.1",
        names.ATTR_CLIENT_PORT: str(client_port),
        names.ATTR_HTTP_STATUS: str(status),
        names.ATTR_HTTP_REQUEST_BODY_SIZE: "412",
        names.ATTR_NETWORK_PROTOCOL_VERSION: "1.1",
    }


def topology() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str | None]]:
    """Spans, edges, and the truth: each span's parent. A trace every 20 ms, each 300 ms long,
    so about 15 run at once; every 7th upstream call fails with 503."""
    spans: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    parent: dict[str, str | None] = {}
    chat = "/v1/chat/completions"
    for i in range(TRACES):
        s = T0 + i * 20 * MS
        status = 503 if i % 7 == 3 else 200
        client = make_span(
            1, i, LOADGEN, names.SPAN_KIND_HTTP_CLIENT, f"POST {chat}", s, s + 300 * MS,
            **http_attrs("POST", chat, "10.0.0.2", 8080, 40000 + i, status),
            **{names.ATTR_OBSERVATION_POINT: "client", names.ATTR_TCP_REQUEST_SEQ: str(7_000 + i)},
        )  # fmt: skip
        server = make_span(
            2, i, GATEWAY, names.SPAN_KIND_HTTP_SERVER, f"POST {chat}", s + MS, s + 299 * MS,
            **http_attrs("POST", chat, "10.0.0.2", 8080, 40000 + i, status),
            **{names.ATTR_OBSERVATION_POINT: "server", names.ATTR_TCP_REQUEST_SEQ: str(7_000 + i)},
        )  # fmt: skip
        redis = make_span(
            3, i, GATEWAY, names.protocol_span_kind(names.PROTOCOL_REDIS, "client"), "GET",
            s + 2 * MS, s + 3 * MS,
            **{names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_REDIS, names.ATTR_DB_OPERATION_NAME: "GET",
               names.ATTR_SERVER_ADDRESS: "10.0.0.3", names.ATTR_SERVER_PORT: "6379",
               names.ATTR_DB_NAMESPACE: "0"},
        )  # fmt: skip
        postgres = make_span(
            4, i, GATEWAY, names.protocol_span_kind(names.PROTOCOL_POSTGRESQL, "client"),
            "SELECT users", s + 4 * MS, s + 10 * MS,
            **{names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_POSTGRESQL,
               names.ATTR_DB_QUERY_TEXT: "SELECT * FROM users WHERE id = $1",
               names.ATTR_DB_RESPONSE_RETURNED_ROWS: "1", names.ATTR_SERVER_PORT: "5432"},
        )  # fmt: skip
        llm = {
            names.ATTR_GEN_AI_OPERATION: "chat",
            names.ATTR_GEN_AI_PROVIDER: names.GEN_AI_PROVIDER_OPENAI,
            names.ATTR_GEN_AI_REQUEST_MODEL: "qwen2.5-0.5b",
            names.ATTR_SERVER_DURATION: str(40 * MS + i),
        }
        if status == 200:
            llm[names.ATTR_GEN_AI_INPUT_TOKENS] = str(30 + i)
            llm[names.ATTR_GEN_AI_OUTPUT_TOKENS] = str(60 + i)
        upstream_client = make_span(
            5, i, GATEWAY, names.SPAN_KIND_HTTP_CLIENT, f"POST {chat}", s + 11 * MS, s + 290 * MS,
            **http_attrs("POST", chat, "10.0.0.4", 8000, 51000 + i, status), **llm,
            **{names.ATTR_OBSERVATION_POINT: "client"},
        )  # fmt: skip
        upstream_server = make_span(
            6, i, UPSTREAM, names.SPAN_KIND_HTTP_SERVER, f"POST {chat}", s + 12 * MS,
            s + 289 * MS,
            **http_attrs("POST", chat, "10.0.0.4", 8000, 51000 + i, status), **llm,
            **{names.ATTR_OBSERVATION_POINT: "server"},
        )  # fmt: skip
        if status != 200:
            for failed in (upstream_client, upstream_server):
                failed["status"] = "ERROR"
                failed["attributes"][names.ATTR_ERROR_TYPE] = "503"
            upstream_server["attributes"][names.ATTR_ERROR_MESSAGE] = "upstream overloaded"
        if i % 5 == 0:
            upstream_client["attributes"][names.ATTR_CAPTURE_GAP] = "true"
        trace = [client, server, redis, postgres, upstream_client, upstream_server]
        spans += trace
        links = [
            (client, server, names.TRACE_RULE_TCP_SEQ),
            (server, redis, names.TRACE_RULE_SAME_THREAD),
            (server, postgres, names.TRACE_RULE_SAME_THREAD),
            (server, upstream_client, names.TRACE_RULE_SAME_THREAD),
            (upstream_client, upstream_server, names.TRACE_RULE_TCP_SEQ),
        ]
        edges += [edge(p, c, rule) for p, c, rule in links]
        parent[client["span_id"]] = None
        parent.update({c["span_id"]: p["span_id"] for p, c, _ in links})
    # A file open on its own in the window: no parent, its own trace, INTERNAL.
    lone = make_span(
        7, 0, UPSTREAM, names.SPAN_KIND_FILE_OPEN, "open /models/qwen.gguf", T0 + 100 * MS,
        T0 + 100 * MS + 20_000, **{names.ATTR_FILE_PATH: "/models/qwen.gguf"},
    )  # fmt: skip
    spans.append(lone)
    parent[lone["span_id"]] = None
    return spans, edges, parent


SPANS_, EDGES_, PARENT = topology()
BY_ID = {s["span_id"]: s for s in SPANS_}


def root_of(span_id: str) -> dict[str, Any]:
    while PARENT[span_id] is not None:
        span_id = str(PARENT[span_id])
    return BY_ID[span_id]


def in_window() -> list[dict[str, Any]]:
    return [s for s in SPANS_ if FROM_NS <= s["start_ns"] < TO_NS]


@pytest.fixture
def store() -> Iterator[DuckDBStore]:
    db = DuckDBStore(":memory:")
    try:
        for spec in INDEX_SPECS:
            db.ensure_index(spec)
        assert db.bulk_upsert(SPANS.name, [span_document(s) for s in SPANS_]).ok
        assert db.bulk_upsert(TRACE_EDGES.name, [(e["edge_id"], e) for e in EDGES_]).ok
        db.refresh(SPANS.name)
        db.refresh(TRACE_EDGES.name)
        yield db
    finally:
        db.close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as started:
        yield started


def endpoint(receiver: OtlpReceiver, protocol: str) -> str:
    return receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint


def expected_attributes(doc: dict[str, Any]) -> dict[str, Any]:
    attrs = dict(doc["attributes"])
    del attrs[names.ATTR_PROCESS_PID], attrs[names.ATTR_PROCESS_NAME]  # on the resource
    return {
        k: int(v) if k in INTS else (v == "true") if k in BOOLS else v for k, v in attrs.items()
    }


def expected_resource(doc: dict[str, Any]) -> dict[str, Any]:
    resource = {
        names.ATTR_SERVICE_NAME: doc["service"],
        names.ATTR_HOST_NAME: doc["node_id"],
        names.ATTR_PROCESS_PID: doc["pid"],
        names.ATTR_PROCESS_NAME: doc["process_name"],
        names.ATTR_TELEMETRY_SDK_NAME: "zerotrace",
        names.ATTR_TELEMETRY_SDK_VERSION: __version__,
    }
    if doc["container_id"]:
        resource[names.ATTR_CONTAINER_ID] = doc["container_id"]
    return resource


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_window_arrives_whole_with_its_trees(
    store: DuckDBStore, receiver: OtlpReceiver, protocol: str
) -> None:
    result = export_window(
        store,
        FROM_NS,
        TO_NS,
        endpoint(receiver, protocol),
        protocol,
        batch_spans=64,
        headers={"x-api-key": "k-123"},
    )
    wanted = in_window()
    assert len(wanted) == 35 * 6 - 3 + 1  # trace 0's first three before the window, the file
    batches = math.ceil(len(wanted) / 64)
    assert (result.spans, result.batches, result.retries, result.rejected) == (
        len(wanted),
        batches,
        0,
        0,
    )
    got = getattr(receiver, protocol)
    assert (got.attempts, len(got.requests)) == (batches, batches)
    assert all(h.get("x-api-key") == "k-123" for h in got.headers)
    received = list(receiver.spans(protocol))
    assert sorted(span.span_id.hex() for _, _, span in received) == sorted(
        s["span_id"] for s in wanted
    )  # every span once
    for resource, scope, span in received:
        doc = BY_ID[span.span_id.hex()]
        parent = PARENT[doc["span_id"]]
        assert span.trace_id.hex() == root_of(doc["span_id"])["trace_id"]
        assert span.parent_span_id.hex() == (parent or "")
        side = doc["kind"].rsplit(".", 1)[-1]
        assert span.kind == KINDS.get(side, Span.SpanKind.SPAN_KIND_INTERNAL)
        assert span.name == doc["name"]
        assert (span.start_time_unix_nano, span.end_time_unix_nano) == (
            doc["start_ns"],
            doc["end_ns"],
        )
        assert decode_attributes(span.attributes) == expected_attributes(doc)
        assert resource == expected_resource(doc)
        assert scope == "zerotrace"
        if doc["status"] == "ERROR":
            message = doc["attributes"].get(names.ATTR_ERROR_MESSAGE, "503")
            assert (span.status.code, span.status.message) == (
                Status.StatusCode.STATUS_CODE_ERROR,
                message,
            )
        else:
            assert span.status.code == Status.StatusCode.STATUS_CODE_UNSET
    # trace 0 started before the window: its spans in it still carry its root's id and
    # their parents (the gateway's server span, not sent again), read from the store
    first = [span for _, _, span in received if span.span_id.hex().endswith(f"{0:014x}")]
    assert sorted(s.span_id.hex()[:2] for s in first) == ["04", "05", "06", "07"]
    trace0 = bytes.fromhex(BY_ID[f"01{0:014x}"]["trace_id"])
    assert all(s.trace_id == trace0 for s in first if not s.span_id.hex().startswith("07"))
    assert result.summary() == (
        f"OTLP/{protocol} {got_target(receiver, protocol)}: {len(wanted)} spans sent in "
        f"{batches} requests"
    )


def got_target(receiver: OtlpReceiver, protocol: str) -> str:
    if protocol == "grpc":
        return receiver.grpc_endpoint
    return f"{receiver.http_endpoint}/v1/traces"


def test_window_spans_read_past_a_store_page_and_ties(store: DuckDBStore) -> None:
    ties = [
        dict(make_span(8, j, LOADGEN, "file.open", "open", T0 + 500 * MS + j // 3, T0 + S))
        for j in range(20)
    ]  # three spans at each nanosecond, across pages of 7
    assert store.bulk_upsert(SPANS.name, [span_document(s) for s in ties]).ok
    store.refresh(SPANS.name)
    got = window_spans(store, FROM_NS, TO_NS, page=7)
    assert sorted(s["span_id"] for s in got) == sorted(s["span_id"] for s in [*in_window(), *ties])
    assert [s["start_ns"] for s in got] == sorted(s["start_ns"] for s in got)


def test_a_window_too_large_to_link_in_memory_is_refused(
    store: DuckDBStore, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(otlp_export, "MAX_WINDOW_SPANS", 100)
    with pytest.raises(ConfigError, match="more than 100 spans: export shorter windows"):
        export_window(store, FROM_NS, TO_NS, receiver.grpc_endpoint, "grpc")
    assert receiver.grpc.attempts == 0


def test_an_empty_window_sends_nothing(store: DuckDBStore, receiver: OtlpReceiver) -> None:
    result = export_window(store, T0 - 10 * S, T0 - S, receiver.http_endpoint, "http")
    assert (result.spans, result.batches, receiver.http.attempts) == (0, 0, 0)
    assert result.summary().endswith(": 0 spans sent in 0 requests")


class Sleeps:
    """Records every wait; really waits when `real`, else moves the manual clock."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.waits: list[float] = []
        self.clock = clock

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.clock is None:
            time.sleep(seconds)
        else:
            self.clock.advance(int(seconds * S))


def test_http_503_with_retry_after_then_200(store: DuckDBStore, receiver: OtlpReceiver) -> None:
    receiver.http_failures = [HttpFailure(503, {"Retry-After": "1"}, b"busy")]
    sleeps = Sleeps()
    result = export_window(
        store, FROM_NS, TO_NS, receiver.http_endpoint, "http", batch_spans=500, sleep=sleeps
    )
    assert sleeps.waits == [1.0]
    assert (receiver.http.attempts, len(receiver.http.requests)) == (2, 1)
    assert (result.spans, result.batches, result.retries) == (len(in_window()), 1, 1)
    assert len(list(receiver.spans("http"))) == len(in_window())
    assert ", 1 retry" in result.summary()


def test_http_retry_after_as_a_date(store: DuckDBStore, receiver: OtlpReceiver) -> None:
    clock = ManualClock(1_445_412_480 * S - 5 * S)  # 5 s before the date below
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    receiver.http_failures = [HttpFailure(429, {"Retry-After": date})]
    sleeps = Sleeps(clock)
    export_window(
        store, FROM_NS, TO_NS, receiver.http_endpoint, "http", batch_spans=500,
        clock=clock, sleep=sleeps,
    )  # fmt: skip
    assert sleeps.waits == [5.0]


def test_grpc_unavailable_then_ok(store: DuckDBStore, receiver: OtlpReceiver) -> None:
    receiver.grpc_failures = [GrpcFailure(grpc.StatusCode.UNAVAILABLE, "restarting")]
    sleeps = Sleeps()
    result = export_window(
        store, FROM_NS, TO_NS, receiver.grpc_endpoint, "grpc", batch_spans=500,
        backoff=Backoff(first_s=0.05), sleep=sleeps,
    )  # fmt: skip
    assert sleeps.waits == [0.05]
    assert (receiver.grpc.attempts, len(receiver.grpc.requests)) == (2, 1)
    assert (result.spans, result.retries) == (len(in_window()), 1)


def test_grpc_resource_exhausted_waits_as_retry_info_says(
    store: DuckDBStore, receiver: OtlpReceiver
) -> None:
    receiver.grpc_failures = [GrpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, "full", 0.2)]
    sleeps = Sleeps()
    result = export_window(
        store, FROM_NS, TO_NS, receiver.grpc_endpoint, "grpc", batch_spans=500, sleep=sleeps
    )
    assert sleeps.waits == [0.2]
    assert (receiver.grpc.attempts, result.spans) == (2, len(in_window()))


def test_grpc_resource_exhausted_without_retry_info_is_final(
    store: DuckDBStore, receiver: OtlpReceiver
) -> None:
    receiver.grpc_failures = [GrpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, "too big")]
    sleeps = Sleeps()
    with pytest.raises(ConfigError) as refused:
        export_window(store, FROM_NS, TO_NS, receiver.grpc_endpoint, "grpc", sleep=sleeps)
    assert (receiver.grpc.attempts, sleeps.waits) == (1, [])
    assert "RESOURCE_EXHAUSTED: too big" in str(refused.value)


def test_http_400_is_not_retried(store: DuckDBStore, receiver: OtlpReceiver) -> None:
    bad = rpc_status(3, "span 7 has no name")
    receiver.http_failures = [
        None,
        HttpFailure(400, body=bad, content_type="application/x-protobuf"),
    ]
    sleeps = Sleeps()
    with pytest.raises(ConfigError) as refused:
        export_window(
            store, FROM_NS, TO_NS, receiver.http_endpoint, "http", batch_spans=64, sleep=sleeps
        )
    assert (receiver.http.attempts, len(receiver.http.requests), sleeps.waits) == (2, 1, [])
    message = str(refused.value)
    assert "\n" not in message
    assert "HTTP 400: span 7 has no name" in message and "64 spans were sent before" in message


def test_grpc_invalid_argument_is_not_retried(store: DuckDBStore, receiver: OtlpReceiver) -> None:
    receiver.grpc_failures = [GrpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "bad span")]
    with pytest.raises(ConfigError, match="INVALID_ARGUMENT: bad span"):
        export_window(store, FROM_NS, TO_NS, receiver.grpc_endpoint, "grpc", sleep=Sleeps())
    assert receiver.grpc.attempts == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_gives_up_in_the_time_allowed(
    store: DuckDBStore, receiver: OtlpReceiver, protocol: str
) -> None:
    clock = ManualClock(T0)
    sleeps = Sleeps(clock)
    receiver.http_failures = [HttpFailure(503, {"Retry-After": "1"})] * 10
    receiver.grpc_failures = [GrpcFailure(grpc.StatusCode.UNAVAILABLE, "down", 1.0)] * 10
    with pytest.raises(TransientIO) as gave_up:
        export_window(
            store, FROM_NS, TO_NS, endpoint(receiver, protocol), protocol,
            give_up_after_s=2.5, clock=clock, sleep=sleeps,
        )  # fmt: skip
    assert sleeps.waits == [1.0, 1.0]  # a third wait would end past 2.5 s
    assert getattr(receiver, protocol).attempts == 3
    message = str(gave_up.value)
    assert "\n" not in message and "gave up after 3 attempts within 2.5 s" in message
    assert ("HTTP 503" if protocol == "http" else "UNAVAILABLE: down") in message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_absent_receiver_is_retried_then_given_up(store: DuckDBStore, protocol: str) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    clock = ManualClock(T0)
    sleeps = Sleeps(clock)
    with pytest.raises(TransientIO, match="gave up after 4 attempts"):
        export_window(
            store, FROM_NS, TO_NS, f"http://127.0.0.1:{port}", protocol,
            give_up_after_s=10, clock=clock, sleep=sleeps,
        )  # fmt: skip
    assert sleeps.waits == [1.0, 2.0, 4.0]  # the backoff; 8 more would pass 10 s


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_partial_success_is_counted(
    store: DuckDBStore, receiver: OtlpReceiver, protocol: str
) -> None:
    receiver.partial = ExportTracePartialSuccess(rejected_spans=2, error_message="2 spans too old")
    result = export_window(
        store, FROM_NS, TO_NS, endpoint(receiver, protocol), protocol, batch_spans=100
    )
    assert (result.batches, result.spans, result.rejected) == (3, len(in_window()), 6)
    assert result.messages == ["2 spans too old"]
    assert result.summary().endswith(", 6 rejected by the receiver (2 spans too old)")


def test_endpoints() -> None:
    assert grpc_target("collector") == ("collector:4317", False)
    assert grpc_target("collector:55680") == ("collector:55680", False)
    assert grpc_target("https://otel.example.com") == ("otel.example.com:443", True)
    assert grpc_target("http://[::1]:4317") == ("[::1]:4317", False)
    assert http_url("collector") == "http://collector:4318/v1/traces"
    assert (
        http_url("https://otlp.example.com/otlp/") == "https://otlp.example.com:443/otlp/v1/traces"
    )
    assert http_url("http://127.0.0.1:9/v1/traces") == "http://127.0.0.1:9/v1/traces"
    for bad in ("", "ftp://x", "host:99999", "http://"):
        with pytest.raises(ConfigError):
            http_url(bad)


def test_bad_arguments_say_so(store: DuckDBStore) -> None:
    with pytest.raises(ConfigError, match="'grpc' or 'http'"):
        export_window(store, FROM_NS, TO_NS, "localhost", "zipkin")
    with pytest.raises(ConfigError, match="after '--from'"):
        export_window(store, TO_NS, FROM_NS, "localhost", "grpc")
