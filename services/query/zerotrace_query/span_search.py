"""The one span search both APIs answer with (pure over the store port)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zerotrace.store import Query, Store
from zerotrace_query.documents import SPANS

MAX_LIMIT = 1000


@dataclass(frozen=True)
class SpanFilter:
    kind: str = ""
    service: str = ""
    pid: int = 0
    start_ns_from: int = 0
    start_ns_to: int = 0
    limit: int = 100


def search_spans(store: Store, flt: SpanFilter) -> list[dict[str, Any]]:
    equals: dict[str, str | int] = {}
    if flt.kind:
        equals["kind"] = flt.kind
    if flt.service:
        equals["service"] = flt.service
    if flt.pid:
        equals["pid"] = flt.pid
    ranges = {}
    if flt.start_ns_from or flt.start_ns_to:
        ranges["start_ns"] = (flt.start_ns_from or None, flt.start_ns_to or None)
    limit = min(max(flt.limit, 1), MAX_LIMIT) if flt.limit else 100
    query = Query(equals=equals, ranges=ranges, sort="start_ns", descending=True, limit=limit)
    return store.search(SPANS.name, query)
