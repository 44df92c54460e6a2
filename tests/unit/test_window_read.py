"""A window read from the store (zerotrace_query/window_read.py): every document of [from, to)
exactly once and in time order, however small the page, including more documents at one
nanosecond than a page holds (parted by node, service, pid, ...); spans linked exactly as
trace_trees.link links the window's spans and links in one call, though only the spans a
link touches are kept in memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.export_data import MS, T0, S, fill, gateway_world
from zerotrace.errors import ConfigError
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import INDEX_SPECS, PROFILES, SPANS, TRACE_EDGES
from zerotrace_query.trace_trees import link
from zerotrace_query.window_read import (
    LINK_MARGIN_NS,
    documents,
    link_window,
    linked_spans,
)

pytestmark = pytest.mark.unit
WORLD = gateway_world(60)
FROM, TO = T0 + 10 * S, T0 + 30 * S


@pytest.fixture(scope="module")
def store() -> Iterator[DuckDBStore]:
    db = DuckDBStore(":memory:")
    fill(db, WORLD)
    yield db
    db.close()


def bare(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in d.items() if k != "_id"} for d in docs]


def in_window(items: list[dict[str, Any]], field: str, low: int, high: int) -> list[str]:
    return sorted(str(i["_id"]) for i in items if low <= i[field] < high)


@pytest.mark.parametrize("page", [3, 7, 10_000])
def test_every_document_of_the_window_once_in_time_order(store: DuckDBStore, page: int) -> None:
    everything = store.search(SPANS.name, Query(limit=10_000))
    got = list(documents(store, SPANS, FROM, TO, page=page))
    assert sorted(d["_id"] for d in got) == in_window(everything, "start_ns", FROM, TO)
    times = [d["start_ns"] for d in got]
    assert times == sorted(times)
    assert len(got) > 3 * page or page == 10_000


def test_more_documents_at_one_time_than_a_page_are_parted_by_field(store: DuckDBStore) -> None:
    """Profile windows share their start: 3 nodes x 5 types at each 10 s boundary."""
    at = T0 - T0 % (10 * S) + 20 * S
    got = list(documents(store, PROFILES, at, at + 1, page=2))
    assert len(got) == 15 and len({d["_id"] for d in got}) == 15
    assert {d["window_start_ns"] for d in got} == {at}


def test_documents_no_field_can_part_are_a_clear_error() -> None:
    db = DuckDBStore(":memory:")
    try:
        for spec in INDEX_SPECS:
            db.ensure_index(spec)
        same = {"node_id": "n", "service": "s", "pid": 1, "profile_type": "ON_CPU"}
        docs = [
            (f"w{i}", {**same, "window_id": f"w{i}", "window_start_ns": 5, "window_end_ns": 6})
            for i in range(4)
        ]
        db.bulk_upsert(PROFILES.name, docs)
        with pytest.raises(ConfigError, match="more than 3 profiles documents at one time"):
            list(documents(db, PROFILES, 0, 10, page=3))
        assert len(list(documents(db, PROFILES, 0, 10, page=5))) == 4
    finally:
        db.close()


def test_linked_spans_are_what_link_makes_of_the_window(store: DuckDBStore) -> None:
    spans = bare(list(documents(store, SPANS, FROM, TO)))
    edges = list(documents(store, TRACE_EDGES, FROM - LINK_MARGIN_NS, TO + LINK_MARGIN_NS))
    expected = link(spans, edges)
    got = bare(list(linked_spans(store, FROM, TO)))
    assert got == expected
    by_id = {s["span_id"]: s for s in got}
    # A request's six spans are one trace with the client's trace id, where all are inside.
    inside = [s for s in WORLD.spans if s["kind"] == "http.client" and s["service"] == "loadgen"]
    whole = [c for c in inside if c["start_ns"] >= FROM and c["start_ns"] + 40 * MS < TO]
    assert whole
    for client in whole:
        tag = client["span_id"][1:9]
        family = [by_id[f"{k}{tag}0000000"] for k in "abcdef" if f"{k}{tag}0000000" in by_id]
        assert len(family) == 6
        assert {s["trace_id"] for s in family} == {client["trace_id"]}
        assert by_id[f"f{tag}0000000"]["parent_span_id"] == f"e{tag}0000000"
        assert by_id[f"b{tag}0000000"]["parent_span_id"] == client["span_id"]


def test_a_parent_outside_the_window_leaves_its_child_a_root(store: DuckDBStore) -> None:
    """The window starts between a request's client span and its gateway span."""
    client = WORLD.spans[6 * 20]
    low = client["start_ns"] + 1
    got = {s["span_id"]: s for s in linked_spans(store, low, low + 5 * S)}
    server = got[f"b{client['span_id'][1:]}"]
    assert server["parent_span_id"] is None
    assert server["trace_id"] == f"b{client['span_id'][1:]}{'0' * 16}"
    child = got[f"c{client['span_id'][1:]}"]
    assert child["trace_id"] == server["trace_id"]


def test_link_window_knows_the_nodes_of_linked_spans(store: DuckDBStore) -> None:
    links = link_window(store, FROM, TO)
    upstream = next(
        s for s in WORLD.spans if s["service"] == "llama_cpp.server" and FROM <= s["start_ns"] < TO
    )
    assert links.node_of(upstream["span_id"]) == "edge:1"
    assert links.node_of("no-such-span") is None
    unlinked = {"span_id": "zz", "trace_id": "t", "parent_span_id": "p"}
    assert links.apply(unlinked) == unlinked
