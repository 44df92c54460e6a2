"""Traces put together when read: spans joined by the links trace assembly found.

Trace assembly (the correlator's trace step) writes one TraceEdge per link it finds between
two spans (parent, child, rule), and leaves the spans as they were written. A trace is the
spans these links join. Putting it together when it is read, not when the spans are written,
means a link found late (the client's span ends after the server's) still joins its trace,
and nothing is rewritten; DeepFlow assembles its traces at query time for the same reason.

A trace's id is the trace id of its root span (the span with no parent in it; when links are
missing and there are several, the one that started first), so a trace keeps the id its root
was stored with, and every span in it is given that id and its parent's span id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zerotrace import names
from zerotrace.store import Query, Store
from zerotrace_query.documents import SPANS, TRACE_EDGES

# When links by several rules give one child different parents, the first rule here wins: an
# id the application propagated itself, then the same bytes seen at both ends, then the
# same-thread guess.
RULE_ORDER = (
    names.TRACE_RULE_TRACEPARENT,
    names.TRACE_RULE_B3,
    names.TRACE_RULE_REQUEST_ID,
    names.TRACE_RULE_SAME_TASK,
    names.TRACE_RULE_TCP_SEQ,
    names.TRACE_RULE_CONNECTION,
    names.TRACE_RULE_SAME_THREAD,
)
# Links followed outward from the first span at most (DeepFlow stops after 30 search rounds).
MAX_ROUNDS = 30
# Spans in one trace at most: a trace that large is shown cut, and says so.
MAX_SPANS = 2_000


def parents(edges: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Child span id -> parent span id. A child with links by several rules keeps the one of
    the first rule in RULE_ORDER (then the least parent id), so the answer does not depend on
    the order the links came in. A link with no parent is one assembly took back (a thread
    found serving several requests at once) and links nothing."""
    best: dict[str, tuple[int, str]] = {}
    for edge in edges:
        rule = str(edge["rule"])
        rank = RULE_ORDER.index(rule) if rule in RULE_ORDER else len(RULE_ORDER)
        child, candidate = str(edge["child_span_id"]), (rank, str(edge["parent_span_id"]))
        if (
            candidate[1]
            and child != candidate[1]
            and (child not in best or candidate < best[child])
        ):
            best[child] = candidate
    return {child: parent for child, (_, parent) in best.items()}


def link(
    spans: Sequence[Mapping[str, Any]], edges: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The spans with `trace_id` and `parent_span_id` set from the links: each connected set
    of spans is one trace, its id the root's trace id. A link to a span not among `spans`
    leaves the child a root; a loop of links (never written by assembly) is cut where it
    closes. Ordered by start, then span id."""
    by_id = {str(span["span_id"]): dict(span) for span in spans}
    parent_of = {c: p for c, p in parents(edges).items() if c in by_id and p in by_id}
    for span_id, span in by_id.items():
        if span_id in parent_of:
            span["parent_span_id"] = parent_of[span_id]
    roots: dict[str, str] = {}

    def root_of(span_id: str) -> str:
        seen: list[str] = []
        on_path: set[str] = set()
        while span_id in parent_of and span_id not in roots and span_id not in on_path:
            seen.append(span_id)
            on_path.add(span_id)
            span_id = parent_of[span_id]
        top = roots.get(span_id, span_id)
        if span_id in on_path:  # a loop: cut it at the span where it closed
            parent_of.pop(span_id, None)
            by_id[span_id]["parent_span_id"] = None
            top = span_id
        for passed in seen:
            roots[passed] = top
        return top

    for span_id in by_id:
        by_id[span_id]["trace_id"] = str(by_id[root_of(span_id)]["trace_id"])
    return sorted(by_id.values(), key=lambda s: (int(s["start_ns"]), str(s["span_id"])))


def trace(store: Store, trace_or_span_id: str) -> list[dict[str, Any]]:
    """Every span of the trace that holds this trace id or span id, linked (see `link`); []
    when no span has it. Follows links up and down for at most MAX_ROUNDS rounds and
    MAX_SPANS spans; a trace cut short says so on its root (ATTR_TRACE_CUT)."""
    found = _spans(store, "span_id", trace_or_span_id) or _spans(
        store, "trace_id", trace_or_span_id
    )
    spans = {str(s["span_id"]): s for s in found}
    edges: dict[str, dict[str, Any]] = {}
    frontier, cut = set(spans), False
    for _ in range(MAX_ROUNDS):
        reached: set[str] = set()
        for span_id in sorted(frontier):
            for edge in _edges(store, span_id):
                edges[str(edge["_id"])] = edge
                reached.update({str(edge["parent_span_id"]), str(edge["child_span_id"])})
        new = sorted(reached - spans.keys() - {""})  # "": a link taken back
        room = max(MAX_SPANS - len(spans), 0)
        cut = len(new) > room
        frontier = set()
        for span_id in new[:room]:
            for span in _spans(store, "span_id", span_id):
                spans[span_id] = span
                frontier.add(span_id)
        if not frontier:
            break
    else:
        cut = True  # rounds ran out with spans still to follow
    linked = link(list(spans.values()), edges.values())
    # Links that lost to a better rule were followed too: keep the trace the first span is in.
    if found:
        first = str(found[0]["span_id"])
        trace_id = next(s["trace_id"] for s in linked if s["span_id"] == first)
        linked = [s for s in linked if s["trace_id"] == trace_id]
    if cut and linked:
        root = next((s for s in linked if not s.get("parent_span_id")), linked[0])
        root["attributes"] = {**(root.get("attributes") or {}), names.ATTR_TRACE_CUT: "true"}
    return linked


def _spans(store: Store, field: str, value: str) -> list[dict[str, Any]]:
    return store.search(SPANS.name, Query(equals={field: value}, limit=MAX_SPANS))


def _edges(store: Store, span_id: str) -> list[dict[str, Any]]:
    """The links into and out of a span."""
    return [
        edge
        for field in ("parent_span_id", "child_span_id")
        for edge in store.search(TRACE_EDGES.name, Query(equals={field: span_id}, limit=MAX_SPANS))
    ]
