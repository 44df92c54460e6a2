"""The trace view's answers (zerotrace_query/trace_search.py) over the embedded store, through
the HTTP API: realistic spans and trace links go the real way (Avro on the in-process bus ->
Indexer -> DuckDB). Three gateway traces (an HTTP server span whose thread calls Redis,
PostgreSQL and an upstream LLM server; the upstream's own server span linked to the client
span by TCP sequence number) and an unrelated failing billing trace. GET /api/v1/traces/{id}
gives the whole trace in tree order with each span's parts, from any of its ids; the search
finds traces by any matching span, newest first, deduplicated, reading one trace per trace
found; bad parameters get 400 with one line, unknown ids 404. `gateway_trace`,
`billing_trace` and `fill_trace` serve the browser test too."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.unit.test_span_search import span_codec
from zerotrace import names
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.store import Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query import trace_search, trace_trees
from zerotrace_query.documents import span_document
from zerotrace_query.http_api import HttpApi
from zerotrace_query.indexer import Indexer
from zerotrace_query.trace_search import (
    TraceFilter,
    parse_duration,
    parse_trace_query,
    span_parts,
    trace_detail,
    trace_page,
    tree_order,
)

pytestmark = pytest.mark.unit
US = 1_000
MS = 1_000_000
S = 1_000_000_000
T0 = 1_700_000_000 * S
TOKEN = "traces-token-0123456789abcdef"


def _span(
    span_id: str,
    service: str,
    kind: str,
    name: str,
    start: int,
    end: int,
    attributes: dict[str, str],
    pid: int,
    status: str = "OK",
) -> dict[str, Any]:
    """A derived span record as the correlator writes it: its own trace id, no parent."""
    return {
        "span_id": span_id,
        "trace_id": span_id * 2,
        "parent_span_id": None,
        "node_id": "node-a",
        "pid": pid,
        "tid": pid,
        "process_name": "python3.11",
        "container_id": None,
        "service": service,
        "kind": kind,
        "name": name,
        "start_ns": start,
        "end_ns": end,
        "status": status,
        "attributes": attributes,
        "source_event_ids": [],
    }


def _edge(parent: dict[str, Any], child: dict[str, Any], rule: str) -> dict[str, Any]:
    return {
        "edge_id": f"{parent['span_id']}-{child['span_id']}-{rule}",
        "trace_id": parent["trace_id"],
        "parent_span_id": parent["span_id"],
        "child_span_id": child["span_id"],
        "rule": rule,
        "ts_ns": child["start_ns"],
    }


def gateway_trace(
    t0: int, n: int, pg_fails: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(spans, links) of one request through the gateway, starting at t0: the gateway's HTTP
    server span (48 ms); its thread's Redis GET, PostgreSQL SELECT and upstream HTTP client
    call (the first on a new connection: DNS, connect and TLS); the upstream server's span,
    linked to the client span by TCP sequence number, with the file I/O of its handler."""
    seq = str(1_000_000 + n)
    port = str(41_000 + n)
    gw = _span(
        f"a{n:03x}000000000001",
        "gateway",
        names.SPAN_KIND_HTTP_SERVER,
        "POST /v1/chat",
        t0,
        t0 + 48 * MS,
        {
            names.ATTR_HTTP_METHOD: "POST",
            names.ATTR_URL_PATH: "/v1/chat",
            names.ATTR_HTTP_STATUS: "200",
            names.ATTR_SERVER_ADDRESS: "10.0.0.2",
            names.ATTR_SERVER_PORT: "8000",
            names.ATTR_CLIENT_ADDRESS: "10.0.0.1",
            names.ATTR_CLIENT_PORT: port,
            names.ATTR_OBSERVATION_POINT: "server",
            names.ATTR_REQUEST_SEND_DURATION: str(120 * US),
            names.ATTR_SERVER_DURATION: str(47_500 * US),
            names.ATTR_RESPONSE_TRANSFER_DURATION: str(380 * US),
        },
        pid=2001,
    )
    redis = _span(
        f"a{n:03x}000000000002",
        "gateway",
        names.protocol_span_kind(names.PROTOCOL_REDIS, "client"),
        "GET",
        t0 + 1 * MS,
        t0 + 1 * MS + 310 * US,
        {
            names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_REDIS,
            names.ATTR_DB_OPERATION_NAME: "GET",
            names.ATTR_DB_QUERY_TEXT: "GET ?",
            names.ATTR_SERVER_ADDRESS: "127.0.0.1",
            names.ATTR_SERVER_PORT: "6379",
        },
        pid=2001,
    )
    pg = _span(
        f"a{n:03x}000000000003",
        "gateway",
        names.protocol_span_kind(names.PROTOCOL_POSTGRESQL, "client"),
        "SELECT orders",
        t0 + 2 * MS,
        t0 + 6 * MS,
        {
            names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_POSTGRESQL,
            names.ATTR_DB_OPERATION_NAME: "SELECT",
            names.ATTR_DB_COLLECTION_NAME: "orders",
            names.ATTR_DB_QUERY_TEXT: "SELECT * FROM orders WHERE id = $1",
            names.ATTR_SERVER_ADDRESS: "127.0.0.1",
            names.ATTR_SERVER_PORT: "5432",
            **({names.ATTR_ERROR_TYPE: "42P01"} if pg_fails else {}),
        },
        pid=2001,
        status="ERROR" if pg_fails else "OK",
    )
    upstream_attrs = {
        names.ATTR_HTTP_METHOD: "POST",
        names.ATTR_URL_PATH: "/v1/chat/completions",
        names.ATTR_HTTP_STATUS: "200",
        names.ATTR_SERVER_ADDRESS: "10.0.0.3",
        names.ATTR_SERVER_PORT: "8080",
        names.ATTR_CLIENT_ADDRESS: "10.0.0.2",
        names.ATTR_CLIENT_PORT: port,
        names.ATTR_GEN_AI_REQUEST_MODEL: "llama-3.1-8b",
        names.ATTR_TCP_REQUEST_SEQ: seq,
    }
    up = _span(
        f"a{n:03x}000000000004",
        "gateway",
        names.SPAN_KIND_HTTP_CLIENT,
        "POST /v1/chat/completions",
        t0 + 7 * MS,
        t0 + 46 * MS,
        {
            **upstream_attrs,
            names.ATTR_OBSERVATION_POINT: "client",
            names.ATTR_DNS_DURATION: str(1_200 * US),
            names.ATTR_DNS_RESOLVED_NAME: "llm.internal",
            names.ATTR_CONNECT_DURATION: str(300 * US),
            names.ATTR_TLS_HANDSHAKE_DURATION: str(2 * MS),
            names.ATTR_REQUEST_SEND_DURATION: str(90 * US),
            names.ATTR_SERVER_DURATION: str(37 * MS),
            names.ATTR_RESPONSE_TRANSFER_DURATION: str(1_910 * US),
        },
        pid=2001,
    )
    upsrv = _span(
        f"b{n:03x}000000000005",
        "llm-upstream",
        names.SPAN_KIND_HTTP_SERVER,
        "POST /v1/chat/completions",
        t0 + 7 * MS + 250 * US,
        t0 + 45 * MS + 800 * US,
        {
            **upstream_attrs,
            names.ATTR_OBSERVATION_POINT: "server",
            names.ATTR_REQUEST_SEND_DURATION: str(40 * US),
            names.ATTR_SERVER_DURATION: str(36_600 * US),
            names.ATTR_RESPONSE_TRANSFER_DURATION: str(1_910 * US),
            names.ATTR_FILE_READ_DURATION: str(3 * MS),
            names.ATTR_FILE_READ_BYTES: "8388608",
            names.ATTR_FILE_READ_CALLS: "2",
            names.ATTR_FILE_WRITE_DURATION: str(400 * US),
            names.ATTR_FILE_WRITE_BYTES: "65536",
            names.ATTR_FILE_WRITE_CALLS: "1",
            names.ATTR_FILE_PATHS: "/models/llama.gguf,/var/cache/kv/0001",
        },
        pid=3001,
    )
    spans = [gw, redis, pg, up, upsrv]
    edges = [
        _edge(gw, redis, names.TRACE_RULE_SAME_THREAD),
        _edge(gw, pg, names.TRACE_RULE_SAME_THREAD),
        _edge(gw, up, names.TRACE_RULE_SAME_THREAD),
        _edge(up, upsrv, names.TRACE_RULE_TCP_SEQ),
    ]
    return spans, edges


