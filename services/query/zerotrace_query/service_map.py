"""The service map (pure over the store port): which service calls which, over which protocol,
how often, how often it fails and how long it takes, per time window.

Counting happens inside the store: one Store.histogram call per window counts the window's
client and server spans per group (service_groups.py: one node's service, one protocol and
side, one peer address) into duration buckets, with no span leaving the store. A client group
is one unit: the method below decides who answered it, and all its spans count on that edge.

Who is the server of a client group (a client span's kind ends in ".client"):
  (a) by link: the service of the server spans trace assembly joined to the group's spans as
      the other end of the same exchange (rules tcp_seq and same_connection; service_links.py
      asks a few of the group's latest spans). Links hold across NAT, a virtual IP or a port
      mapping, where the addresses the two ends see differ;
  (b) else by address: the service of the server spans seen in the window that listen on the
      address and port the client called (a server span's server.address/server.port are its
      own socket's), same protocol; a loopback address (127.0.0.0/8, ::1) only on the
      client's own node; an IPv4-mapped IPv6 address (::ffff:10.0.0.7) as its IPv4 one.
      With no such server span in the window, the ones seen anywhere in [from, to) answer.
      Several candidates: the one on the client's node, then the busiest, then by node and
      name;
  (c) else the peer itself, a node named by protocol and address: "redis 127.0.0.1:6379",
      "postgresql 10.0.0.5:5432" (the protocol's name is Redis's and PostgreSQL's
      db.system.name too; MariaDB shows as mysql, the protocol it speaks).

Each exchange counts once, from the client's view: the spans of a server group that an
observed client reaches in the window (by (a) or (b)), or whose own latest spans are linked
from client spans, are not counted again. The spans of a server group with no observed client
form the edge "(unobserved clients)" -> its service, in the server's view (requests from
processes zerotrace does not watch). A server group reached by observed and unobserved clients
in the same window shows only the observed clients' calls; a node's `served` figures (its own
server spans, server view) still count every request it answered.

Errors: spans with status ERROR (a client's view fails on an HTTP 4xx too, a server's only on
a 5xx, as OpenTelemetry's HTTP conventions say). Rates: per second of the window (of the range
for totals). Percentiles p50, p95, p99: interpolated in the buckets as Prometheus's
histogram_quantile does (service_groups.percentile_ns). BOUNDS_NS are 1, 1.5, 2, 3, 5 and 7
times each power of ten from 1 us to 70 s, then 100 s, so an interpolated percentile lies in
the true one's bucket, at most 1.67 times off; one in the overflow bucket reads as 100 s.

Cost: one histogram per window (at most MAX_WINDOWS), plus service_links' look-ups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import parse_qs

from zerotrace import names
from zerotrace.errors import ZerotraceError
from zerotrace.store import Store
from zerotrace_query.llm_stats import NS_PER_S
from zerotrace_query.service_groups import (
    CLIENT,
    SERVER,
    Counts,
    SpanGroup,
    group_order,
    merge,
    no_counts,
    percentile_ns,
    read_groups,
)
from zerotrace_query.service_links import Links, learn_links

UNOBSERVED = "(unobserved clients)"
UNKNOWN_SERVICE = "(unknown service)"
# How an edge's server was found (the method in the module doc).
BY_LINK = "link"
BY_ADDRESS = "address"
BY_PEER = "peer"
BY_SERVER = "server_only"
# Node types.
NODE_SERVICE = "service"
NODE_PEER = "peer"
NODE_UNOBSERVED = "unobserved"
# Tempo's and the OpenTelemetry Collector's servicegraph connection types.
CONNECTION_DATABASE = "database"
CONNECTION_MESSAGING = "messaging_system"
CONNECTION_VIRTUAL = "virtual_node"
DATABASES = frozenset({names.PROTOCOL_REDIS, names.PROTOCOL_POSTGRESQL, names.PROTOCOL_MYSQL})
MESSAGING = frozenset({names.PROTOCOL_KAFKA})
BOUNDS_NS: tuple[int, ...] = (
    *(m * 10**e // 10 for e in range(3, 11) for m in (10, 15, 20, 30, 50, 70)),
    100 * NS_PER_S,
)
PERCENTILES = (50, 95, 99)
MAX_WINDOWS = 240
DEFAULT_WINDOWS = 30
MIN_STEP_NS = 1_000_000
MAP_PATH = "/api/v1/services/map"
MAP_PARAMS = ("from", "to", "step")
DEFAULT_RANGE_NS = 15 * 60 * NS_PER_S


class EdgeKey(NamedTuple):
    client: str
    server: str
    protocol: str


# --- (b) addresses, (c) peers -------------------------------------------------------------

ListenKey = tuple[str, str, int]  # protocol, host, port
Listeners = Mapping[ListenKey, Sequence[tuple[SpanGroup, int]]]


def host(address: str) -> str:
    """An address as both ends spell it: lower case, an IPv4-mapped IPv6 one as IPv4."""
    text = address.strip().lower()
    return text[len("::ffff:") :] if text.startswith("::ffff:") and "." in text else text


def is_loopback(address: str) -> bool:
    text = host(address)
    return text.startswith("127.") or text in ("::1", "localhost")


def listeners(groups: Mapping[SpanGroup, Counts]) -> dict[ListenKey, list[tuple[SpanGroup, int]]]:
    """Server groups by the (protocol, address, port) they listen on, with their span counts."""
    out: dict[ListenKey, list[tuple[SpanGroup, int]]] = {}
    for group, counts in groups.items():
        if group.side == SERVER and group.address is not None and group.port is not None:
            key = (group.protocol, host(group.address), group.port)
            out.setdefault(key, []).append((group, counts.count))
    return out


def by_address(group: SpanGroup, listen: Listeners) -> SpanGroup | None:
    """(b) of the module doc, over one listener map."""
    if group.address is None or group.port is None:
        return None
    found = listen.get((group.protocol, host(group.address), group.port), ())
    if is_loopback(group.address):
        found = [(g, n) for g, n in found if g.node == group.node]
    if not found:
        return None
    return min(found, key=lambda c: (c[0].node != group.node, -c[1], group_order(c[0])))[0]


def peer_name(group: SpanGroup) -> str:
    """(c): "redis 127.0.0.1:6379"; an IPv6 address in brackets."""
    if group.address is None:
        return f"{group.protocol} (unknown address)"
    address = f"[{group.address}]" if ":" in group.address else group.address
    return f"{group.protocol} {address}" + ("" if group.port is None else f":{group.port}")


def service_name(service: str) -> str:
    return service or UNKNOWN_SERVICE


def resolve(
    group: SpanGroup, links: Links, *listener_maps: Listeners
) -> tuple[SpanGroup | None, str]:
    """(server group or None, how) for a client group: (a), then (b) over each map in turn."""
    if group in links.server_of:
        return links.server_of[group], BY_LINK
    for listen in listener_maps:
        found = by_address(group, listen)
        if found is not None:
            return found, BY_ADDRESS
    return None, BY_PEER


# --- edges ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edge:
    counts: Counts
    how: frozenset[str]


def fold(
    groups: Mapping[SpanGroup, Counts], links: Links, fallback: Listeners
) -> dict[EdgeKey, Edge]:
    """One window's edges from its span groups (the module doc's method)."""
    listen = listeners(groups)
    reached: set[SpanGroup] = set(links.linked_servers)
    edges: dict[EdgeKey, Edge] = {}
    for group in sorted(groups, key=group_order):
        if group.side != CLIENT:
            continue
        target, how = resolve(group, links, listen, fallback)
        if target is not None:
            reached.add(target)
        server = peer_name(group) if target is None else service_name(target.service)
        _add(
            edges, EdgeKey(service_name(group.service), server, group.protocol), groups[group], how
        )
    for group in sorted(groups, key=group_order):
        if group.side == SERVER and group not in reached:
            key = EdgeKey(UNOBSERVED, service_name(group.service), group.protocol)
            _add(edges, key, groups[group], BY_SERVER)
    return edges


def _add(edges: dict[EdgeKey, Edge], key: EdgeKey, counts: Counts, *how: str) -> None:
    old = edges.get(key)
    edges[key] = (
        Edge(counts, frozenset(how))
        if old is None
        else Edge(old.counts + counts, old.how | frozenset(how))
    )


def is_virtual(key: EdgeKey, edge: Edge) -> bool:
    """Whether one end is not an observed service: unobserved clients, or a peer."""
    return key.client == UNOBSERVED or BY_PEER in edge.how


def connection_type(key: EdgeKey, virtual: bool) -> str:
    """Tempo's connection_type of an edge: database, messaging_system, virtual_node, or ""."""
    if key.protocol in DATABASES:
        return CONNECTION_DATABASE
    if key.protocol in MESSAGING:
        return CONNECTION_MESSAGING
    return CONNECTION_VIRTUAL if virtual else ""


