"""The span search and the per-protocol latency histograms both APIs answer with (pure over
the store port). Every filter is a term of the store query, so the store applies it before it
sorts and limits: a page of spans is the newest of all matching spans, and a histogram counts
every matching span, not those of one page."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from zerotrace.store import Query, Store
from zerotrace_query.documents import SPANS
from zerotrace_query.span_stats import (
    BUCKETS,
    EDGES_NS,
    clip,
    kind_prefix,
    known_protocols,
    protocol_latency,
)

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
# A span's status, as the correlator writes it (exchange_records.py, proto_records.py).
STATUS_OK = "OK"
STATUS_ERROR = "ERROR"
STATUSES = (STATUS_OK, STATUS_ERROR, "UNSET")  # the derived span schema's SpanStatus
_PROTOCOL = re.compile(r"[a-z0-9][a-z0-9_.-]*")


@dataclass(frozen=True)
class SpanFilter:
    kind: str = ""
    service: str = ""
    pid: int = 0
    start_ns_from: int = 0
    start_ns_to: int = 0
    limit: int = DEFAULT_LIMIT
    # "redis": every kind "redis.*" (span_stats.protocol_of).
    protocol: str = ""
    status: str = ""  # "", "OK", "ERROR" or "UNSET" (any case)
    # Duration bounds, ns: min_duration_ns <= end - start < max_duration_ns; 0: no bound.
    min_duration_ns: int = 0
    max_duration_ns: int = 0

    def check(self) -> SpanFilter:
        """This filter with the status in capitals; ValueError names the bad field."""
        status = self.status.upper()
        if status not in ("", *STATUSES):
            raise ValueError(f"'status' must be one of {', '.join(STATUSES)}, not {self.status!r}")
        if self.protocol and not _PROTOCOL.fullmatch(self.protocol):
            raise ValueError(f"'protocol' {self.protocol!r} is not a protocol name")
        if self.min_duration_ns < 0 or self.max_duration_ns < 0:
            raise ValueError("'min_duration_ns' and 'max_duration_ns' must not be negative")
        if self.max_duration_ns and self.max_duration_ns <= self.min_duration_ns:
            raise ValueError("'max_duration_ns' must be above 'min_duration_ns'")
        return replace(self, status=status)


def span_query(flt: SpanFilter) -> Query:
    """The store query of a filter: newest first, the limit kept in 1..MAX_LIMIT."""
    equals: dict[str, str | int] = {}
    if flt.kind:
        equals["kind"] = flt.kind
    if flt.service:
        equals["service"] = flt.service
    if flt.pid:
        equals["pid"] = flt.pid
    if flt.status:
        equals["status"] = flt.status.upper()
    ranges: dict[str, tuple[int | float | None, int | float | None]] = {}
    if flt.start_ns_from or flt.start_ns_to:
        ranges["start_ns"] = (flt.start_ns_from or None, flt.start_ns_to or None)
    if flt.min_duration_ns or flt.max_duration_ns:
        ranges["duration_ns"] = (flt.min_duration_ns or None, flt.max_duration_ns or None)
    prefixes = {"kind": kind_prefix(flt.protocol)} if flt.protocol else {}
    limit = min(max(flt.limit, 1), MAX_LIMIT) if flt.limit else DEFAULT_LIMIT
    return Query(
        equals=equals,
        ranges=ranges,
        prefixes=prefixes,
        sort="start_ns",
        descending=True,
        limit=limit,
    )


def search_spans(store: Store, flt: SpanFilter) -> list[dict[str, Any]]:
    return store.search(SPANS.name, span_query(flt))


def span_page(store: Store, flt: SpanFilter) -> dict[str, Any]:
    """The newest matching spans, and how many match in all."""
    query = span_query(flt)
    spans = store.search(SPANS.name, query)
    total = len(spans) if len(spans) < query.limit else store.count(SPANS.name, query)
    return {"spans": spans, "count": len(spans), "total": total}


def span_histograms(store: Store, flt: SpanFilter) -> dict[str, Any]:
    """Latency histogram per protocol of the matching spans: {"edges_ns": [...], "protocols":
    [span_stats.protocol_latency, ...]} for each protocol with at least one matching span.

    The protocols are the filter's one, else every protocol zerotrace knows (a kind of another
    shape is not shown). Counts are store counts, one per bucket that the duration filter
    leaves, so they cover every matching span at the price of about 30 counts a protocol."""
    protocols = [flt.protocol] if flt.protocol else list(known_protocols())
    answer: list[dict[str, Any]] = []
    for protocol in protocols:
        base = span_query(replace(flt, protocol=protocol))
        total = store.count(SPANS.name, base)
        if total == 0:
            continue
        low, high = base.ranges.get("duration_ns", (None, None))
        counts = [0] * BUCKETS
        seen = 0
        for index in range(BUCKETS):
            if seen == total:
                break  # the rest are empty
            part = clip(index, _int(low), _int(high))
            if part is None:
                continue
            ranges = {**base.ranges, "duration_ns": part}
            counts[index] = store.count(SPANS.name, replace(base, ranges=ranges))
            seen += counts[index]
        errors = 0
        if flt.status != STATUS_OK:
            errors = store.count(
                SPANS.name, replace(base, equals={**base.equals, "status": STATUS_ERROR})
            )
        answer.append(protocol_latency(protocol, counts, errors))
    return {"edges_ns": list(EDGES_NS), "protocols": answer}


def _int(value: int | float | None) -> int | None:
    return None if value is None else int(value)
