"""Which server answered a client group, from the exchange links (zerotrace_query/
service_links.py), on DuckDB: the linked server groups of the realistic topology, a link
taken back not followed, the most frequent answer winning, and the cost: no look-up at all
without exchange links, and at most the stated searches per group with them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.unit.service_map_data import RANGE_NS, T0, index_topology, topology
from tests.unit.test_span_search import span_codec
from zerotrace import names
from zerotrace.store import Query, Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import INDEX_SPECS, SPANS, TRACE_EDGES, span_document
from zerotrace_query.service_groups import CLIENT, SERVER, SpanGroup, read_groups
from zerotrace_query.service_links import (
    LINK_SAMPLE,
    NO_LINKS,
    has_exchange_links,
    learn_links,
)
from zerotrace_query.service_map import BOUNDS_NS

pytestmark = pytest.mark.unit

GATEWAY_TO_LLM = SpanGroup("node-a", "gateway", "http", CLIENT, "10.0.0.7", 8080)
GATEWAY_TO_VIP = SpanGroup("node-a", "gateway", "http", CLIENT, "10.96.0.10", 80)
LLM_SERVER = SpanGroup("node-b", "llama_cpp.server", "http", SERVER, "10.0.0.7", 8080)
INVENTORY_SERVER = SpanGroup("node-c", "inventory", "http", SERVER, "10.244.1.5", 8081)


class CountingStore:
    """The store, with its searches and counts counted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.searches = 0
        self.counts = 0

    def search(self, index: str, query: Query) -> list[dict[str, Any]]:
        self.searches += 1
        return self.store.search(index, query)

    def count(self, index: str, query: Query) -> int:
        self.counts += 1
        return self.store.count(index, query)

    def histogram(self, *args: Any, **kwargs: Any) -> Any:
        return self.store.histogram(*args, **kwargs)


def store_with(spans: Sequence[dict[str, Any]], edges: Sequence[dict[str, Any]]) -> DuckDBStore:
    store = DuckDBStore()
    for spec in INDEX_SPECS:
        store.ensure_index(spec)
    index_topology(store, span_codec(), spans, edges)
    return store


def test_the_topologys_links() -> None:
    store = store_with(*topology())
    try:
        groups = read_groups(store, T0, T0 + RANGE_NS, BOUNDS_NS)
        counting = CountingStore(store)
        links = learn_links(counting, groups, T0, T0 + RANGE_NS)  # type: ignore[arg-type]
    finally:
        store.close()
    assert dict(links.server_of) == {GATEWAY_TO_LLM: LLM_SERVER, GATEWAY_TO_VIP: INVENTORY_SERVER}
    assert links.linked_servers == {LLM_SERVER, INVENTORY_SERVER}
    # Per group: one search for its latest spans, then per span its links and the linked span.
    with_address = [g for g in groups if g.address is not None]
    assert counting.counts == 1  # tcp_seq links exist: same_connection is not asked
    assert counting.searches <= len(with_address) * (1 + 2 * LINK_SAMPLE)


def test_no_exchange_links_no_lookups() -> None:
    spans, edges = topology()
    same_thread = [e for e in edges if e["rule"] == names.TRACE_RULE_SAME_THREAD]
    store = store_with(spans, same_thread)
    try:
        groups = read_groups(store, T0, T0 + RANGE_NS, BOUNDS_NS)
        counting = CountingStore(store)
        links = learn_links(counting, groups, T0, T0 + RANGE_NS)  # type: ignore[arg-type]
        assert has_exchange_links(store, None, None) is False
    finally:
        store.close()
    assert links == NO_LINKS
    assert (counting.counts, counting.searches) == (2, 0)


def test_without_the_trace_edges_index() -> None:
    store = DuckDBStore()
    try:
        store.ensure_index(SPANS)
        assert has_exchange_links(store, 0, 10) is False
        assert learn_links(store, {}, 0, 10) == NO_LINKS
    finally:
        store.close()


def _span(span_id: str, kind: str, node: str, service: str, address: str, start: int) -> Any:
    return {
        "span_id": span_id,
        "trace_id": span_id.rjust(32, "0"),
        "parent_span_id": None,
        "node_id": node,
        "pid": 1,
        "tid": 1,
        "process_name": service,
        "container_id": None,
        "service": service,
        "kind": kind,
        "name": "POST /v1/chat/completions",
        "start_ns": start,
        "end_ns": start + 1000,
        "status": "OK",
        "attributes": {names.ATTR_SERVER_ADDRESS: address, names.ATTR_SERVER_PORT: "80"},
        "source_event_ids": [],
    }


def _edge(parent: str, child: str, rule: str, ts: int) -> dict[str, Any]:
    return {
        "edge_id": f"{rule}-{child}",
        "trace_id": parent.rjust(32, "0"),
        "parent_span_id": parent,
        "child_span_id": child,
        "rule": rule,
        "ts_ns": ts,
    }


def links_of(backends: str, retracted: frozenset[int] = frozenset()) -> Any:
    """Calls from one gateway to a virtual IP, the i-th answered by backends[i] (one address
    each), in time order; the links of the calls in `retracted` taken back (parent "")."""
    spans, edges = [], []
    for i, backend in enumerate(backends):
        client, server = f"c{i:015x}", f"5{i:015x}"
        address = f"10.0.0.{ord(backend)}"
        spans.append(_span(client, "http.client", "node-1", "gw", "10.96.0.1", 100 + i))
        spans.append(_span(server, "http.server", f"node-{backend}", "api", address, 101 + i))
        edges.append(_edge(client, server, names.TRACE_RULE_TCP_SEQ, 101 + i))
        if i in retracted:  # assembly takes a link back by writing it again with no parent
            edges[-1]["parent_span_id"] = ""
    store = DuckDBStore()
    try:
        for spec in INDEX_SPECS:
            store.ensure_index(spec)
        assert store.bulk_upsert(SPANS.name, [span_document(s) for s in spans]).ok
        assert store.bulk_upsert(TRACE_EDGES.name, [(e["edge_id"], e) for e in edges]).ok
        return learn_links(store, read_groups(store, 0, 1000, BOUNDS_NS), 0, 1000)
    finally:
        store.close()


CLIENT_GROUP = SpanGroup("node-1", "gw", "http", CLIENT, "10.96.0.1", 80)


def backend(name: str) -> SpanGroup:
    return SpanGroup(f"node-{name}", "api", "http", SERVER, f"10.0.0.{ord(name)}", 80)


def test_the_most_frequent_answer_of_the_latest_spans_wins() -> None:
    """A virtual IP in front of two backends: of the 3 latest calls, 2 reached b (a sorts
    first, so a tie would have gone to a; a's older calls are not asked)."""
    links = links_of("aaaabbab")
    assert links.server_of[CLIENT_GROUP] == backend("b")
    assert links_of("bbbabaa").server_of[CLIENT_GROUP] == backend("a")


def test_a_link_taken_back_is_not_followed() -> None:
    """The newest call's link was taken back: the two before it (b) answer; backend c, whose
    only link was taken back, has no observed client."""
    links = links_of("aabbc", retracted=frozenset({4}))
    assert links.server_of[CLIENT_GROUP] == backend("b")
    assert links.linked_servers == {backend("a"), backend("b")}
