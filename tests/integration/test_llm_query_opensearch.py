"""The LLM queries give the same answers on the real OpenSearch node as on DuckDB: the same
realistic records go through the Indexer into both, and every endpoint's body is compared."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from opensearchpy import OpenSearch

from tests.unit.test_llm_query_documents import S, index_all, publish_llm, realistic_requests
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.store import Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace.store_opensearch import OpenSearchStore
from zerotrace_query.llm_search import (
    LlmFilter,
    list_llm_requests,
    llm_concurrency,
    llm_percentiles,
)

pytestmark = pytest.mark.integration
PREFIX = f"zerotrace-llm{uuid.uuid4().hex[:8]}-"
END = 1_700_000_400 * S
REQUESTS = realistic_requests(END, 400, seed=3)


@pytest.fixture(scope="module")
def stores(opensearch_url: str) -> Iterator[tuple[Store, Store]]:
    from zerotrace.schema_registry import InMemorySchemaRegistry
    from zerotrace.schemas import load_schema_dir

    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    broker = InMemoryBroker()
    broker.ensure_topics()
    publish_llm(broker, codec, REQUESTS)
    duck = DuckDBStore()
    search = OpenSearchStore(opensearch_url, prefix=PREFIX)
    client = OpenSearch(hosts=[opensearch_url], max_retries=0, timeout=30)
    try:
        index_all(broker, duck, codec, "duckdb")
        index_all(broker, search, codec, "opensearch")
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
    LlmFilter(limit=10_000),
    LlmFilter(model="qwen2.5-32b-instruct", limit=10_000, bucket_ns=30 * S),
    LlmFilter(service="vllm", status="error", limit=10_000),
    LlmFilter(start_ns_from=END - 400 * S, start_ns_to=END - 100 * S, limit=10_000),
    LlmFilter(limit=50, bucket_ns=60 * S),  # truncated
]


@pytest.mark.parametrize("flt", FILTERS)
def test_same_answers_on_both_stores(stores: tuple[Store, Store], flt: LlmFilter) -> None:
    duck, search = stores
    for answer in (list_llm_requests, llm_percentiles, llm_concurrency):
        on_duckdb, on_opensearch = answer(duck, flt), answer(search, flt)
        assert on_opensearch == on_duckdb, answer.__name__


def test_the_answers_are_not_trivial(stores: tuple[Store, Store]) -> None:
    _, search = stores
    listed = list_llm_requests(search, LlmFilter(limit=10_000))
    assert listed["count"] == listed["total"] == 400 and not listed["truncated"]
    cut = llm_percentiles(search, LlmFilter(limit=50, bucket_ns=60 * S))
    assert cut["truncated"] and cut["total"] == 400 and cut["count"] == 50
    errors = list_llm_requests(search, LlmFilter(status="error", limit=10_000))["requests"]
    assert errors and all(r["status"] == "error" for r in errors)
    conc = llm_concurrency(search, LlmFilter(limit=10_000, bucket_ns=60 * S))
    assert max(b["max"] for s in conc["series"] for b in s["buckets"]) >= 2
