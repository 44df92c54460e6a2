"""The service map (zerotrace_query/service_map.py) on DuckDB, from a realistic topology
(tests/unit/service_map_data.py) indexed the real way: every edge's requests, errors, rate and
p50/p95/p99 exact against the topology and against percentiles worked out by hand; an LLM call
seen at both ends counted once; loopback addresses kept to their node; links found through a
virtual IP; server spans with no observed client as "(unobserved clients)"; and the HTTP
route GET /api/v1/services/map."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.unit.service_map_data import (
    EXPECTED,
    INVENTORY,
    LLM,
    RANGE_NS,
    STEP_NS,
    T0,
    Calls,
    S,
    in_window,
    index_topology,
    topology,
)
from tests.unit.test_span_search import span_codec
from zerotrace import names
from zerotrace.store import Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import INDEX_SPECS, SPANS, TRACE_EDGES
from zerotrace_query.http_api import HttpApi
from zerotrace_query.service_groups import CLIENT, SERVER, Counts, SpanGroup
from zerotrace_query.service_links import Links
from zerotrace_query.service_map import (
    BY_ADDRESS,
    BY_LINK,
    BY_PEER,
    DEFAULT_RANGE_NS,
    MAX_WINDOWS,
    UNOBSERVED,
    by_address,
    default_step,
    host,
    is_loopback,
    listeners,
    parse_map_query,
    peer_name,
    resolve,
    service_map,
    windows,
)

pytestmark = pytest.mark.unit


def filled(with_links: bool = True, with_edge_index: bool = True) -> DuckDBStore:
    spans, edges = topology()
    if not with_links:
        edges = [e for e in edges if e["rule"] != names.TRACE_RULE_TCP_SEQ]
    store = DuckDBStore()
    for spec in INDEX_SPECS:
        if with_edge_index or spec is not TRACE_EDGES:
            store.ensure_index(spec)
    if with_edge_index:
        index_topology(store, span_codec(), spans, edges)
    else:
        index_topology(store, span_codec(), spans, [])
    return store


@pytest.fixture(scope="module")
def store() -> Iterator[DuckDBStore]:
    db = filled()
    yield db
    db.close()


@pytest.fixture(scope="module")
def answer(store: DuckDBStore) -> dict[str, Any]:
    return service_map(store, T0, T0 + RANGE_NS, STEP_NS)


def edge_of(body: dict[str, Any], client: str, server: str, protocol: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        e
        for e in body["edges"]
        if (e["client"], e["server"], e["protocol"]) == (client, server, protocol)
    ]
    assert len(found) == 1, (client, server, protocol, [e["client"] for e in body["edges"]])
    return found[0]


def node_of(body: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in body["nodes"] if n["id"] == name)


def test_every_edge_and_no_other(answer: dict[str, Any]) -> None:
    keys = {(e["client"], e["server"], e["protocol"]) for e in answer["edges"]}
    assert keys == {(x.client, x.server, x.protocol) for x in EXPECTED}
    for x in EXPECTED:
        edge = edge_of(answer, x.client, x.server, x.protocol)
        total = edge["total"]
        count = len(x.calls.durations_ns)
        assert (total["count"], total["errors"]) == (count, len(x.calls.errors)), x
        assert total["rate"] == count / 60
        assert total["error_rate"] == len(x.calls.errors) / count
        assert edge["resolved_by"] == list(x.resolved_by), x
        assert (edge["view"], edge["connection_type"]) == (x.view, x.connection_type), x
        if x.percentiles is not None:
            assert (total["p50_ns"], total["p95_ns"], total["p99_ns"]) == x.percentiles, x


def test_every_percentile_lies_in_the_bucket_of_the_true_one(answer: dict[str, Any]) -> None:
    bounds = answer["bounds_ns"]
    for x in EXPECTED:
        total = edge_of(answer, x.client, x.server, x.protocol)["total"]
        ordered = sorted(x.calls.durations_ns)
        for q in (50, 95, 99):
            true = ordered[max(0, -(-q * len(ordered) // 100) - 1)]
            top = next(b for b in bounds if true <= b)
            low = max([0, *(b for b in bounds if b < top)])
            assert low <= total[f"p{q}_ns"] <= top, (x.client, x.server, q)


def test_windows_series(answer: dict[str, Any]) -> None:
    assert answer["windows"] == [T0, T0 + 20 * S, T0 + 40 * S]
    assert (answer["from_ns"], answer["to_ns"], answer["step_ns"]) == (T0, T0 + RANGE_NS, STEP_NS)
    for x in EXPECTED:
        edge = edge_of(answer, x.client, x.server, x.protocol)
        assert [w["start_ns"] for w in edge["series"]] == answer["windows"]
        for window in edge["series"]:
            start = window["start_ns"]
            inside = list(in_window(x.calls, start, start + STEP_NS))
            errors = sum(1 for i in inside if i in x.calls.errors)
            assert (window["count"], window["errors"]) == (len(inside), errors), (x, start)
            assert window["rate"] == len(inside) / 20
        assert sum(w["count"] for w in edge["series"]) == edge["total"]["count"]


def test_a_call_seen_at_both_ends_counts_once(answer: dict[str, Any]) -> None:
    """The LLM server's 40 requests are 40 on the map, not 80, from the gateway's view; its own
    server spans stay available as `served` (the server's view)."""
    into = [e for e in answer["edges"] if e["server"] == "llama_cpp.server"]
    assert [(e["client"], e["total"]["count"]) for e in into] == [("gateway", 40)]
    llm = node_of(answer, "llama_cpp.server")
    assert (llm["calls_in"]["count"], llm["served"]["count"]) == (40, 40)
    # The server's view fails on its own 5xx only (the data: every other failed call).
    server_errors = sum(1 for i in LLM.errors if i % 2 == 0)
    assert (llm["calls_in"]["errors"], llm["served"]["errors"]) == (2, server_errors)
    postgres = node_of(answer, "postgres")
    assert (postgres["calls_in"]["count"], postgres["served"]["count"]) == (50, 50)
    assert not any(e["client"] == UNOBSERVED and e["server"] != "gateway" for e in answer["edges"])


def test_nodes(answer: dict[str, Any]) -> None:
    kinds = {n["id"]: n["type"] for n in answer["nodes"]}
    assert kinds == {
        UNOBSERVED: "unobserved",
        "dns 127.0.0.53:53": "peer",
        "gateway": "service",
        "inventory": "service",
        "llama_cpp.server": "service",
        "loadgen": "service",
        "postgres": "service",
        "redis 127.0.0.1:6379": "peer",
        "redis-server": "service",
        "worker": "service",
    }
    gateway = node_of(answer, "gateway")
    assert gateway["protocols"] == ["dns", "http", "postgresql", "redis"]
    # Called 60 times by the load generator and 30 times by clients zerotrace does not see;
    # its own server spans count all 90; it made 200 + 50 + 40 + 30 + 12 calls.
    assert (gateway["calls_in"]["count"], gateway["served"]["count"]) == (90, 90)
    assert gateway["calls_out"]["count"] == 332
    assert gateway["calls_in"]["errors"] == 9
    assert node_of(answer, "loadgen")["served"] is None


def test_a_loopback_address_stays_on_its_node(answer: dict[str, Any]) -> None:
    """node-a's gateway and node-b's worker both call 127.0.0.1:6379: two different Redis."""
    assert edge_of(answer, "worker", "redis-server", "redis")["resolved_by"] == [BY_ADDRESS]
    assert edge_of(answer, "gateway", "redis 127.0.0.1:6379", "redis")["resolved_by"] == [BY_PEER]


def test_links_join_through_a_virtual_ip(answer: dict[str, Any]) -> None:
    """The gateway calls 10.96.0.10:80; the inventory pod answers on 10.244.1.5:8081."""
    edge = edge_of(answer, "gateway", "inventory", "http")
    assert (edge["resolved_by"], edge["total"]["count"]) == ([BY_LINK], 30)


def test_without_links_addresses_answer() -> None:
    """No tcp_seq links: the LLM server is still found by its address (seen in each window),
    but the virtual IP is only a peer, and the inventory's own spans come from clients it
    cannot tell (so the same 30 requests show twice: what links are for)."""
    store = filled(with_links=False)
    try:
        body = service_map(store, T0, T0 + RANGE_NS, STEP_NS)
    finally:
        store.close()
    assert edge_of(body, "gateway", "llama_cpp.server", "http")["resolved_by"] == [BY_ADDRESS]
    assert edge_of(body, "gateway", "http 10.96.0.10:80", "http")["total"]["count"] == 30
    unseen = edge_of(body, UNOBSERVED, "inventory", "http")
    assert (unseen["total"]["count"], unseen["view"]) == (30, "server")


def test_a_store_without_the_trace_edges_index() -> None:
    store = filled(with_edge_index=False)
    try:
        body = service_map(store, T0, T0 + RANGE_NS, STEP_NS)
    finally:
        store.close()
    assert edge_of(body, "gateway", "llama_cpp.server", "http")["total"]["count"] == 40


def test_a_range_with_nothing() -> None:
    store = DuckDBStore()
    try:
        for spec in INDEX_SPECS:
            store.ensure_index(spec)
        body = service_map(store, T0, T0 + 10 * S, 5 * S)
    finally:
        store.close()
    assert (body["nodes"], body["edges"], body["windows"]) == ([], [], [T0, T0 + 5 * S])


# --- resolution rules, on their own ----------------------------------------------------------


def group(
    node: str, service: str, side: str, address: str | None, port: int | None, protocol: str = ""
) -> SpanGroup:
    return SpanGroup(node, service, protocol or "http", side, address, port)


def counts(n: int) -> Counts:
    return Counts((n,), n, 0, float(n))


def test_a_link_beats_an_address() -> None:
    client = group("node-a", "gateway", CLIENT, "10.0.0.7", 8080)
    listening = group("node-b", "old-server", SERVER, "10.0.0.7", 8080)
    linked = group("node-c", "new-server", SERVER, "10.0.0.9", 8080)
    listen = listeners({listening: counts(5)})
    assert resolve(client, Links({}, frozenset()), listen) == (listening, BY_ADDRESS)
    assert resolve(client, Links({client: linked}, frozenset({linked})), listen) == (
        linked,
        BY_LINK,
    )
    # The window's listeners first, then the range's.
    later = group("node-b", "later", SERVER, "10.0.0.7", 8080)
    assert resolve(client, Links({}, frozenset()), {}, listeners({later: counts(1)})) == (
        later,
        BY_ADDRESS,
    )
    assert resolve(client, Links({}, frozenset()), {}) == (None, BY_PEER)


def test_by_address_prefers_the_clients_node_then_the_busiest() -> None:
    client = group("node-a", "gateway", CLIENT, "10.0.0.7", 8080)
    far_busy = group("node-b", "busy", SERVER, "10.0.0.7", 8080)
    far_quiet = group("node-c", "quiet", SERVER, "10.0.0.7", 8080)
    near = group("node-a", "near", SERVER, "10.0.0.7", 8080)
    other_protocol = group("node-a", "grpc-one", SERVER, "10.0.0.7", 8080, names.PROTOCOL_GRPC)
    both = {far_busy: counts(9), far_quiet: counts(2), other_protocol: counts(50)}
    assert by_address(client, listeners(both)) == far_busy
    assert by_address(client, listeners({**both, near: counts(1)})) == near
    assert by_address(group("node-a", "g", CLIENT, None, None), listeners(both)) is None


def test_loopback_and_mapped_addresses() -> None:
    client = group("node-a", "gateway", CLIENT, "127.0.0.1", 6379, names.PROTOCOL_REDIS)
    elsewhere = group("node-b", "redis", SERVER, "127.0.0.1", 6379, names.PROTOCOL_REDIS)
    here = group("node-a", "redis", SERVER, "::ffff:127.0.0.1", 6379, names.PROTOCOL_REDIS)
    assert by_address(client, listeners({elsewhere: counts(3)})) is None
    assert by_address(client, listeners({elsewhere: counts(3), here: counts(1)})) == here
    assert (host("::FFFF:10.0.0.7"), host("::ffff:abcd"), host(" 10.0.0.7 ")) == (
        "10.0.0.7",
        "::ffff:abcd",
        "10.0.0.7",
    )
    assert [is_loopback(a) for a in ("127.0.0.53", "::1", "::ffff:127.0.0.1", "10.0.0.1")] == [
        True,
        True,
        True,
        False,
    ]


def test_peer_names() -> None:
    assert peer_name(group("n", "s", CLIENT, "127.0.0.1", 6379, "redis")) == "redis 127.0.0.1:6379"
    assert peer_name(group("n", "s", CLIENT, "fd00::5", 5432, "postgresql")) == (
        "postgresql [fd00::5]:5432"
    )
    assert peer_name(group("n", "s", CLIENT, None, None, "dns")) == "dns (unknown address)"


# --- windows and the query -------------------------------------------------------------------


def test_windows() -> None:
    assert windows(0, 50, 20_000_000) == [(0, 50)]
    assert windows(0, 50 * S, 20 * S) == [(0, 20 * S), (20 * S, 40 * S), (40 * S, 50 * S)]
    with pytest.raises(ValueError, match="after 'from'"):
        windows(10, 10, S)
    with pytest.raises(ValueError, match="at least"):
        windows(0, S, 999_999)
    with pytest.raises(ValueError, match=f"at most {MAX_WINDOWS}"):
        windows(0, (MAX_WINDOWS + 1) * S, S)
    assert default_step(0, 15 * 60 * S) == 30 * S
    assert default_step(0, 61 * S) == 3 * S  # whole seconds: 30 windows of 3 s hold 61 s
    assert default_step(0, 3 * S) == 100_000_000


def test_parse_map_query() -> None:
    now = 1_800_000_000 * S
    assert parse_map_query("", now) == (now - DEFAULT_RANGE_NS, now, 0)
    assert parse_map_query(f"from={T0}&to={T0 + S}&step=5", now) == (T0, T0 + S, 5)
    for bad, why in (("step=x", "'step' must be an integer"), ("limit=3", "unknown query")):
        with pytest.raises(ValueError, match=why):
            parse_map_query(bad, now)


def get(base: str, path: str) -> tuple[int, Any]:
    url = urlparse(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_the_http_route(store: DuckDBStore, answer: dict[str, Any]) -> None:
    api = HttpApi(store, port=0).start()
    try:
        query = f"from={T0}&to={T0 + RANGE_NS}&step={STEP_NS}"
        assert get(api.url, f"/api/v1/services/map?{query}") == (200, answer)
        status, body = get(api.url, f"/api/v1/services/map?from={T0}&to={T0}")
        assert (status, body) == (400, {"error": "'to' must be after 'from'"})
        status, body = get(api.url, f"/api/v1/services/map?from={T0}&to={T0 + RANGE_NS}&step=1")
        assert status == 400 and "'step' must be at least" in body["error"]
        status, body = get(api.url, "/api/v1/services/map")  # the last 15 minutes: nothing
        assert status == 200 and body["edges"] == [] and len(body["windows"]) == 30
    finally:
        api.stop()


def test_the_http_route_without_a_spans_index() -> None:
    empty: Store = DuckDBStore()
    api = HttpApi(empty, port=0).start()
    try:
        status, body = get(api.url, f"/api/v1/services/map?from={T0}&to={T0 + RANGE_NS}")
    finally:
        api.stop()
        empty.close()
    assert status == 503 and SPANS.name in body["error"]


def test_the_topology_is_what_the_tests_think(store: DuckDBStore) -> None:
    """Guards the data: the linked calls have their links, the rest none."""
    spans, edges = topology()
    exchange = [e for e in edges if e["rule"] == names.TRACE_RULE_TCP_SEQ]
    assert len(exchange) == len(LLM.durations_ns) + len(INVENTORY.durations_ns)
    linked_calls: list[Calls] = [LLM, INVENTORY]
    assert all(c.linked for c in linked_calls)
    assert len({s["span_id"] for s in spans}) == len(spans)
