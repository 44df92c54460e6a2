"""Which server answered a client group, from the links trace assembly wrote (pure over the
store port): the service map's method (a) (service_map.py).

Trace assembly joins a client span and the server span of the same exchange with a TraceEdge
(parent the client span, child the server span) by rule tcp_seq (the request's first byte has
the same TCP sequence number at both ends) or same_connection (TLS: one request in flight on
the connection at a time). Such a link holds across NAT, a virtual IP or a port mapping, where
the addresses the two ends see differ, so it answers before any address does.

Links name spans, not groups, and the store cannot join: so a group is asked through a few of
its spans. The LINK_SAMPLE latest spans of a client group in the range are looked up with
their exchange links and the linked server spans; the server group found most often (ties:
the first in group order) answers for the whole group. A server group whose LINK_SAMPLE latest
spans have a link from a client span has observed clients: its spans are the server end of
exchanges a client already counts. Cost: two counts of exchange links, and when there are any,
for each of the MAX_LINKED_GROUPS busiest groups one search for its latest spans and, per
span, one for its links and one for each span linked (two rules at most): 1 + 2 x LINK_SAMPLE
searches a group as assembly writes links (one per exchange), 1 + 3 x LINK_SAMPLE at most.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from zerotrace import names
from zerotrace.errors import ConfigError
from zerotrace.store import Query, Store
from zerotrace_query.documents import SPANS, TRACE_EDGES
from zerotrace_query.llm_stats import NS_PER_S
from zerotrace_query.service_groups import SERVER, Counts, SpanGroup, group_order, parse_kind

# The links that join the two ends of one exchange, the more certain first.
EXCHANGE_RULES = (names.TRACE_RULE_TCP_SEQ, names.TRACE_RULE_CONNECTION)
# Spans of a group looked up: one is enough when assembly links every exchange; three ride
# out a span whose link was not found (its server end was not captured).
LINK_SAMPLE = 3
MAX_LINKED_GROUPS = 200
# Links are stamped with the server span's start; a client span near the end of the range
# may have its server's start (another node's clock) a little after it.
LINK_MARGIN_NS = 60 * NS_PER_S


@dataclass(frozen=True)
class Links:
    """What the exchange links say: the server group that answers each client group, and the
    server groups whose spans are the server end of a client's exchange."""

    server_of: Mapping[SpanGroup, SpanGroup]
    linked_servers: frozenset[SpanGroup]


NO_LINKS = Links({}, frozenset())


def has_exchange_links(store: Store, start_ns: int | None, end_ns: int | None) -> bool:
    """Whether the store holds any exchange link for spans of the range (False also when it
    has no trace-edges index: a store written before trace assembly)."""
    high = None if end_ns is None else end_ns + LINK_MARGIN_NS
    try:
        return any(
            store.count(
                TRACE_EDGES.name, Query(equals={"rule": rule}, ranges={"ts_ns": (start_ns, high)})
            )
            for rule in EXCHANGE_RULES
        )
    except ConfigError:  # a valid query fails only on a missing index
        return False


def learn_links(
    store: Store,
    groups: Mapping[SpanGroup, Counts],
    start_ns: int | None,
    end_ns: int | None,
) -> Links:
    """(a) of the module doc for the MAX_LINKED_GROUPS busiest groups with an address."""
    if not has_exchange_links(store, start_ns, end_ns):
        return NO_LINKS
    busiest = sorted(
        (g for g in groups if g.address is not None and g.port is not None),
        key=lambda g: (-groups[g].count, group_order(g)),
    )[:MAX_LINKED_GROUPS]
    server_of: dict[SpanGroup, SpanGroup] = {}
    linked: set[SpanGroup] = set()
    for group in busiest:
        spans = store.search(
            SPANS.name,
            Query(
                equals={
                    "node_id": group.node,
                    "service": group.service,
                    "kind": group.kind,
                    "server_address": str(group.address),
                    "server_port": int(group.port or 0),
                },
                ranges={"start_ns": (start_ns, end_ns)},
                sort="start_ns",
                descending=True,
                limit=LINK_SAMPLE,
            ),
        )
        if group.side == SERVER:
            if any(_links_into(store, str(s["_id"])) for s in spans):
                linked.add(group)
            continue
        found = Counter(
            target for s in spans if (target := _server_end(store, str(s["_id"]))) is not None
        )
        if found:
            target = min(found, key=lambda t: (-found[t], group_order(t)))
            server_of[group] = target
            linked.add(target)
    return Links(server_of, frozenset(linked))


def _links_into(store: Store, server_span_id: str) -> bool:
    edges = store.search(TRACE_EDGES.name, Query(equals={"child_span_id": server_span_id}))
    return any(e.get("rule") in EXCHANGE_RULES and e.get("parent_span_id") for e in edges)


def _server_end(store: Store, client_span_id: str) -> SpanGroup | None:
    """The group of the server span a client span is linked to as one exchange, if any."""
    edges = store.search(TRACE_EDGES.name, Query(equals={"parent_span_id": client_span_id}))
    children = sorted(
        (EXCHANGE_RULES.index(str(e["rule"])), str(e["child_span_id"]))
        for e in edges
        if e.get("rule") in EXCHANGE_RULES
    )
    for _, child in children:
        for doc in store.search(SPANS.name, Query(equals={"span_id": child}, limit=1)):
            parsed = parse_kind(doc.get("kind"))
            if parsed is not None and parsed[1] == SERVER:
                port = doc.get("server_port")
                return SpanGroup(
                    str(doc.get("node_id") or ""),
                    str(doc.get("service") or ""),
                    *parsed,
                    doc.get("server_address"),
                    port if isinstance(port, int) else None,
                )
    return None
