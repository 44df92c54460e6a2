"""The spans view on the real OpenSearch node: the same span records of several protocols go
through the Indexer into OpenSearch and DuckDB, and every protocol, service, status and
duration filter gives the same page and the same per-protocol histograms on both, equal to the
filter spelled out over the records (so the node applies the filters in its query, prefix
query included)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from opensearchpy import OpenSearch

from tests.unit.test_span_search import (
    expected_histograms,
    fill_spans,
    matching,
    protocol_spans,
    span_codec,
)
from zerotrace import names
from zerotrace.store import Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace.store_opensearch import OpenSearchStore
from zerotrace_query.span_search import MAX_LIMIT, SpanFilter, span_histograms, span_page

pytestmark = pytest.mark.integration
PREFIX = f"zerotrace-spans{uuid.uuid4().hex[:8]}-"
END = 1_700_001_200 * 1_000_000_000
MS = 1_000_000
SPANS = protocol_spans(END, 331, seed=21)


@pytest.fixture(scope="module")
def stores(opensearch_url: str) -> Iterator[tuple[Store, Store]]:
    codec = span_codec()
    duck = DuckDBStore()
    search = OpenSearchStore(opensearch_url, prefix=PREFIX)
    client = OpenSearch(hosts=[opensearch_url], max_retries=0, timeout=30)
    try:
        fill_spans(duck, codec, SPANS)
        fill_spans(search, codec, SPANS)  # the Indexer refreshes after its bulk writes
        yield duck, search
    finally:
        duck.close()
        search.close()
        client.indices.delete(index=PREFIX + "*", params={"expand_wildcards": "all"})
        templates = client.indices.get_index_template(name=PREFIX + "*", ignore=404)
        for template in templates.get("index_templates", []):
            client.indices.delete_index_template(name=template["name"])
        client.close()


FILTERS = [
    SpanFilter(),
    SpanFilter(protocol=names.PROTOCOL_REDIS),
    SpanFilter(protocol="http"),  # a prefix "http." never catches http2.*
    SpanFilter(protocol=names.PROTOCOL_GRPC, status="ERROR"),
    SpanFilter(service="api", status="OK", min_duration_ns=MS),
    SpanFilter(min_duration_ns=2 * MS, max_duration_ns=20 * MS),
    SpanFilter(max_duration_ns=300_000, protocol=names.PROTOCOL_DNS),
    SpanFilter(kind="redis.server", min_duration_ns=10_000),
    SpanFilter(start_ns_from=END - 120 * 10**9, status="ERROR"),
]


@pytest.mark.parametrize("flt", FILTERS)
def test_same_answers_on_both_stores(stores: tuple[Store, Store], flt: SpanFilter) -> None:
    duck, search = stores
    flt = flt.check()
    expected = matching(SPANS, flt)
    for limit in (MAX_LIMIT, 5):
        page = span_page(search, replace(flt, limit=limit))
        assert page == span_page(duck, replace(flt, limit=limit))
        assert [s["span_id"] for s in page["spans"]] == [s["span_id"] for s in expected[:limit]]
        assert page["total"] == len(expected)
    histograms = span_histograms(search, flt)
    assert histograms == span_histograms(duck, flt)
    assert histograms == expected_histograms(SPANS, flt)


def test_the_answers_are_not_trivial(stores: tuple[Store, Store]) -> None:
    _, search = stores
    protocols = {p["protocol"]: p for p in span_histograms(search, SpanFilter())["protocols"]}
    assert len(protocols) == 7 and sum(p["count"] for p in protocols.values()) == 331
    assert protocols["http"]["count"] + protocols["http2"]["count"] == len(
        [s for s in SPANS if s["kind"].startswith("http")]
    )
    errors = span_page(search, SpanFilter(status="ERROR", limit=MAX_LIMIT))
    assert 0 < errors["total"] < 331
    assert {s["status"] for s in errors["spans"]} == {"ERROR"}
    slow = span_page(search, SpanFilter(min_duration_ns=20 * MS, limit=MAX_LIMIT))
    assert slow["total"] > 0 and all(s["duration_ns"] >= 20 * MS for s in slow["spans"])
