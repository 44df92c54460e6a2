"""OpenSearchStore against the store contract, on a real node (infra/opensearch/).

The node's URL and the fail-or-skip rule for an unreachable node come from the `opensearch_url`
fixture in tests/conftest.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from opensearchpy import OpenSearch

from tests.contract.store_contract import FIELDS, StoreContract, doc
from zerotrace.errors import ConfigError, TransientIO
from zerotrace.store import Histogram, IndexSpec, Query, Store
from zerotrace.store_opensearch import OpenSearchStore

pytestmark = pytest.mark.integration

# One prefix per run: runs sharing a node never meet, and teardown removes only its own indices.
PREFIX = f"zerotrace-ct{uuid.uuid4().hex[:8]}-"


@pytest.fixture(scope="module")
def client(opensearch_url: str) -> Iterator[OpenSearch]:
    """A raw client for setup the port does not offer; `opensearch_url` (conftest) fails or
    skips the suite when no node answers."""
    client = OpenSearch(hosts=[opensearch_url], max_retries=0, timeout=30)
    yield client
    client.indices.delete(index=PREFIX + "*", params={"expand_wildcards": "all"})
    templates = client.indices.get_index_template(name=PREFIX + "*", ignore=404)
    for template in templates.get("index_templates", []):
        client.indices.delete_index_template(name=template["name"])
    client.close()


class TestOpenSearchStore(StoreContract):
    @pytest.fixture
    def make_store(self, client: OpenSearch, opensearch_url: str) -> Iterator[Store]:
        store = OpenSearchStore(opensearch_url, prefix=PREFIX)
        yield store
        store.close()


def test_a_second_store_knows_the_index_from_the_node(
    client: OpenSearch, opensearch_url: str
) -> None:
    spec = IndexSpec(f"reader-{uuid.uuid4().hex[:8]}", FIELDS, "start_ns")
    writer = OpenSearchStore(opensearch_url, prefix=PREFIX)
    writer.ensure_index(spec)
    writer.bulk_upsert(spec.name, [("a", doc(1))])
    writer.refresh(spec.name)
    reader = OpenSearchStore(opensearch_url, prefix=PREFIX)
    try:
        assert reader.search(spec.name, Query()) == [{"_id": "a", "start_ns": 1, "service": "api"}]
        with pytest.raises(ConfigError):
            reader.ensure_index(IndexSpec(spec.name, {"start_ns": "long"}, "start_ns"))
    finally:
        writer.close()
        reader.close()


def test_a_dated_index_gets_the_mapping_from_the_template(
    client: OpenSearch, opensearch_url: str
) -> None:
    spec = IndexSpec(f"dated-{uuid.uuid4().hex[:8]}", FIELDS, "start_ns")
    store = OpenSearchStore(opensearch_url, prefix=PREFIX)
    store.ensure_index(spec)
    dated = f"{PREFIX}{spec.name}-2024.01.01"
    client.indices.create(index=dated)
    mapping = client.indices.get_mapping(index=dated)[dated]["mappings"]
    assert mapping["properties"]["start_ns"]["type"] == "long"
    assert mapping["dynamic"] == "false"
    store.close()


def test_an_unreachable_node_is_transient() -> None:
    store = OpenSearchStore("http://127.0.0.1:9", prefix=PREFIX)
    with pytest.raises(TransientIO) as info:
        store.ensure_index(IndexSpec("x", FIELDS, "start_ns"))
    assert "\n" not in str(info.value)
    store.close()


def test_a_document_the_node_refuses_fails_alone(client: OpenSearch, opensearch_url: str) -> None:
    # Passes the shared checks, but "gen_ai" is an object in the mapping (the dotted spec field
    # gen_ai.request.model), so the node refuses a plain value there: a per-item failure.
    spec = IndexSpec(f"refused-{uuid.uuid4().hex[:8]}", FIELDS, "start_ns")
    store = OpenSearchStore(opensearch_url, prefix=PREFIX)
    store.ensure_index(spec)
    result = store.bulk_upsert(spec.name, [("a", doc(1)), ("b", doc(2, gen_ai="x")), ("c", doc(3))])
    store.refresh(spec.name)
    assert result.written == 2
    ((doc_id, reason),) = result.failed
    assert doc_id == "b"
    assert reason.startswith("400 ") and "\n" not in reason
    assert [r["_id"] for r in store.search(spec.name, Query())] == ["a", "c"]
    store.close()


def test_histogram_pages_and_refuses_too_many_groups(
    client: OpenSearch, opensearch_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zerotrace.store_opensearch

    spec = IndexSpec(f"groups-{uuid.uuid4().hex[:8]}", FIELDS, "start_ns")
    store = OpenSearchStore(opensearch_url, prefix=PREFIX)
    try:
        store.ensure_index(spec)
        docs = [(f"{i}", doc(i, f"s{i % 5}", duration_ms=float(i))) for i in range(10)]
        store.bulk_upsert(spec.name, docs)
        store.refresh(spec.name)
        monkeypatch.setattr(zerotrace.store_opensearch, "_GROUPS_PER_PAGE", 2)  # 3 pages
        groups = store.histogram(spec.name, Query(), "duration_ms", (4,), ("service",))
        # s<k> holds k and k + 5: one at most 4, the other above it.
        assert groups == {(f"s{k}",): Histogram((1,), 2, float(2 * k + 5)) for k in range(5)}
        monkeypatch.setattr(zerotrace.store_opensearch, "MAX_LIMIT", 3)
        with pytest.raises(ConfigError, match="more than 3 groups"):
            store.histogram(spec.name, Query(), "duration_ms", (4,), ("service",))
    finally:
        store.close()