def billing_trace(t0: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An unrelated request that fails: billing's server span (20 ms, 500) and its MySQL call."""
    server = _span(
        "c000000000000001",
        "billing",
        names.SPAN_KIND_HTTP_SERVER,
        "GET /invoices",
        t0,
        t0 + 20 * MS,
        {
            names.ATTR_HTTP_METHOD: "GET",
            names.ATTR_URL_PATH: "/invoices",
            names.ATTR_HTTP_STATUS: "500",
            names.ATTR_ERROR_TYPE: "500",
        },
        pid=4001,
        status="ERROR",
    )
    mysql = _span(
        "c000000000000002",
        "billing",
        names.protocol_span_kind(names.PROTOCOL_MYSQL, "client"),
        "SELECT invoices",
        t0 + 3 * MS,
        t0 + 5 * MS,
        {names.ATTR_DB_SYSTEM_NAME: names.DB_SYSTEM_MYSQL, names.ATTR_MYSQL_SQLSTATE: "42S02"},
        pid=4001,
        status="ERROR",
    )
    return [server, mysql], [_edge(server, mysql, names.TRACE_RULE_SAME_THREAD)]


def topology(t0: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Gateway traces at t0, t0 + 1 s (its PostgreSQL call fails), t0 + 2 s; billing at
    t0 + 1.5 s."""
    spans: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for n, (start, fails) in enumerate([(t0, False), (t0 + S, True), (t0 + 2 * S, False)]):
        more, links = gateway_trace(start, n, pg_fails=fails)
        spans += more
        edges += links
    more, links = billing_trace(t0 + S + S // 2)
    return spans + more, edges + links


def fill_trace(
    store: Store,
    codec: AvroCodec,
    spans: Sequence[dict[str, Any]],
    edges: Sequence[dict[str, Any]],
) -> None:
    """Through the real path: span and trace-edge records on the in-process bus, the Indexer
    into the store."""
    broker = InMemoryBroker()
    broker.ensure_topics()
    producer = broker.producer()
    for span in spans:
        record = codec.encode(names.DERIVED_SPAN.record, span)
        producer.produce(names.DERIVED_SPAN.name, span["trace_id"].encode(), record)
    for edge in edges:
        record = codec.encode(names.DERIVED_TRACE.record, edge)
        producer.produce(names.DERIVED_TRACE.name, edge["child_span_id"].encode(), record)
    indexer = Indexer(broker.consumer("traces"), broker.producer(), store, codec, ManualClock(7))
    while indexer.run_once(0.05):
        pass
    assert (indexer.indexed, indexer.dead_letters) == (len(spans) + len(edges), 0)


SPANS, EDGES = topology(T0)
GW = [SPANS[i * 5 : i * 5 + 5] for i in range(3)]  # gw, redis, pg, up, upsrv
BILLING = SPANS[15:]


@pytest.fixture(scope="module")
def api() -> Iterator[tuple[DuckDBStore, str]]:
    store = DuckDBStore()
    fill_trace(store, span_codec(), SPANS, EDGES)
    http = HttpApi(store, port=0).start()
    try:
        yield store, http.url
    finally:
        http.stop()
        store.close()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.load(error)


def _expected_span(span: dict[str, Any], trace_id: str, parent: str | None, depth: int) -> Any:
    """The span as the store keeps it (its document), linked into the trace."""
    return {
        **span_document(span)[1],
        "trace_id": trace_id,
        "parent_span_id": parent,
        "duration_ns": span["end_ns"] - span["start_ns"],
        "depth": depth,
    }


def test_a_trace_is_the_whole_tree_with_each_spans_parts(api: tuple[DuckDBStore, str]) -> None:
    _, url = api
    gw, redis, pg, up, upsrv = GW[0]
    trace_id = gw["trace_id"]
    expected = {
        "trace_id": trace_id,
        "root": {
            "span_id": gw["span_id"],
            "service": "gateway",
            "name": "POST /v1/chat",
            "kind": "http.server",
        },
        "start_ns": T0,
        "end_ns": T0 + 48 * MS,
        "duration_ns": 48 * MS,
        "span_count": 5,
        "services": ["gateway", "llm-upstream"],
        "error": False,
        "cut": False,
        "spans": [
            {
                **_expected_span(gw, trace_id, None, 0),
                "parts": [
                    {"part": "send", "duration_ns": 120 * US, "offset_ns": 0},
                    {"part": "server", "duration_ns": 47_500 * US, "offset_ns": 120 * US},
                    {"part": "transfer", "duration_ns": 380 * US, "offset_ns": 47_620 * US},
                ],
            },
            {**_expected_span(redis, trace_id, gw["span_id"], 1), "parts": []},
            {**_expected_span(pg, trace_id, gw["span_id"], 1), "parts": []},
            {
                **_expected_span(up, trace_id, gw["span_id"], 1),
                "parts": [
                    {"part": "dns", "duration_ns": 1_200 * US, "offset_ns": -3_500 * US},
                    {"part": "connect", "duration_ns": 300 * US, "offset_ns": -2_300 * US},
                    {"part": "tls", "duration_ns": 2 * MS, "offset_ns": -2 * MS},
                    {"part": "send", "duration_ns": 90 * US, "offset_ns": 0},
                    {"part": "server", "duration_ns": 37 * MS, "offset_ns": 90 * US},
                    {"part": "transfer", "duration_ns": 1_910 * US, "offset_ns": 37_090 * US},
                ],
            },
            {
                **_expected_span(upsrv, trace_id, up["span_id"], 2),
                "parts": [
                    {"part": "send", "duration_ns": 40 * US, "offset_ns": 0},
                    {"part": "server", "duration_ns": 36_600 * US, "offset_ns": 40 * US},
                    {"part": "transfer", "duration_ns": 1_910 * US, "offset_ns": 36_640 * US},
                    {
                        "part": "file_read",
                        "duration_ns": 3 * MS,
                        "offset_ns": 40 * US,
                        "summed": True,
                    },
                    {
                        "part": "file_write",
                        "duration_ns": 400 * US,
                        "offset_ns": 3_040 * US,
                        "summed": True,
                    },
                ],
            },
        ],
    }
    for some_id in (trace_id, gw["span_id"], upsrv["span_id"], pg["span_id"]):
        status, body = get(f"{url}/api/v1/traces/{some_id}")
        assert status == 200, body
        assert body == expected, some_id
    assert trace_detail(api[0], trace_id) == expected


def test_unknown_and_bad_ids(api: tuple[DuckDBStore, str]) -> None:
    _, url = api
    assert get(f"{url}/api/v1/traces/{'f' * 32}") == (
        404,
        {"error": f"no trace or span has the id {'f' * 32}"},
    )
    status, body = get(f"{url}/api/v1/traces/a%20b")
    assert status == 400 and body == {"error": "'a b' is not a trace id or span id"}
    status, body = get(f"{url}/api/v1/traces/{GW[0][0]['span_id']}?limit=3")
    assert status == 400 and "no query parameters" in body["error"]


def _ids(page: dict[str, Any]) -> list[str]:
    return [t["trace_id"] for t in page["traces"]]


GW_IDS = [g[0]["trace_id"] for g in GW]
BILLING_ID = BILLING[0]["trace_id"]
SEARCHES: list[tuple[dict[str, str], list[str]]] = [
    ({}, [GW_IDS[2], BILLING_ID, GW_IDS[1], GW_IDS[0]]),
    ({"service": "llm-upstream"}, GW_IDS[::-1]),  # found by the upstream's own span
    ({"service": "gateway"}, GW_IDS[::-1]),
    ({"operation": "SELECT orders"}, GW_IDS[::-1]),
    ({"operation": "SELECT"}, []),  # the name, exactly
    ({"error": "true"}, [BILLING_ID, GW_IDS[1]]),
    ({"error": "false"}, GW_IDS[::-1]),  # billing has no span that did not fail
    ({"error": "true", "service": "gateway"}, [GW_IDS[1]]),
    ({"min_duration": "45ms"}, GW_IDS[::-1]),  # only the gateway's 48 ms server spans
    ({"min_duration": "10ms", "max_duration": "30ms"}, [BILLING_ID]),
    ({"max_duration": str(400 * US)}, GW_IDS[::-1]),  # the 310 µs Redis calls
    ({"from": str(T0 + S), "to": str(T0 + 2 * S)}, [BILLING_ID, GW_IDS[1]]),
    ({"from": str(T0 + 3 * S)}, []),
    ({"service": "nobody"}, []),
]


@pytest.mark.parametrize(("params", "expected"), SEARCHES)
def test_the_search_finds_traces_by_any_matching_span(
    api: tuple[DuckDBStore, str], params: dict[str, str], expected: list[str]
) -> None:
    store, url = api
    status, page = get(f"{url}/api/v1/traces?{urllib.parse.urlencode(params)}")
    assert status == 200, page
    assert _ids(page) == expected
    assert page["count"] == len(expected) and page["more"] is False
    assert page == json.loads(
        json.dumps(trace_page(store, parse_trace_query(urllib.parse.urlencode(params))))
    )


def test_a_listed_trace_says_what_it_holds(api: tuple[DuckDBStore, str]) -> None:
    _, url = api
    status, page = get(f"{url}/api/v1/traces?error=true")
    assert status == 200
    billing, gateway = page["traces"]
    assert billing == {
        "trace_id": BILLING_ID,
        "root": {
            "span_id": "c000000000000001",
            "service": "billing",
            "name": "GET /invoices",
            "kind": "http.server",
        },
        "start_ns": T0 + S + S // 2,
        "end_ns": T0 + S + S // 2 + 20 * MS,
        "duration_ns": 20 * MS,
        "span_count": 2,
        "services": ["billing"],
        "error": True,
        "cut": False,
    }
    assert gateway["trace_id"] == GW_IDS[1] and gateway["error"] is True
    assert (gateway["span_count"], gateway["services"]) == (5, ["gateway", "llm-upstream"])
    assert page["spans_matched"] == 3  # billing's two spans and the failed SELECT


def test_the_limit_keeps_the_newest_and_says_there_is_more(api: tuple[DuckDBStore, str]) -> None:
    _, url = api
    status, page = get(f"{url}/api/v1/traces?limit=2")
    assert status == 200
    assert _ids(page) == [GW_IDS[2], BILLING_ID] and page["more"] is True


def test_one_trace_read_per_trace_found(
    api: tuple[DuckDBStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway has four spans in each trace; each trace is read once, not four times."""
    store, _ = api
    reads: list[str] = []
    real = trace_trees.trace

    def counted(s: Store, some_id: str) -> list[dict[str, Any]]:
        reads.append(some_id)
        return real(s, some_id)

    monkeypatch.setattr(trace_search, "trace", counted)
    page = trace_page(store, TraceFilter(service="gateway"))
    assert page["spans_matched"] == 12 and page["count"] == 3 and len(reads) == 3
    reads.clear()
    page = trace_page(store, TraceFilter(service="gateway", limit=1))
    assert page["count"] == 1 and page["more"] is True and len(reads) == 1


BAD = [
    ("limit=0", "'limit' must be between 1 and 100"),
    ("limit=101", "'limit' must be between 1 and 100"),
    ("limit=ten", "query parameter 'limit' must be an integer"),
    ("error=maybe", "query parameter 'error' must be true or false"),
    ("min_duration=fast", "query parameter 'min_duration' must be a duration: ns, or 250ms, 1.5s"),
    ("min_duration=5ms&max_duration=5ms", "'max_duration' must be above 'min_duration'"),
    ("from=20&to=10", "'to' must be after 'from'"),
    ("from=-1", "'from' and 'to' must not be negative"),
    (
        "kind=http.server",
        "unknown query parameter 'kind'; known: error, from, limit, "
        "max_duration, min_duration, operation, service, to",
    ),
]


@pytest.mark.parametrize(("query", "message"), BAD)
def test_bad_parameters_get_one_line(
    api: tuple[DuckDBStore, str], query: str, message: str
) -> None:
    _, url = api
    assert get(f"{url}/api/v1/traces?{query}") == (400, {"error": message})


def test_the_traces_need_the_token() -> None:
    store = DuckDBStore()
    http = HttpApi(store, port=0, token=TOKEN).start()
    try:
        fill_trace(store, span_codec(), *billing_trace(T0))
        assert get(f"{http.url}/api/v1/traces")[0] == 401
        assert get(f"{http.url}/api/v1/traces/c000000000000001")[0] == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        status, body = get(f"{http.url}/api/v1/traces/c000000000000001", auth)
        assert status == 200 and body["span_count"] == 2
    finally:
        http.stop()
        store.close()


def test_durations_take_units() -> None:
    assert parse_duration("d", "") == 0
    assert parse_duration("d", "1500") == 1500
    assert parse_duration("d", "250ms") == 250 * MS
    assert parse_duration("d", "1.5s") == 3 * S // 2
    assert parse_duration("d", "20us") == parse_duration("d", "20µs") == 20 * US
    for bad in ("-5ms", "5 minutes", "ms", "1e3"):
        with pytest.raises(ValueError, match="'d' must be a duration"):
            parse_duration("d", bad)


def test_parts_skip_missing_zero_and_malformed_values() -> None:
    assert span_parts({}) == []
    assert span_parts(
        {
            names.ATTR_CONNECT_DURATION: "0",
            names.ATTR_TLS_HANDSHAKE_DURATION: "fast",
            names.ATTR_SERVER_DURATION: "-4",
            names.ATTR_REQUEST_SEND_DURATION: "7",
            names.ATTR_FILE_WRITE_DURATION: "5",
        }
    ) == [
        {"part": "send", "duration_ns": 7, "offset_ns": 0},
        {"part": "file_write", "duration_ns": 5, "offset_ns": 0, "summed": True},
    ]


def test_tree_order_handles_a_chain_deeper_than_the_stack() -> None:
    chain: list[dict[str, Any]] = [
        {"span_id": f"s{i:05d}", "parent_span_id": f"s{i - 1:05d}" if i else None, "start_ns": i}
        for i in range(3000)
    ]
    order = tree_order(list(reversed(chain)))
    assert [d for d, _ in order] == list(range(3000))
    assert [s["span_id"] for _, s in order] == [s["span_id"] for s in chain]


def test_siblings_come_by_start_and_orphans_are_roots() -> None:
    spans: list[dict[str, Any]] = [
        {"span_id": "r", "parent_span_id": None, "start_ns": 0},
        {"span_id": "b", "parent_span_id": "r", "start_ns": 5},
        {"span_id": "a", "parent_span_id": "r", "start_ns": 2},
        {"span_id": "a1", "parent_span_id": "a", "start_ns": 3},
        {"span_id": "o", "parent_span_id": "gone", "start_ns": 1},
    ]
    assert [(d, s["span_id"]) for d, s in tree_order(spans)] == [
        (0, "r"),
        (1, "a"),
        (2, "a1"),
        (1, "b"),
        (0, "o"),
    ]
