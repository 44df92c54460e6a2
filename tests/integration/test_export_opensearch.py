"""`zerotrace export --format parquet` from the real OpenSearch node (the distributed mode's
store): the same gateway-topology records in OpenSearch (a replay's indices, so live data is
untouched) and in a DuckDB file export to the very same rows and partitions. The window read
pages through OpenSearch as through DuckDB: halving in time and, at one nanosecond, parting
by node and service with the node's own aggregation."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch

from tests.harness.export_data import T0, S, fill, gateway_world, sql
from tests.harness.services import REPO
from tests.unit.profile_data import WINDOW_NS
from zerotrace.replay import ReplayName
from zerotrace.store_duckdb import DuckDBStore
from zerotrace.store_opensearch import OpenSearchStore
from zerotrace_query.documents import PROFILES, SPANS
from zerotrace_query.parquet_export import RECORD_NAMES
from zerotrace_query.window_read import documents, linked_spans

pytestmark = pytest.mark.integration
REPLAY = f"export{uuid.uuid4().hex[:8]}"
WORLD = gateway_world(150, seed=9)
FROM, TO = T0 + 10 * S, T0 + 90 * S


@pytest.fixture(scope="module")
def stores(opensearch_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    home = tmp_path_factory.mktemp("export-os")
    duck = DuckDBStore(str(home / "embedded.duckdb"))
    search = OpenSearchStore(opensearch_url, suffix=ReplayName(REPLAY).index_suffix)
    client = OpenSearch(hosts=[opensearch_url], max_retries=0, timeout=30)
    pattern = f"zerotrace-*{ReplayName(REPLAY).index_suffix}"
    try:
        fill(duck, WORLD)
        fill(search, WORLD)
        duck.close()
        yield home, search
    finally:
        search.close()
        client.indices.delete(index=pattern, params={"expand_wildcards": "all"})
        templates = client.indices.get_index_template(name=pattern, ignore=404)
        for template in templates.get("index_templates", []):
            client.indices.delete_index_template(name=template["name"])
        client.close()


def export(home: Path, opensearch_url: str, lake: Path, *store: str) -> None:
    done = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "zerotrace"),
            "export",
            "--format",
            "parquet",
            *store,
            "--from",
            str(FROM),
            "--to",
            str(TO),
            str(lake),
        ],
        cwd=REPO,
        env={**os.environ, "ZEROTRACE_HOME": str(home), "ZEROTRACE_OPENSEARCH": opensearch_url},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def rows(lake: Path, record: str) -> list[tuple[Any, ...]]:
    return sql(
        f"SELECT * FROM read_parquet('{lake}/record={record}/**/*.parquet', "
        "hive_partitioning=true) ORDER BY ALL"
    ).fetchall()


def test_opensearch_exports_the_same_rows_as_duckdb(
    stores: Any, opensearch_url: str, tmp_path: Path
) -> None:
    home, _ = stores
    export(home, opensearch_url, tmp_path / "os", "--replay", REPLAY)
    export(home, opensearch_url, tmp_path / "duck", "--local")
    for record in RECORD_NAMES:
        from_search = rows(tmp_path / "os", record)
        assert len(from_search) > 50 and from_search == rows(tmp_path / "duck", record), record
    files = sorted(str(p.relative_to(tmp_path / "os")) for p in (tmp_path / "os").rglob("*"))
    assert files == sorted(
        str(p.relative_to(tmp_path / "duck")) for p in (tmp_path / "duck").rglob("*")
    )


def test_the_window_read_pages_through_opensearch(stores: Any) -> None:
    home, search = stores
    duck = DuckDBStore(str(home / "embedded.duckdb"))
    try:
        at = T0 - T0 % WINDOW_NS + 3 * WINDOW_NS  # 3 nodes x 5 profile types start here
        parted = list(documents(search, PROFILES, at, at + 1, page=2))
        assert len(parted) == 15 and len({d["_id"] for d in parted}) == 15
        paged = [d["_id"] for d in documents(search, SPANS, FROM, TO, page=40)]
        assert sorted(paged) == sorted(d["_id"] for d in documents(duck, SPANS, FROM, TO))
        assert list(linked_spans(search, FROM, TO)) == list(linked_spans(duck, FROM, TO))
    finally:
        duck.close()
