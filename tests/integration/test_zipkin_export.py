"""Zipkin export (zerotrace_query/zipkin_export.py) against a real Zipkin server: the exec jar
from Maven Central, started by this module (tests/harness/zipkin_server.py). A gateway's
requests (its server span; its calls to Redis, PostgreSQL and an upstream; the upstream's
server span joined to the gateway's call by TCP sequence numbers) go in a DuckDB store with
their trace edges; export_window sends the window, and Zipkin's own API must show the same
trees, services and dependency links. Retries are proven on a small stub server that answers
503 (or 429) first."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.harness.zipkin_server import ZipkinServer, zipkin_server
from zerotrace import names
from zerotrace.clock import ManualClock
from zerotrace.errors import ConfigError, TransientIO
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query import otlp_retry
from zerotrace_query.documents import INDEX_SPECS, SPANS, TRACE_EDGES, span_document
from zerotrace_query.zipkin_export import export_window, retry_wait_s, spans_url

T0 = 1_764_590_400_000_000_000  # 2025-12-01T12:00:00Z
MS = 1_000_000
FROM_NS, TO_NS = T0 - 1_000 * MS, T0 + 10_000 * MS
GATEWAY, UPSTREAM = "gateway", "llm-upstream"
CHAT = "POST /v1/chat/completions"


def hex_id(text: str, size: int = 8) -> str:
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def span(
    key: str,
    service: str,
    kind: str,
    name: str,
    start_ms: float,
    end_ms: float,
    client: tuple[str, int] | None,
    server: tuple[str, int] | None,
    attrs: dict[str, str] | None = None,
    status: str = "OK",
) -> dict[str, Any]:
    """A derived span as the correlator writes it: standing alone (its own trace id, no
    parent), the connection's ends and the process in its attributes."""
    pid = 1000 if service == GATEWAY else 2000
    attributes = {
        names.ATTR_PROCESS_PID: str(pid),
        names.ATTR_THREAD_ID: str(pid),
        names.ATTR_PROCESS_NAME: "python3",
        **(attrs or {}),
    }
    if client and server:
        attributes |= {
            names.ATTR_CLIENT_ADDRESS: client[0],
            names.ATTR_CLIENT_PORT: str(client[1]),
            names.ATTR_SERVER_ADDRESS: server[0],
            names.ATTR_SERVER_PORT: str(server[1]),
        }
    return {
        "span_id": hex_id(key),
        "trace_id": hex_id(key, 16),
        "parent_span_id": None,
        "node_id": "node-a",
        "pid": pid,
        "tid": pid,
        "process_name": "python3",
        "container_id": None,
        "service": service,
        "kind": kind,
        "name": name,
        "start_ns": T0 + int(start_ms * MS),
        "end_ns": T0 + int(end_ms * MS),
        "status": status,
        "attributes": attributes,
        "source_event_ids": [],
    }


def edge(parent: dict[str, Any], child: dict[str, Any], rule: str) -> dict[str, Any]:
    return {
        "edge_id": hex_id(f"{parent['span_id']}>{child['span_id']}>{rule}"),
        "trace_id": parent["trace_id"],
        "parent_span_id": parent["span_id"],
        "child_span_id": child["span_id"],
        "rule": rule,
        "ts_ns": child["start_ns"],
    }


LOCAL = "127.0.0.1"