# --- numbers --------------------------------------------------------------------------------


def stats(counts: Counts, seconds: float) -> dict[str, Any]:
    """Count, rate (per s), errors, error rate and percentiles of some spans."""
    body: dict[str, Any] = {
        "count": counts.count,
        "rate": counts.count / seconds if seconds > 0 else None,
        "errors": counts.errors,
        "error_rate": counts.errors / counts.count if counts.count else None,
    }
    for q in PERCENTILES:
        body[f"p{q}_ns"] = percentile_ns(counts, BOUNDS_NS, q)
    return body


def windows(from_ns: int, to_ns: int, step_ns: int) -> list[tuple[int, int]]:
    """[start, end) of each window of [from_ns, to_ns); the last one may be shorter.
    ValueError for an empty range, a step below MIN_STEP_NS or more than MAX_WINDOWS."""
    if to_ns <= from_ns:
        raise ValueError("'to' must be after 'from'")
    if step_ns < MIN_STEP_NS:
        raise ValueError(f"'step' must be at least {MIN_STEP_NS} ns (1 ms)")
    count = -(-(to_ns - from_ns) // step_ns)
    if count > MAX_WINDOWS:
        raise ValueError(
            f"{count} windows of {step_ns} ns in the range; at most {MAX_WINDOWS}: widen 'step'"
        )
    return [(s, min(s + step_ns, to_ns)) for s in range(from_ns, to_ns, step_ns)]


def default_step(from_ns: int, to_ns: int) -> int:
    """DEFAULT_WINDOWS windows over the range, in whole seconds where the range allows."""
    step = -(-(to_ns - from_ns) // DEFAULT_WINDOWS)
    if step >= NS_PER_S:
        step = -(-step // NS_PER_S) * NS_PER_S
    return max(step, MIN_STEP_NS)


# --- the map --------------------------------------------------------------------------------


def service_map(store: Store, from_ns: int, to_ns: int, step_ns: int = 0) -> dict[str, Any]:
    """The service map of spans starting in [from_ns, to_ns), in windows of step_ns (0: the
    default_step): {"from_ns", "to_ns", "step_ns", "windows": [start_ns, ...], "bounds_ns",
    "nodes": [...], "edges": [...]} (README, "Service map"). ValueError for a bad range or
    step; the store's errors as they come."""
    step = step_ns or default_step(from_ns, to_ns)
    spans = windows(from_ns, to_ns, step)
    per_window = [read_groups(store, start, end, BOUNDS_NS) for start, end in spans]
    whole = merge(per_window)
    links = learn_links(store, whole, from_ns, to_ns)
    fallback = listeners(whole)
    folded = [fold(groups, links, fallback) for groups in per_window]
    seconds = (to_ns - from_ns) / NS_PER_S
    empty = no_counts(BOUNDS_NS)
    totals: dict[EdgeKey, Edge] = {}
    edges = []
    for key in sorted({key for window in folded for key in window}):
        series = []
        for (start, end), window in zip(spans, folded, strict=True):
            found = window.get(key)
            if found is not None:
                _add(totals, key, found.counts, *found.how)
            counts = empty if found is None else found.counts
            series.append({"start_ns": start, **stats(counts, (end - start) / NS_PER_S)})
        total = totals[key]
        edges.append(
            {
                "client": key.client,
                "server": key.server,
                "protocol": key.protocol,
                "connection_type": connection_type(key, is_virtual(key, total)),
                "view": SERVER if key.client == UNOBSERVED else CLIENT,
                "resolved_by": sorted(total.how),
                "total": stats(total.counts, seconds),
                "series": series,
            }
        )
    return {
        "from_ns": from_ns,
        "to_ns": to_ns,
        "step_ns": step,
        "windows": [start for start, _ in spans],
        "bounds_ns": list(BOUNDS_NS),
        "nodes": nodes(totals, whole, seconds),
        "edges": edges,
    }


def nodes(
    edges: Mapping[EdgeKey, Edge], groups: Mapping[SpanGroup, Counts], seconds: float
) -> list[dict[str, Any]]:
    """Every node of the edges, with what it was asked (calls_in), what it asked (calls_out)
    and, for a service with server spans, what those spans saw (served: the server's view of
    every request it answered, observed clients or not)."""
    empty = no_counts(BOUNDS_NS)
    calls_in: dict[str, Counts] = {}
    calls_out: dict[str, Counts] = {}
    protocols: dict[str, set[str]] = {}
    kinds: dict[str, str] = {}
    for key, edge in sorted(edges.items()):
        calls_out[key.client] = calls_out.get(key.client, empty) + edge.counts
        calls_in[key.server] = calls_in.get(key.server, empty) + edge.counts
        for name in (key.client, key.server):
            protocols.setdefault(name, set()).add(key.protocol)
        kinds[key.client] = NODE_UNOBSERVED if key.client == UNOBSERVED else NODE_SERVICE
        # A peer's name ("redis 127.0.0.1:6379") is made by (c) only; a service stays one.
        if kinds.get(key.server) != NODE_SERVICE:
            kinds[key.server] = NODE_PEER if BY_PEER in edge.how else NODE_SERVICE
    served: dict[str, Counts] = {}
    for group in sorted(groups, key=group_order):
        if group.side == SERVER:
            name = service_name(group.service)
            served[name] = served.get(name, empty) + groups[group]
    return [
        {
            "id": name,
            "type": kinds[name],
            "protocols": sorted(protocols[name]),
            "calls_in": stats(calls_in.get(name, empty), seconds),
            "calls_out": stats(calls_out.get(name, empty), seconds),
            "served": stats(served[name], seconds) if name in served else None,
        }
        for name in sorted(kinds)
    ]


# --- the API --------------------------------------------------------------------------------


def parse_map_query(query_string: str, now_ns: int) -> tuple[int, int, int]:
    """?from=&to=&step= (ns since the epoch, ns) -> (from, to, step); to defaults to now_ns,
    from to 15 minutes before to, step to 0 (default_step). ValueError names the bad one."""
    try:
        pairs = parse_qs(query_string, keep_blank_values=True, strict_parsing=bool(query_string))
    except ValueError:
        raise ValueError(f"malformed query string {query_string!r}") from None
    params = {k: v[-1] for k, v in pairs.items()}
    unknown = sorted(set(params) - set(MAP_PARAMS))
    if unknown:
        raise ValueError(f"unknown query parameter {unknown[0]!r}; known: from, to, step")
    values: dict[str, int] = {}
    for name in MAP_PARAMS:
        try:
            values[name] = int(params.get(name) or 0)
        except ValueError:
            raise ValueError(f"query parameter {name!r} must be an integer (ns)") from None
    to_ns = values["to"] or now_ns
    return values["from"] or to_ns - DEFAULT_RANGE_NS, to_ns, values["step"]


def answer(store: Store, query_string: str, now_ns: int) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of GET /api/v1/services/map: 400 with one line for a bad
    parameter, 503 when the store cannot answer."""
    try:
        return 200, service_map(store, *parse_map_query(query_string, now_ns))
    except ValueError as exc:
        return 400, {"error": str(exc)}
    except ZerotraceError as exc:
        return 503, {"error": str(exc)}
