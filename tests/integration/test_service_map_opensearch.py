"""The service map on the real OpenSearch node: the realistic topology (tests/unit/
service_map_data.py: a gateway calling Redis, PostgreSQL, an upstream LLM server seen at both
ends, a threaded service behind a virtual IP) goes through the Indexer into OpenSearch and into
DuckDB; the map (counted by OpenSearch aggregations, links looked up by term queries) is the
same answer as DuckDB's, with the counts and percentiles worked out by hand, and the RED
metrics the same text."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from opensearchpy import OpenSearch

from tests.unit.service_map_data import EXPECTED, RANGE_NS, STEP_NS, T0, index_topology, topology
from tests.unit.test_service_map import edge_of, get
from zerotrace.codec import AvroCodec
from zerotrace.store_duckdb import DuckDBStore
from zerotrace.store_opensearch import OpenSearchStore
from zerotrace_query.documents import INDEX_SPECS
from zerotrace_query.http_api import HttpApi
from zerotrace_query.service_map import service_map
from zerotrace_query.service_map_metrics import exposition

pytestmark = pytest.mark.integration
PREFIX = f"zerotrace-smap{uuid.uuid4().hex[:8]}-"


@pytest.fixture(scope="module")
def stores(opensearch_url: str) -> Iterator[tuple[OpenSearchStore, DuckDBStore]]:
    from zerotrace.schema_registry import InMemorySchemaRegistry
    from zerotrace.schemas import load_schema_dir

    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    spans, edges = topology()
    search = OpenSearchStore(opensearch_url, prefix=PREFIX)
    duck = DuckDBStore()
    client = OpenSearch(hosts=[opensearch_url], max_retries=0, timeout=30)
    try:
        for store in (search, duck):
            for spec in INDEX_SPECS:
                store.ensure_index(spec)
            index_topology(store, codec, spans, edges)
        for spec in INDEX_SPECS:
            search.refresh(spec.name)
        yield search, duck
    finally:
        search.close()
        duck.close()
        client.indices.delete(index=PREFIX + "*", params={"expand_wildcards": "all"})
        templates = client.indices.get_index_template(name=PREFIX + "*", ignore=404)
        for template in templates.get("index_templates", []):
            client.indices.delete_index_template(name=template["name"])
        client.close()


def test_the_same_map_as_on_duckdb(stores: tuple[OpenSearchStore, DuckDBStore]) -> None:
    search, duck = stores
    on_opensearch = service_map(search, T0, T0 + RANGE_NS, STEP_NS)
    assert on_opensearch == service_map(duck, T0, T0 + RANGE_NS, STEP_NS)
    for x in EXPECTED:
        edge = edge_of(on_opensearch, x.client, x.server, x.protocol)
        total = edge["total"]
        assert (total["count"], total["errors"]) == (len(x.calls.durations_ns), len(x.calls.errors))
        assert edge["resolved_by"] == list(x.resolved_by)
        if x.percentiles is not None:
            assert (total["p50_ns"], total["p95_ns"], total["p99_ns"]) == x.percentiles
    llm = [e for e in on_opensearch["edges"] if e["server"] == "llama_cpp.server"]
    assert [e["total"]["count"] for e in llm] == [40]  # seen at both ends, counted once


def test_the_same_red_metrics(stores: tuple[OpenSearchStore, DuckDBStore]) -> None:
    search, duck = stores
    text = exposition(search)
    assert 'traces_service_graph_request_total{client="gateway",server="inventory"' in text
    assert text == exposition(duck)


def test_the_http_route_on_opensearch(stores: tuple[OpenSearchStore, DuckDBStore]) -> None:
    search, _ = stores
    api = HttpApi(search, port=0).start()
    try:
        query = f"from={T0}&to={T0 + RANGE_NS}&step={STEP_NS}"
        status, body = get(api.url, f"/api/v1/services/map?{query}")
    finally:
        api.stop()
    assert (status, body) == (200, service_map(search, T0, T0 + RANGE_NS, STEP_NS))
