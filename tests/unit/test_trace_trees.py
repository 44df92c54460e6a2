"""Traces put together when read (zerotrace_query/trace_trees.py): links set each span's
parent and give every span of a connected set its root's trace id, whichever span the read
starts from; several rules for one child settle the same way in any order; loops are cut;
a trace larger than a read follows is marked cut on its root."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from zerotrace import names
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query import trace_trees
from zerotrace_query.documents import INDEX_SPECS, SPANS, TRACE_EDGES, span_document
from zerotrace_query.trace_trees import link, parents, trace

pytestmark = pytest.mark.unit


def span(span_id: str, start: int, service: str = "svc") -> dict[str, Any]:
    return {
        "span_id": span_id,
        "trace_id": f"t-{span_id}",
        "parent_span_id": None,
        "service": service,
        "start_ns": start,
        "end_ns": start + 10,
        "attributes": {},
    }


def edge(parent: str, child: str, rule: str = names.TRACE_RULE_SAME_THREAD) -> dict[str, Any]:
    return {
        "edge_id": f"{parent}>{child}>{rule}",
        "trace_id": f"t-{parent}",
        "parent_span_id": parent,
        "child_span_id": child,
        "rule": rule,
        "ts_ns": 0,
    }


def test_links_give_parents_and_the_roots_trace_id() -> None:
    spans = [span("c", 3), span("a", 1), span("b", 2), span("x", 4)]
    out = link(spans, [edge("a", "b", names.TRACE_RULE_TCP_SEQ), edge("b", "c")])
    by_id = {s["span_id"]: s for s in out}
    assert [s["span_id"] for s in out] == ["a", "b", "c", "x"]
    assert by_id["a"]["parent_span_id"] is None and by_id["a"]["trace_id"] == "t-a"
    assert by_id["b"]["parent_span_id"] == "a" and by_id["b"]["trace_id"] == "t-a"
    assert by_id["c"]["parent_span_id"] == "b" and by_id["c"]["trace_id"] == "t-a"
    assert by_id["x"]["trace_id"] == "t-x"  # stands alone


def test_a_child_linked_by_two_rules_keeps_the_same_parent_in_any_order() -> None:
    two = [edge("p1", "c", names.TRACE_RULE_TCP_SEQ), edge("p2", "c", names.TRACE_RULE_SAME_THREAD)]
    assert parents(two) == parents(list(reversed(two))) == {"c": "p1"}


def test_a_link_to_an_unknown_span_leaves_the_child_a_root() -> None:
    out = link([span("c", 1)], [edge("gone", "c")])
    assert out[0]["parent_span_id"] is None and out[0]["trace_id"] == "t-c"


def test_a_loop_is_cut_where_it_closes() -> None:
    out = link([span("a", 1), span("b", 2)], [edge("a", "b"), edge("b", "a")])
    assert {s["trace_id"] for s in out} == {out[0]["trace_id"]}
    assert sum(1 for s in out if s["parent_span_id"] is None) == 1


@pytest.fixture
def store() -> Iterator[DuckDBStore]:
    db = DuckDBStore(":memory:")
    for spec in INDEX_SPECS:
        db.ensure_index(spec)
    yield db
    db.close()


def fill(db: DuckDBStore, spans: list[dict[str, Any]], edges: list[dict[str, Any]]) -> None:
    assert db.bulk_upsert(SPANS.name, [span_document(s) for s in spans]).ok
    assert db.bulk_upsert(TRACE_EDGES.name, [(e["edge_id"], e) for e in edges]).ok
    db.refresh(SPANS.name)
    db.refresh(TRACE_EDGES.name)


def test_a_trace_is_read_whole_from_any_of_its_spans_or_its_id(store: DuckDBStore) -> None:
    spans = [span("gw", 1, "gateway"), span("db", 2), span("up", 3), span("srv", 4, "llm")]
    spans.append(span("other", 9))
    edges = [edge("gw", "db"), edge("gw", "up"), edge("up", "srv", names.TRACE_RULE_TCP_SEQ)]
    fill(store, spans, edges)
    for start in ("gw", "srv", "db", "t-gw"):
        got = trace(store, start)
        assert [s["span_id"] for s in got] == ["gw", "db", "up", "srv"], start
        assert {s["trace_id"] for s in got} == {"t-gw"}
        assert {s["span_id"]: s["parent_span_id"] for s in got} == {
            "gw": None,
            "db": "gw",
            "up": "gw",
            "srv": "up",
        }
    assert trace(store, "nothing") == []


def test_a_trace_longer_than_the_rounds_is_marked_cut(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = [span(f"s{i}", i) for i in range(6)]
    fill(store, chain, [edge(f"s{i}", f"s{i + 1}") for i in range(5)])
    monkeypatch.setattr(trace_trees, "MAX_ROUNDS", 2)
    got = trace(store, "s0")
    assert [s["span_id"] for s in got] == ["s0", "s1", "s2"]
    assert got[0]["attributes"][names.ATTR_TRACE_CUT] == "true"
    monkeypatch.setattr(trace_trees, "MAX_ROUNDS", 30)
    whole = trace(store, "s0")
    assert len(whole) == 6 and names.ATTR_TRACE_CUT not in whole[0]["attributes"]