def request(
    n: int, at_ms: float, redis_error: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One request through the gateway: (spans, edges). Ports differ per request."""
    port = 50_000 + 10 * n
    http = {names.ATTR_HTTP_METHOD: "POST", names.ATTR_URL_PATH: "/v1/chat/completions"}
    root = span(
        f"gw-{n}",
        GATEWAY,
        names.SPAN_KIND_HTTP_SERVER,
        CHAT,
        at_ms,
        at_ms + 40.5,
        (LOCAL, port),
        (LOCAL, 8000),
        {**http, names.ATTR_HTTP_STATUS: "200"},
    )
    redis_attrs = {names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_REDIS}
    if redis_error:
        redis_attrs[names.ATTR_ERROR_TYPE] = "WRONGTYPE"
        redis_attrs[names.ATTR_ERROR_MESSAGE] = "WRONGTYPE Operation against a key"
    redis = span(
        f"redis-{n}",
        GATEWAY,
        names.protocol_span_kind(names.PROTOCOL_REDIS, "client"),
        "GET",
        at_ms + 1.0003,
        at_ms + 1.3,
        (LOCAL, port + 1),
        (LOCAL, 6379),
        redis_attrs,
        "ERROR" if redis_error else "OK",
    )
    pg = span(
        f"pg-{n}",
        GATEWAY,
        names.protocol_span_kind(names.PROTOCOL_POSTGRESQL, "client"),
        "SELECT orders",
        at_ms + 2,
        at_ms + 5.2,
        (LOCAL, port + 2),
        (LOCAL, 5432),
        {names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_POSTGRESQL},
    )
    call = span(
        f"call-{n}",
        GATEWAY,
        names.SPAN_KIND_HTTP_CLIENT,
        CHAT,
        at_ms + 6,
        at_ms + 38,
        (LOCAL, port + 3),
        (LOCAL, 9000),
        {**http, names.ATTR_HTTP_STATUS: "200", names.ATTR_TCP_REQUEST_SEQ: str(7_000 + n)},
    )
    served = span(
        f"up-{n}",
        UPSTREAM,
        names.SPAN_KIND_HTTP_SERVER,
        CHAT,
        at_ms + 6.2,
        at_ms + 37.8,
        (LOCAL, port + 3),
        (LOCAL, 9000),
        {**http, names.ATTR_HTTP_STATUS: "200", names.ATTR_TCP_REQUEST_SEQ: str(7_000 + n)},
    )
    edges = [
        edge(root, redis, names.TRACE_RULE_SAME_THREAD),
        edge(root, pg, names.TRACE_RULE_SAME_THREAD),
        edge(root, call, names.TRACE_RULE_SAME_THREAD),
        edge(call, served, names.TRACE_RULE_TCP_SEQ),
    ]
    return [root, redis, pg, call, served], edges


def topology() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str | None]]:
    """Two requests, a lone file open, and one span on each side outside the window:
    (spans, edges, the true parent of each span in the window)."""
    first, first_edges = request(1, 100)
    second, second_edges = request(2, 250, redis_error=True)
    lone = span("open-1", UPSTREAM, names.SPAN_KIND_FILE_OPEN, "open", 300, 300.01, None, None)
    before = request(3, -2_000)[0][0]
    after = request(4, 11_000)[0][0]
    truth: dict[str, str | None] = {lone["span_id"]: None}
    for spans in (first, second):
        root, redis, pg, call, served = (s["span_id"] for s in spans)
        truth |= {root: None, redis: root, pg: root, call: root, served: call}
    return [*first, *second, lone, before, after], [*first_edges, *second_edges], truth


@pytest.fixture
def store() -> Iterator[DuckDBStore]:
    db = DuckDBStore(":memory:")
    for spec in INDEX_SPECS:
        db.ensure_index(spec)
    yield db
    db.close()


def fill(db: DuckDBStore, spans: list[dict[str, Any]], edges: list[dict[str, Any]]) -> None:
    assert db.bulk_upsert(SPANS.name, [span_document(s) for s in spans]).ok
    assert db.bulk_upsert(TRACE_EDGES.name, [(e["edge_id"], e) for e in edges]).ok
    db.refresh(SPANS.name)
    db.refresh(TRACE_EDGES.name)


@pytest.fixture(scope="module")
def zipkin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZipkinServer]:
    with zipkin_server(tmp_path_factory.mktemp("zipkin")) as server:
        yield server


def wait_for_trace(zipkin: ZipkinServer, trace_id: str, count: int) -> list[dict[str, Any]]:
    """Zipkin answers 202 and stores on its own time: poll until the trace is whole."""
    deadline = time.monotonic() + 30
    got: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            got = zipkin.get(f"/api/v2/trace/{trace_id}")
        except OSError:  # 404 until its first span is stored
            got = []
        if len(got) >= count:
            return got
        time.sleep(0.1)
    raise AssertionError(f"trace {trace_id}: {len(got)} of {count} spans in Zipkin")


def test_zipkin_shows_the_same_trees(store: DuckDBStore, zipkin: ZipkinServer) -> None:
    spans, edges, truth = topology()
    fill(store, spans, edges)
    result = export_window(store, FROM_NS, TO_NS, zipkin.url, batch_spans=4)
    assert (result.spans, result.batches, result.retries, result.skipped) == (11, 3, 0, 0)
    assert result.summary() == f"Zipkin {zipkin.url}/api/v2/spans: 11 spans sent in 3 requests"

    by_id = {s["span_id"]: s for s in spans}

    def root_of(span_id: str) -> str:
        parent = truth[span_id]
        return span_id if parent is None else root_of(parent)

    traces: dict[str, set[str]] = {}
    for span_id in truth:
        traces.setdefault(by_id[root_of(span_id)]["trace_id"], set()).add(span_id)
    assert len(traces) == 3
    for trace_id, members in traces.items():
        got = wait_for_trace(zipkin, trace_id, len(members))
        assert {z["id"] for z in got} == members
        for z in got:
            ours = by_id[z["id"]]
            side = ours["kind"].rsplit(".", 1)[-1]
            start_us, end_us = ours["start_ns"] // 1000, -(-ours["end_ns"] // 1000)
            assert z["traceId"] == trace_id
            assert z.get("parentId") == truth[z["id"]]
            assert z["name"] == ours["name"].lower()  # Zipkin lowers names
            assert z.get("kind") == {"client": "CLIENT", "server": "SERVER"}.get(side)
            assert z["localEndpoint"]["serviceName"] == ours["service"]
            assert (z["timestamp"], z["duration"]) == (start_us, end_us - start_us)
            assert z["tags"][names.ATTR_PROCESS_PID] == str(ours["pid"])
            if ours["status"] == "ERROR":
                assert z["tags"]["error"] == "WRONGTYPE Operation against a key"
            else:
                assert "error" not in z["tags"]
            if side == "client":
                assert z["localEndpoint"]["port"] == int(ours["attributes"][names.ATTR_CLIENT_PORT])
                assert z["remoteEndpoint"]["port"] == int(
                    ours["attributes"][names.ATTR_SERVER_PORT]
                )

    # The spans outside the window were not sent.
    for outside in spans[-2:]:
        assert outside["span_id"] not in truth
        with pytest.raises(OSError):
            zipkin.get(f"/api/v2/trace/{outside['trace_id']}")

    assert zipkin.get("/api/v2/services") == [GATEWAY, UPSTREAM]
    assert zipkin.get("/api/v2/remoteServices", serviceName=GATEWAY) == [
        LOCAL,
        names.PROTOCOL_POSTGRESQL,
        names.PROTOCOL_REDIS,
    ]
    assert zipkin.get("/api/v2/spans", serviceName=UPSTREAM) == ["open", CHAT.lower()]
    links = zipkin.get("/api/v2/dependencies", endTs=TO_NS // MS, lookback=60_000)
    assert sorted(
        (d["parent"], d["child"], d["callCount"], d.get("errorCount", 0)) for d in links
    ) == [
        (GATEWAY, UPSTREAM, 2, 0),
        (GATEWAY, names.PROTOCOL_POSTGRESQL, 2, 0),
        (GATEWAY, names.PROTOCOL_REDIS, 2, 1),
    ]


# --- retries, on a stub that answers as told --------------------------------------------


class Stub:
    """An HTTP server on 127.0.0.1 that answers POSTs with the scripted (status, headers)
    first, then 202; keeps every body it was sent."""

    def __init__(self, script: list[tuple[int, dict[str, str]]]) -> None:
        self.script = list(script)
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                stub.bodies.append(body)
                stub.paths.append(f"{self.path} {self.headers['Content-Type']}")
                status, headers = stub.script.pop(0) if stub.script else (202, {})
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A short poll: shutdown() waits for the serving loop's next look (0.5 s by default).
        self.thread = threading.Thread(
            target=lambda: self.server.serve_forever(poll_interval=0.02), daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Stub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class Sleeps:
    """The export's sleep: records each wait and moves the manual clock instead of waiting."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(int(seconds * 1e9))


def one_request(store: DuckDBStore) -> list[dict[str, Any]]:
    spans, edges = request(1, 100)
    fill(store, spans, edges)
    return spans


def test_a_503_is_sent_again_after_its_retry_after(store: DuckDBStore) -> None:
    spans = one_request(store)
    clock = ManualClock(T0)
    sleeps = Sleeps(clock)
    with Stub([(503, {"Retry-After": "2"}), (429, {})]) as stub:
        result = export_window(store, FROM_NS, TO_NS, stub.url, clock=clock, sleep=sleeps)
    assert (result.spans, result.batches, result.retries) == (5, 1, 2)
    assert sleeps.waits == [2.0, 2.0]  # as asked; then the backoff's 2nd step (1 s doubled)
    assert len(stub.bodies) == 3 and len(set(stub.bodies)) == 1
    assert stub.paths == ["/api/v2/spans application/json"] * 3
    sent = json.loads(stub.bodies[-1])
    assert sorted(s["id"] for s in sent) == sorted(s["span_id"] for s in spans)
    assert result.summary().endswith("5 spans sent in 1 request, 2 retries")


def test_a_400_is_final_and_said_in_one_line(store: DuckDBStore) -> None:
    one_request(store)
    with Stub([(400, {})]) as stub, pytest.raises(ConfigError) as refused:
        export_window(store, FROM_NS, TO_NS, stub.url, sleep=lambda _s: None)
    assert len(stub.bodies) == 1
    message = str(refused.value)
    assert "\n" not in message and "HTTP 400" in message and "0 spans were sent" in message


def test_a_server_that_stays_away_gives_up_within_the_time_allowed(store: DuckDBStore) -> None:
    one_request(store)
    with Stub([]) as stub:
        url = stub.url  # closed when the block ends: nothing listens there any more
    clock = ManualClock(T0)
    sleeps = Sleeps(clock)
    with pytest.raises(TransientIO) as away:
        export_window(store, FROM_NS, TO_NS, url, clock=clock, sleep=sleeps, give_up_after_s=10)
    assert sleeps.waits == [1.0, 2.0, 4.0]  # the next, 8 s, would end past the 10 s allowed
    assert "gave up after 4 attempts" in str(away.value) and "\n" not in str(away.value)


def test_spans_zipkin_cannot_read_are_left_out_and_counted(store: DuckDBStore) -> None:
    spans, edges = request(1, 100)
    legacy = {**spans[1], "span_id": "legacy-1", "trace_id": "legacy-1"}
    fill(store, [*spans, legacy], edges)
    with Stub([]) as stub:
        result = export_window(store, FROM_NS, TO_NS, stub.url)
    assert (result.spans, result.skipped) == (5, 1)
    assert len(json.loads(stub.bodies[0])) == 5
    assert "1 left out (span legacy-1: ids are not Zipkin's hex ids)" in result.summary()


def test_an_empty_window_sends_nothing(store: DuckDBStore) -> None:
    with Stub([]) as stub:
        result = export_window(store, FROM_NS, TO_NS, stub.url)
    assert (result.spans, result.batches, stub.bodies) == (0, 0, [])


def test_the_endpoint_becomes_the_spans_url() -> None:
    assert spans_url("127.0.0.1") == "http://127.0.0.1:9411/api/v2/spans"
    assert spans_url("http://zipkin:9411/") == "http://zipkin:9411/api/v2/spans"
    assert spans_url("https://z.example/api/v2/spans") == "https://z.example/api/v2/spans"
    assert spans_url("https://z.example/zipkin") == "https://z.example/zipkin/api/v2/spans"
    assert spans_url("[::1]:19411") == "http://[::1]:19411/api/v2/spans"
    for bad in ("", "ftp://x", "http://x:99999"):
        with pytest.raises(ConfigError):
            spans_url(bad)


def test_which_answers_are_retried() -> None:
    backoff = otlp_retry.Backoff()
    assert retry_wait_s(429, None, 1, T0, backoff) == 1.0
    assert retry_wait_s(500, None, 3, T0, backoff) == 4.0
    assert retry_wait_s(503, "7", 1, T0, backoff) == 7.0
    for final in (400, 401, 404, 413):
        assert retry_wait_s(final, "7", 1, T0, backoff) is None


def test_the_harness_caches_the_jar(zipkin: ZipkinServer) -> None:
    from tests.harness.zipkin_server import lib_dir

    assert len(list(lib_dir().glob("zipkin-server-*-exec.jar"))) == 1
    assert (lib_dir() / ".pom").exists()
    assert zipkin.healthy()
