"""Profile windows on the real OpenSearch node: realistic derived.profile records (and a few
with awkward frames) go through the Indexer into OpenSearch and DuckDB, and every profile route
of the HTTP API answers the same bytes from both, equal to the pure merge of the windows."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from opensearchpy import OpenSearch

from tests.unit.profile_data import WINDOW_NS, index_profiles, profile_window, realistic_windows
from zerotrace.codec import AvroCodec
from zerotrace.store import Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace.store_opensearch import OpenSearchStore
from zerotrace_query.flame_graph import FlameFilter, build_tree, merge_windows
from zerotrace_query.http_api import HttpApi

pytestmark = pytest.mark.integration
PREFIX = f"zerotrace-prof{uuid.uuid4().hex[:8]}-"
T0 = 1_700_000_000_000_000_000
# Frames a map-keyed document would break on: dots everywhere, an empty path segment, a leading
# and trailing dot, non-ASCII names, and a stack 200 frames deep.
AWKWARD = {
    "thread:7;native:libc.so.6+0x1f2e;kernel:.text.unlikely": 5,
    "thread:7;py:Über.run (/srv/a..b/ü.py:3);native:..[lib.so.]": 7,
    "thread:7;" + ";".join(f"py:f{i} (/x/m.py:{i})" for i in range(200)): 11,
}
WINDOWS = [
    *realistic_windows(T0, 5),
    profile_window(T0, "ON_CPU", AWKWARD, node="node-c", service="odd", pid=77),
]
QUERIES = (
    "type=ON_CPU",
    "type=ON_CPU&service=odd",
    "type=ON_CPU&node=node-a&thread=101&frame=hot_loop",
    "type=OFF_CPU&group=thread",
    f"type=GPU_MEM_INUSE&to={T0 + 3 * WINDOW_NS}",
    "type=GPU_MEM_ALLOC&pid=5151&format=folded",
    "type=GPU_LAUNCH&format=speedscope&group=thread",
    "type=ON_CPU&node=node-a&format=pprof",
    f"type=ON_CPU&base_from={T0}&base_to={T0 + WINDOW_NS}&from={T0 + WINDOW_NS}",
    "type=OFF_CPU",
)


@pytest.fixture(scope="module")
def apis(opensearch_url: str) -> Iterator[tuple[str, str]]:
    from zerotrace.schema_registry import InMemorySchemaRegistry
    from zerotrace.schemas import load_schema_dir

    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    duck: Store = DuckDBStore()
    search: Store = OpenSearchStore(opensearch_url, prefix=PREFIX)
    client = OpenSearch(hosts=[opensearch_url], max_retries=0, timeout=30)
    servers: list[HttpApi] = []
    try:
        assert index_profiles(duck, codec, WINDOWS, "duckdb") == len(WINDOWS)
        assert index_profiles(search, codec, WINDOWS, "opensearch") == len(WINDOWS)
        servers = [HttpApi(duck, port=0).start(), HttpApi(search, port=0).start()]
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


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as r:
        assert r.status == 200
        data: bytes = r.read()
        return data


def route(query: str) -> str:
    if "base_from" in query:
        return "/api/v1/profiles/diff"
    return "/api/v1/profiles/flamegraph"


@pytest.mark.parametrize("query", QUERIES)
def test_opensearch_and_duckdb_answer_the_same(apis: tuple[str, str], query: str) -> None:
    duck, search = apis
    path = f"{route(query)}?{query}"
    assert fetch(search + path) == fetch(duck + path)


def test_opensearch_flame_graph_equals_the_pure_merge(apis: tuple[str, str]) -> None:
    _, search = apis
    for flt, query in (
        (FlameFilter("ON_CPU"), "type=ON_CPU"),
        (
            FlameFilter("ON_CPU", service="odd", by_thread=True),
            "type=ON_CPU&service=odd&group=thread",
        ),
        (FlameFilter("GPU_MEM_INUSE"), "type=GPU_MEM_INUSE"),
    ):
        body = json.loads(fetch(f"{search}/api/v1/profiles/flamegraph?{query}"))
        expected = merge_windows(WINDOWS, flt)
        assert body["root"] == build_tree(expected.stacks).to_json()
        assert body["total"] == expected.total > 0
    odd = json.loads(fetch(f"{search}/api/v1/profiles/flamegraph?type=ON_CPU&service=odd"))
    assert odd["total"] == sum(AWKWARD.values())
    depth, node = 0, odd["root"]
    while node["children"]:
        node = max(node["children"], key=lambda c: c["total"])
        depth += 1
    assert depth == 200
    catalog = json.loads(fetch(f"{search}/api/v1/profiles/catalog?type=ON_CPU"))
    assert catalog["services"] == ["inference", "odd", "trainer"]
    assert catalog["threads"] == [7, 101, 102, 103]
