"""Every document of a time window, read from the store in pages, and a window's spans linked
into traces: what an export reads (Parquet, Pyroscope, OTLP, Zipkin all start here).

A store answers at most store_rules.MAX_LIMIT documents a query and has no cursor, so a window
is read by halving it in time until each piece counts fewer than a page, in time order. Many
documents at the very same nanosecond (profile windows all start on the window boundary: a
fleet of thousands of processes shares one start) are split further by the values of a few
keyword fields (node, service, pid, ...), counted by the store's own aggregation.

Spans are linked as trace_trees.link links them (never re-implemented): a span's trace id is
its trace root's, its parent the one the links name, over the spans and links of the window.
To keep memory to the linked spans only, the window's spans are read twice: once for the
spans that some link touches (a few fields of each), which are linked; then every span,
given its linked ids as it passes. Both reads see the same spans unless the store is written
meanwhile; a span written between them is exported as stored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from zerotrace.errors import ConfigError
from zerotrace.store import IndexSpec, Query, Store
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query.documents import SPANS, TRACE_EDGES
from zerotrace_query.trace_trees import link

# Links are read this far around the window: a link's time is its child's start, so a link
# into a window's span lies in the window; the margin takes in a link written with the other
# node's clock (a client span and the server span it is joined to by TCP sequence numbers).
LINK_MARGIN_NS = 60 * 1_000_000_000
# Fields that split documents sharing one time, in this order, where the index has them.
SPLIT_FIELDS = ("node_id", "service", "pid", "profile_type", "kind", "rule", "tid")
# What a span keeps for linking (the rest is read again on the second pass).
_LINK_FIELDS = ("span_id", "trace_id", "parent_span_id", "start_ns", "node_id")
# What a link keeps for linking (trace_trees.parents reads no other field).
_EDGE_FIELDS = ("parent_span_id", "child_span_id", "rule")


def documents(
    store: Store, spec: IndexSpec, from_ns: int, to_ns: int, page: int = MAX_LIMIT
) -> Iterator[dict[str, Any]]:
    """Every document of `spec` with from_ns <= its time < to_ns, in time order (ties in any
    order), each once. ConfigError when more than `page` documents share one time and the
    split fields cannot part them."""
    yield from _range(store, spec, from_ns, to_ns, page)


def _range(
    store: Store, spec: IndexSpec, low: int, high: int, page: int
) -> Iterator[dict[str, Any]]:
    query = Query(ranges={spec.time_field: (low, high)}, limit=page)
    if store.count(spec.name, query) < page:
        found = store.search(spec.name, query)
        if len(found) < page:  # all of them (a write in between may have added some)
            yield from found
            return
    if high - low > 1:
        middle = low + (high - low) // 2
        yield from _range(store, spec, low, middle, page)
        yield from _range(store, spec, middle, high, page)
        return
    yield from _split(store, spec, low, {}, [f for f in SPLIT_FIELDS if f in spec.fields], page)


def _split(
    store: Store,
    spec: IndexSpec,
    at: int,
    equals: dict[str, str | int],
    fields: list[str],
    page: int,
) -> Iterator[dict[str, Any]]:
    """The documents at time `at` matching `equals`, parted by the values of `fields`."""
    query = Query(equals={**equals, spec.time_field: at}, limit=page)
    if store.count(spec.name, query) < page:
        found = store.search(spec.name, query)
        if len(found) < page:
            yield from found
            return
    if not fields:
        raise ConfigError(
            f"more than {page} {spec.name} documents at one time ({at} ns) with the same "
            f"{', '.join(equals) or 'fields'}: the store cannot page through them"
        )
    name, rest = fields[0], fields[1:]
    groups = store.histogram(spec.name, query, spec.time_field, [at], group_by=[name])
    values = sorted((key[0] for key in groups if key[0] is not None), key=str)
    missing = sum(h.count for key, h in groups.items() if key[0] is None)
    if missing:
        raise ConfigError(
            f"{missing} {spec.name} documents at {at} ns have no {name}: cannot page through them"
        )
    for value in values:
        yield from _split(store, spec, at, {**equals, name: value}, rest, page)


@dataclass
class WindowLinks:
    """The links of a window's spans: each linked span's trace id and parent after
    trace_trees.link, and its node (a trace edge is filed under its child span's node)."""

    linked: dict[str, dict[str, Any]] = field(default_factory=dict)

    def apply(self, span: Mapping[str, Any]) -> dict[str, Any]:
        """The span with its linked trace id and parent (as stored when no link touches it)."""
        out = dict(span)
        found = self.linked.get(str(span["span_id"]))
        if found is not None:
            out["trace_id"], out["parent_span_id"] = found["trace_id"], found["parent_span_id"]
        return out

    def node_of(self, span_id: str) -> str | None:
        """The node of a span some link of the window touches; None when it is not in the
        window."""
        found = self.linked.get(span_id)
        return None if found is None else found.get("node_id")


def link_window(store: Store, from_ns: int, to_ns: int) -> WindowLinks:
    """The first pass: the window's links, and the spans they touch, linked."""
    low, high = max(from_ns - LINK_MARGIN_NS, 0), to_ns + LINK_MARGIN_NS
    edges = [
        {name: e.get(name) for name in _EDGE_FIELDS}
        for e in documents(store, TRACE_EDGES, low, high)
    ]
    touched = {str(e[side]) for e in edges for side in ("parent_span_id", "child_span_id")}
    stubs = [
        {name: span.get(name) for name in _LINK_FIELDS}
        for span in documents(store, SPANS, from_ns, to_ns)
        if str(span["span_id"]) in touched
    ]
    # `link` walks its spans in the order given; time order, as a whole-window call would.
    return WindowLinks({str(s["span_id"]): s for s in link(stubs, edges)})


def linked_spans(
    store: Store, from_ns: int, to_ns: int, links: WindowLinks | None = None
) -> Iterator[dict[str, Any]]:
    """Every span of [from_ns, to_ns) in time order, with the trace id and parent the
    window's links give it (trace_trees.link over the window's spans and links)."""
    links = link_window(store, from_ns, to_ns) if links is None else links
    for span in documents(store, SPANS, from_ns, to_ns):
        yield links.apply(span)
