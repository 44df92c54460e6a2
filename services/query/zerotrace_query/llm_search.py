"""The LLM request queries both APIs answer with (pure over the store port): filters, one
store query each, then llm_stats in Python, so DuckDB and OpenSearch give the same answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zerotrace.store import Query, Store
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query import llm_stats
from zerotrace_query.documents import LLM_REQUESTS, LLM_STATUS_ERROR, LLM_STATUS_OK

DEFAULT_LIST_LIMIT = 100
# Statistics read at most this many requests (the store's own ceiling); the response says when
# more matched, and from when on its buckets are complete.
DEFAULT_STATS_LIMIT = MAX_LIMIT
DEFAULT_BUCKET_NS = 10 * llm_stats.NS_PER_S
STATUSES = ("", LLM_STATUS_OK, LLM_STATUS_ERROR)
MAX_NS = 2**63 - 1  # the stores' `long`


@dataclass(frozen=True)
class LlmFilter:
    """Which requests: every set field must match. Times are ns since the epoch, 0 for open;
    a request matches [from, to) by its start, or (concurrency) by overlapping it."""

    model: str = ""
    service: str = ""
    status: str = ""  # "", "ok" or "error"
    start_ns_from: int = 0
    start_ns_to: int = 0
    limit: int = DEFAULT_LIST_LIMIT
    bucket_ns: int = 0  # statistics only; 0: a round width for about 60 buckets

    def check(self) -> LlmFilter:
        """Itself, or ValueError naming the bad parameter as the APIs spell it."""
        if self.status not in STATUSES:
            raise ValueError("'status' must be 'ok' or 'error'")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise ValueError(f"'limit' must be between 1 and {MAX_LIMIT}")
        for name, value in (("from", self.start_ns_from), ("to", self.start_ns_to)):
            if not 0 <= value <= MAX_NS:
                raise ValueError(f"'{name}' is ns since the epoch: between 0 and {MAX_NS}")
        if self.start_ns_from and self.start_ns_to and self.start_ns_to <= self.start_ns_from:
            raise ValueError("'to' must be after 'from'")
        if self.bucket_ns < 0:
            raise ValueError("'bucket_s' must be positive")
        return self

    def equals(self) -> dict[str, str | int | float | bool]:
        pairs = (("model", self.model), ("service", self.service), ("status", self.status))
        return {name: value for name, value in pairs if value}


def _store_query(flt: LlmFilter, overlapping: bool = False) -> Query:
    ranges: dict[str, tuple[int | float | None, int | float | None]] = {}
    low, high = flt.start_ns_from or None, flt.start_ns_to or None
    if overlapping:  # start < to and end > from: in flight at some time of the window
        if high is not None:
            ranges["start_ns"] = (None, high)
        if low is not None:
            ranges["end_ns"] = (low + 1, None)
    elif low is not None or high is not None:
        ranges["start_ns"] = (low, high)
    return Query(
        equals=flt.equals(), ranges=ranges, sort="start_ns", descending=True, limit=flt.limit
    )


def _fetch(store: Store, query: Query) -> tuple[list[dict[str, Any]], int]:
    """Matching documents (newest first, at most query.limit) and how many matched in all."""
    docs = store.search(LLM_REQUESTS.name, query)
    total = store.count(LLM_REQUESTS.name, query) if len(docs) >= query.limit else len(docs)
    return docs, total


def _coverage(docs: list[dict[str, Any]], total: int, limit: int) -> dict[str, Any]:
    out: dict[str, Any] = {"count": len(docs), "total": total, "limit": limit}
    out["truncated"] = total > len(docs)
    if out["truncated"]:
        oldest = min(int(d["start_ns"]) for d in docs) if docs else 0
        out["complete_from_ns"] = oldest
        out["warning"] = (
            f"{total} requests matched; only the newest {len(docs)} were used (limit {limit}):"
            " narrow the time range or the filters for complete figures before"
            " complete_from_ns"
        )
    return out


def list_llm_requests(store: Store, flt: LlmFilter) -> dict[str, Any]:
    """{"requests": newest first, "count", "total", "limit", "truncated"[, "warning", ...]}."""
    docs, total = _fetch(store, _store_query(flt.check()))
    return {"requests": docs, **_coverage(docs, total, flt.limit)}


def _window(flt: LlmFilter, docs: list[dict[str, Any]]) -> llm_stats.Window | None:
    low, high = flt.start_ns_from or None, flt.start_ns_to or None
    bucket_ns = flt.bucket_ns
    if not bucket_ns:
        if low is not None and high is not None:
            bucket_ns = llm_stats.auto_bucket_ns(high - low)
        elif docs:
            first = min(int(d["start_ns"]) for d in docs)
            last = max(int(d["end_ns"]) for d in docs)
            bucket_ns = llm_stats.auto_bucket_ns(max((high or last) - (low or first), 1))
        else:
            bucket_ns = DEFAULT_BUCKET_NS
    return llm_stats.window_for(docs, bucket_ns, low, high)


def _stats_head(flt: LlmFilter, window: llm_stats.Window | None) -> dict[str, Any]:
    return {
        "bucket_ns": window.bucket_ns if window else flt.bucket_ns or DEFAULT_BUCKET_NS,
        "from_ns": window.first_ns if window else flt.start_ns_from,
        "to_ns": window.end_ns if window else flt.start_ns_to,
    }


def llm_percentiles(store: Store, flt: LlmFilter) -> dict[str, Any]:
    """Per (model, service) series of latency percentiles, counts and throughput per bucket
    (llm_stats.latency_series), over requests started in [from, to)."""
    docs, total = _fetch(store, _store_query(flt.check()))
    window = _window(flt, docs)
    series = llm_stats.latency_series(docs, window) if window else []
    return {**_stats_head(flt, window), **_coverage(docs, total, flt.limit), "series": series}


def llm_concurrency(store: Store, flt: LlmFilter) -> dict[str, Any]:
    """Per (model, service) series of requests in flight per bucket (max and mean), over
    requests that overlap [from, to), so one started before `from` still counts."""
    docs, total = _fetch(store, _store_query(flt.check(), overlapping=True))
    window = _window(flt, docs)
    series = llm_stats.concurrency_series(docs, window) if window else []
    return {**_stats_head(flt, window), **_coverage(docs, total, flt.limit), "series": series}
