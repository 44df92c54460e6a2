"""The profile routes of the HTTP API over the embedded store: realistic ProfileWindow records
go the real way (Avro on the in-process bus -> Indexer -> DuckDB), then every format comes
back over HTTP and agrees with the pure merge of the same windows."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.profile_data import WINDOW_NS, index_profiles, realistic_windows
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import document_for
from zerotrace_query.flame_graph import FlameFilter, build_tree, merge_windows
from zerotrace_query.http_api import HttpApi, parse_profile_query

T0 = 1_700_000_000_000_000_000
WINDOWS = realistic_windows(T0, 4)


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    from zerotrace.schema_registry import InMemorySchemaRegistry
    from zerotrace.schemas import load_schema_dir

    store = DuckDBStore()
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    assert index_profiles(store, codec, WINDOWS, "profile-api") == len(WINDOWS)
    http = HttpApi(store, port=0).start()
    try:
        yield http.url
    finally:
        http.stop()
        store.close()


def get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read(), r.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["Content-Type"]


def get_json(url: str) -> Any:
    status, body, _ = get(url)
    assert status == 200, body
    return json.loads(body)


def test_profile_document_keeps_folded_stacks_as_a_list(codec: AvroCodec) -> None:
    window = WINDOWS[0]
    index, doc_id, doc = document_for(names.DERIVED_PROFILE.record, window)
    assert (index, doc_id) == (names.INDEX_PROFILES, window["window_id"])
    assert {d["stack"]: d["weight"] for d in doc["stacks"]} == window["stacks"]
    _, datum = codec.decode(codec.encode(names.DERIVED_PROFILE.record, window))
    assert datum == window


def test_flamegraph_json_equals_the_pure_merge(api: str) -> None:
    body = get_json(f"{api}/api/v1/profiles/flamegraph?type=ON_CPU&service=inference")
    expected = merge_windows(WINDOWS, FlameFilter("ON_CPU", service="inference"))
    assert body["root"] == build_tree(expected.stacks).to_json()
    assert (body["total"], body["windows"], body["unit"]) == (expected.total, 4, "count")
    assert body["truncated"] is False
    ranged = get_json(
        f"{api}/api/v1/profiles/flamegraph?type=ON_CPU&node=node-a"
        f"&from={T0 + WINDOW_NS}&to={T0 + 3 * WINDOW_NS}&thread=101"
    )
    assert ranged["windows"] == 2
    assert [c["name"] for c in ranged["root"]["children"]] == ["thread:101"]


def test_inuse_is_the_latest_snapshot_over_http(api: str) -> None:
    body = get_json(f"{api}/api/v1/profiles/flamegraph?type=GPU_MEM_INUSE&node=node-a")
    last = [w for w in WINDOWS if w["profile_type"] == "GPU_MEM_INUSE" and w["pid"] == 4242][-1]
    assert body["total"] == sum(last["stacks"].values()) and body["unit"] == "bytes"


def test_folded_pprof_and_speedscope_formats(api: str) -> None:
    base = f"{api}/api/v1/profiles/flamegraph?type=OFF_CPU&node=node-a"
    status, folded, ctype = get(base + "&format=folded")
    assert status == 200 and ctype.startswith("text/plain")
    expected = merge_windows(WINDOWS, FlameFilter("OFF_CPU", node="node-a"))
    assert sum(int(line.rsplit(" ", 1)[1]) for line in folded.decode().splitlines()) == (
        expected.total
    )
    status, pprof, ctype = get(base + "&format=pprof")
    assert status == 200 and ctype == "application/octet-stream"
    assert b"off_cpu" in gzip.decompress(pprof)
    doc = get_json(base + "&format=speedscope&group=thread")
    assert [p["name"] for p in doc["profiles"]] == ["thread:101", "thread:103"]


def test_diff_between_two_ranges(api: str) -> None:
    body = get_json(
        f"{api}/api/v1/profiles/diff?type=GPU_MEM_ALLOC&node=node-a"
        f"&base_from={T0}&base_to={T0 + WINDOW_NS}&from={T0 + WINDOW_NS}&to={T0 + 4 * WINDOW_NS}"
    )
    assert body["base"]["windows"] == 1 and body["windows"] == 3
    # Same shape per window, so once scaled the two ranges do not differ.
    assert body["root"]["base_total"] == body["root"]["total"]
    assert body["root"]["delta"] == 0


def test_catalog_lists_what_the_pickers_offer(api: str) -> None:
    body = get_json(f"{api}/api/v1/profiles/catalog?type=ON_CPU")
    assert body["services"] == ["inference", "trainer"]
    assert body["nodes"] == ["node-a", "node-b"]
    assert body["pids"] == [4242, 5151]
    assert body["threads"] == [101, 102, 103]
    assert set(body["types"]) == {
        "ON_CPU",
        "OFF_CPU",
        "GPU_MEM_ALLOC",
        "GPU_MEM_INUSE",
        "GPU_LAUNCH",
    }
    assert (body["first_ns"], body["last_ns"]) == (T0, T0 + 4 * WINDOW_NS)


def test_bad_requests_say_which_parameter(api: str) -> None:
    for query, word in (
        ("type=CPU", "'type'"),
        ("format=svg", "'format'"),
        ("pid=abc", "'pid'"),
        ("colour=red", "'colour'"),
        ("from=10&to=5", "'to'"),
    ):
        status, body, _ = get(f"{api}/api/v1/profiles/flamegraph?{query}")
        assert status == 400 and word in json.loads(body)["error"], (query, body)
    flt, _ = parse_profile_query("")
    assert flt == FlameFilter()


def test_store_query_reads_overlapping_windows_only() -> None:
    store = DuckDBStore()
    try:
        from zerotrace_query.documents import PROFILES
        from zerotrace_query.profile_search import fetch_windows

        store.ensure_index(PROFILES)
        docs = [document_for(names.DERIVED_PROFILE.record, w)[1:] for w in WINDOWS]
        store.bulk_upsert(PROFILES.name, docs)
        store.refresh(PROFILES.name)
        found, total = fetch_windows(
            store,
            FlameFilter("ON_CPU", start_ns_from=T0 + WINDOW_NS, start_ns_to=T0 + WINDOW_NS + 1),
        )
        assert total == 2 and {d["window_start_ns"] for d in found} == {T0 + WINDOW_NS}
        assert store.count(PROFILES.name, Query()) == len(WINDOWS)
    finally:
        store.close()


def test_inuse_diff_compares_snapshots_unscaled(api: str) -> None:
    body = get_json(
        f"{api}/api/v1/profiles/diff?type=GPU_MEM_INUSE&node=node-a"
        f"&base_from={T0}&base_to={T0 + WINDOW_NS}&from={T0 + WINDOW_NS}&to={T0 + 4 * WINDOW_NS}"
    )
    assert body["normalized"] is False
    # Activations grew by 16 MiB a window: three windows later, 48 MiB more held.
    assert body["root"]["delta"] == 3 * (16 << 20)


def test_the_flame_graph_page_is_served(api: str) -> None:
    status, body, ctype = get(f"{api}/flamegraph")
    assert status == 200 and ctype.startswith("text/html")
    assert b'<script src="/static/flamegraph.js">' in body
    status, body, ctype = get(f"{api}/static/flamegraph.js")
    assert status == 200 and ctype.startswith("text/javascript")
    assert b"/api/v1/profiles/diff" in body and b"/api/v1/profiles/flamegraph" in body
