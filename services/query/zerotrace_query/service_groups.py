"""Client and server spans counted per group inside the store (pure over the store port): the
unit the service map (service_map.py) reasons about.

A group is the spans of one node's service, one protocol, one side (client or server) and one
peer address: a client group is one process calling one address ("gateway on node-0 calls
redis at 127.0.0.1:6379"), a server group one process answering on one listening address.
One Store.histogram call, grouped by GROUP_BY (documents.SPANS keeps the server.address and
server.port attributes as searchable fields for it), counts a time range's spans into
duration buckets per group; no span document leaves the store. Spans of other kinds
("file.open") are not in any group.

Percentiles come from the bucket counts as Prometheus's histogram_quantile reads them: rank =
q * count, the first bucket whose cumulative count reaches the rank, and linear interpolation
between its lower bound (0 for the first) and its upper bound, rounded to whole ns; a rank in
the overflow bucket reads as the last bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from zerotrace import names
from zerotrace.store import GroupKey, Query, Store
from zerotrace_query.documents import SPANS
from zerotrace_query.span_search import STATUS_ERROR

CLIENT = "client"  # the last part of a client span's kind: "redis.client"
SERVER = "server"
GROUP_BY = ("node_id", "service", "kind", "server_address", "server_port", "status")


class SpanGroup(NamedTuple):
    """Spans of one node's service, one protocol and side, one peer address (as stored)."""

    node: str
    service: str
    protocol: str
    side: str  # CLIENT or SERVER
    address: str | None
    port: int | None

    @property
    def kind(self) -> str:
        return names.protocol_span_kind(self.protocol, self.side)


@dataclass(frozen=True)
class Counts:
    """Spans counted into BOUNDS-like buckets: cumulative[i] have a duration <= bounds[i]."""

    cumulative: tuple[int, ...]
    count: int
    errors: int
    total_ns: float

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
            self.count + other.count,
            self.errors + other.errors,
            self.total_ns + other.total_ns,
        )


def group_order(group: SpanGroup) -> tuple[object, ...]:
    """A sort key for groups (a missing address or port sorts first, no None compared)."""
    g = group
    return (g.node, g.service, g.protocol, g.side, g.address or "", g.port or 0, g.port is None)


def no_counts(bounds: Sequence[float]) -> Counts:
    return Counts((0,) * len(bounds), 0, 0, 0.0)


def parse_kind(kind: str | int | None) -> tuple[str, str] | None:
    """(protocol, side) of a client or server span kind; None for any other ("file.open")."""
    if not isinstance(kind, str) or "." not in kind:
        return None
    protocol, side = kind.rsplit(".", 1)
    return (protocol, side) if side in (CLIENT, SERVER) and protocol else None


def read_groups(
    store: Store, start_ns: int | None, end_ns: int | None, bounds: Sequence[float]
) -> dict[SpanGroup, Counts]:
    """Client and server spans starting in [start_ns, end_ns) (None: open), counted per group
    inside the store (one histogram call)."""
    query = Query(ranges={"start_ns": (start_ns, end_ns)})
    found = store.histogram(SPANS.name, query, "duration_ns", bounds, GROUP_BY)
    groups: dict[SpanGroup, Counts] = {}
    for key in sorted(found, key=_key_order):
        node, service, kind, address, port, status = key
        parsed = parse_kind(kind)
        if parsed is None:
            continue
        h = found[key]
        group = SpanGroup(
            str(node or ""),
            str(service or ""),
            *parsed,
            None if address is None else str(address),
            port if isinstance(port, int) else None,
        )
        counts = Counts(h.cumulative, h.count, h.count if status == STATUS_ERROR else 0, h.total)
        groups[group] = groups[group] + counts if group in groups else counts
    return groups


def _key_order(key: GroupKey) -> tuple[tuple[bool, str], ...]:
    # Groups merge in one order whatever order the store answered in (double sums).
    return tuple((v is None, str(v)) for v in key)


def merge(parts: Iterable[Mapping[SpanGroup, Counts]]) -> dict[SpanGroup, Counts]:
    out: dict[SpanGroup, Counts] = {}
    for part in parts:
        for group, counts in part.items():
            out[group] = out[group] + counts if group in out else counts
    return out


def percentile_ns(counts: Counts, bounds: Sequence[float], q: float) -> int | None:
    """The q-th percentile (0 < q < 100) read from the buckets (module doc); None without
    spans."""
    if counts.count == 0:
        return None
    rank = q / 100 * counts.count
    below, low = 0, 0.0
    for bound, cumulative in zip(bounds, counts.cumulative, strict=True):
        if cumulative >= rank:
            return round(low + (bound - low) * (rank - below) / (cumulative - below))
        below, low = cumulative, float(bound)
    return round(bounds[-1])
