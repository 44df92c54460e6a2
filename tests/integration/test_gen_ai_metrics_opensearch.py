"""GET /metrics on the real OpenSearch node: realistic LLM requests go through the Indexer into
OpenSearch and DuckDB, a real HttpApi serves each, and prometheus_client's parser reads what it
answers: the GenAI names and buckets, every count exact against counts made from the requests,
and the same text from both stores."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opensearchpy import OpenSearch

from tests.unit.test_gen_ai_metrics import (
    expected_samples,
    families_and_buckets,
    get,
    parsed_samples,
)
from tests.unit.test_llm_query_documents import S, index_all, publish_llm, realistic_requests
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.store_duckdb import DuckDBStore
from zerotrace.store_opensearch import OpenSearchStore
from zerotrace_query.gen_ai_metrics import METRICS
from zerotrace_query.http_api import HttpApi
from zerotrace_query.prometheus_text import CONTENT_TYPE, number

pytestmark = pytest.mark.integration
PREFIX = f"zerotrace-genai{uuid.uuid4().hex[:8]}-"
TOKEN = "metrics-token"


def requests() -> list[dict[str, Any]]:
    """400 requests of a small fleet (servers, a gateway), every 7th seen on the wire."""
    out = realistic_requests(1_700_000_400 * S, 400, seed=5)
    for i, request in enumerate(out):
        if i % 7 == 0:
            request["observation_point"] = "NETWORK"
    return out


REQUESTS = requests()


@pytest.fixture(scope="module")
def served(opensearch_url: str) -> Iterator[tuple[str, str]]:
    """(URL of the API on OpenSearch, with a token; URL of the API on DuckDB)."""
    from zerotrace.schema_registry import InMemorySchemaRegistry
    from zerotrace.schemas import load_schema_dir

    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    broker = InMemoryBroker()
    broker.ensure_topics()
    publish_llm(broker, codec, REQUESTS)
    duck = DuckDBStore()
    search = OpenSearchStore(opensearch_url, prefix=PREFIX)
    client = OpenSearch(hosts=[opensearch_url], max_retries=0, timeout=30)
    servers: list[HttpApi] = []
    try:
        index_all(broker, duck, codec, "duckdb")
        index_all(broker, search, codec, "opensearch")
        servers = [
            HttpApi(search, port=0, token=TOKEN).start(),
            HttpApi(duck, port=0).start(),
        ]
        yield servers[0].url, servers[1].url
    finally:
        for server in servers:
            server.stop()
        duck.close()
        search.close()
        client.indices.delete(index=PREFIX + "*", params={"expand_wildcards": "all"})
        templates = client.indices.get_index_template(name=PREFIX + "*", ignore=404)
        for template in templates.get("index_templates", []):
            client.indices.delete_index_template(name=template["name"])
        client.close()


def scrape(url: str, token: str = "") -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    status, content_type, body = get(url, "/metrics", headers)
    assert (status, content_type) == (200, CONTENT_TYPE)
    return body


def test_names_buckets_and_exact_counts(served: tuple[str, str]) -> None:
    on_opensearch, _ = served
    body = scrape(on_opensearch, TOKEN)
    # The service map's RED metrics follow the GenAI ones (service_map_metrics.py); no spans here.
    buckets = families_and_buckets(body[: body.index("# HELP traces_service_graph_")])
    assert list(buckets) == [m.prometheus_name for m in METRICS]
    for metric in METRICS:
        assert buckets[metric.prometheus_name] == [*map(number, metric.bounds), "+Inf"]
    assert buckets["gen_ai_client_operation_duration_seconds"][-2:] == ["81.92", "+Inf"]
    samples = parsed_samples(body)
    assert samples == expected_samples(REQUESTS)
    # Not trivially empty: every family has series, and the server side saw 503s.
    for metric in METRICS:
        assert any(k[0] == metric.prometheus_name + "_count" and v for k, v in samples.items())
    assert any(("error_type", "503") in labels for _, labels in samples)


def test_the_same_text_as_on_duckdb(served: tuple[str, str]) -> None:
    on_opensearch, on_duckdb = served
    assert scrape(on_opensearch, TOKEN) == scrape(on_duckdb)


def test_the_token_guards_metrics(served: tuple[str, str]) -> None:
    on_opensearch, _ = served
    assert get(on_opensearch, "/metrics")[0] == 401
    assert get(on_opensearch, "/metrics", {"Authorization": "Bearer nope"})[0] == 401
