"""The LLM request queries both APIs answer with (pure over the store port): filters, one
store query each, then llm_stats in Python, so DuckDB and OpenSearch give the same answers.

By default each request counts once though zerotrace saw it at both ends
(zerotrace_query/llm_observations.py): the trace links of the documents read are fetched in a
few bounded queries and each paired CLIENT document folds into its SERVER document. A filter
may ask for one observation point's records instead, or for every record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zerotrace.store import Query, Store
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query import llm_gpu_cost_store, llm_observations, llm_stats
from zerotrace_query.documents import LLM_REQUESTS, LLM_STATUS_ERROR, LLM_STATUS_OK, TRACE_EDGES

DEFAULT_LIST_LIMIT = 100
# Statistics read at most this many requests (the store's own ceiling); the response says when
# more matched, and from when on its buckets are complete.
DEFAULT_STATS_LIMIT = MAX_LIMIT
DEFAULT_BUCKET_NS = 10 * llm_stats.NS_PER_S
STATUSES = ("", LLM_STATUS_OK, LLM_STATUS_ERROR)
MAX_NS = 2**63 - 1  # the stores' `long`
# observation_point: "" each request once (the default), one point's records, or every record.
ONCE = ""
ALL_RECORDS = "all"
OBSERVATION_POINTS = (ONCE, *llm_observations.POINTS, ALL_RECORDS)
# The once view reads up to twice `limit` records (a request seen at both ends is two), so a
# listing of `limit` requests is full when every request was seen twice.
ONCE_READ_FACTOR = 2
# Pages of trace links read per pairing rule at most (each EDGE_PAGE_SIZE links): a time range
# busy with other traffic's links is read this far, and the answer says when pairing stopped.
MAX_EDGE_PAGES = 4
EDGE_PAGE_SIZE = MAX_LIMIT


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
    # "": each request once; "CLIENT", "SERVER", "NETWORK": that point's records; "all": all
    observation_point: str = ONCE

    def check(self) -> LlmFilter:
        """Itself, or ValueError naming the bad parameter as the APIs spell it."""
        if self.status not in STATUSES:
            raise ValueError("'status' must be 'ok' or 'error'")
        if self.observation_point not in OBSERVATION_POINTS:
            raise ValueError(
                "'observation_point' must be '' (each request once), 'CLIENT', 'SERVER',"
                " 'NETWORK' or 'all'"
            )
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
        point = self.observation_point if self.observation_point in llm_observations.POINTS else ""
        pairs = (
            ("model", self.model),
            ("service", self.service),
            ("status", self.status),
            ("observation_point", point),
        )
        return {name: value for name, value in pairs if value}

    @property
    def once(self) -> bool:
        return self.observation_point == ONCE


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
    limit = min(flt.limit * ONCE_READ_FACTOR, MAX_LIMIT) if flt.once else flt.limit
    return Query(equals=flt.equals(), ranges=ranges, sort="start_ns", descending=True, limit=limit)


def _fetch(store: Store, query: Query) -> tuple[list[dict[str, Any]], int]:
    """Matching documents (newest first, at most query.limit) and how many matched in all."""
    docs = store.search(LLM_REQUESTS.name, query)
    total = store.count(LLM_REQUESTS.name, query) if len(docs) >= query.limit else len(docs)
    return docs, total


def _coverage(docs: list[dict[str, Any]], total: int, limit: int) -> dict[str, Any]:
    out: dict[str, Any] = {"count": len(docs), "total": total, "limit": limit}
    out["counted"] = "records"
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


def _pair_links(store: Store, docs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """The pairing links (llm_observations.PAIR_RULES) whose child is a SERVER document among
    `docs`, and whether all were read. A link's ts_ns is its child's start, so they lie in the
    servers' start range: read by rule and that range, at most MAX_EDGE_PAGES pages each."""
    servers = [d for d in docs if d.get("observation_point") == llm_observations.SERVER]
    if not servers or not any(d.get("observation_point") == llm_observations.CLIENT for d in docs):
        return [], True  # nothing to pair: no query
    wanted = {str(d["span_id"]) for d in servers}
    first = min(int(d["start_ns"]) for d in servers)
    end = max(int(d["start_ns"]) for d in servers) + 1
    found: dict[str, dict[str, Any]] = {}
    complete = True
    for rule in llm_observations.PAIR_RULES:
        low = first
        for _ in range(MAX_EDGE_PAGES):
            query = Query(
                equals={"rule": rule},
                ranges={"ts_ns": (low, end)},
                sort="ts_ns",
                limit=EDGE_PAGE_SIZE,
            )
            page = store.search(TRACE_EDGES.name, query)
            found.update((str(e["_id"]), e) for e in page if str(e["child_span_id"]) in wanted)
            if len(page) < EDGE_PAGE_SIZE:
                break
            last = int(page[-1]["ts_ns"])
            # The next page starts at the last link's time (read again, kept once); a page all
            # at one time skips past it, and what it held beyond the page is not read.
            complete = complete and last > low
            low = last if last > low else last + 1
        else:
            complete = False
    return list(found.values()), complete


def _read(
    store: Store, flt: LlmFilter, overlapping: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The requests to answer with (newest first, at most flt.limit) and their coverage.

    "counted" says what "count" and "total" count: "records" (one observation point's, or
    all), or "requests" (the once view: each request once). In the once view "records" is how
    many records were read (up to twice the limit), "total_records" how many matched,
    "seen_at_both" how many of the counted requests were seen at both ends, "total" the
    records matched less the pairs found among those read (exact when all were read, else at
    most that), and "pairing_complete" false when the trace links were too many to read."""
    query = _store_query(flt.check(), overlapping)
    docs, total = _fetch(store, query)
    if not flt.once:
        return docs, _coverage(docs, total, flt.limit)
    links, complete = _pair_links(store, docs)
    folded = llm_observations.once(docs, links)
    requests = folded.requests[: flt.limit]
    total_requests = total - folded.seen_at_both
    out = _coverage(requests, total_requests, flt.limit)
    if out.get("warning") and total > len(docs):
        out["warning"] = "up to " + out["warning"]
    out["counted"] = "requests"
    out["seen_at_both"] = sum(1 for r in requests if r.get("also_seen_at"))
    out["records"] = len(docs)
    out["total_records"] = total
    out["pairing_complete"] = complete
    if not complete:
        note = (
            "more trace links than could be read in this time range: some requests seen at"
            " both ends may count twice; narrow the time range"
        )
        out["warning"] = f"{out['warning']}; {note}" if out.get("warning") else note
    return requests, out


def list_llm_requests(store: Store, flt: LlmFilter) -> dict[str, Any]:
    """{"requests": newest first, "count", "total", "limit", "counted", "truncated"[,
    "warning", ...]}; in the once view also "seen_at_both", "records", "total_records" and
    "pairing_complete" (see _read). Each request carries its GPU cost estimate
    (llm_gpu_cost_store: gpu_time_ns, gpu_launches, gpu_memory_byte_s, gpu_cost_method;
    null where its process had no GPU windows)."""
    docs, coverage = _read(store, flt)
    return {"requests": llm_gpu_cost_store.with_gpu_cost(store, docs), **coverage}


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
    (llm_stats.latency_series), over requests started in [from, to). In the once view a
    request seen at both ends counts once, with its server's service, start and timings."""
    docs, coverage = _read(store, flt)
    window = _window(flt, docs)
    series = llm_stats.latency_series(docs, window) if window else []
    return {**_stats_head(flt, window), **coverage, "series": series}


def llm_concurrency(store: Store, flt: LlmFilter) -> dict[str, Any]:
    """Per (model, service) series of requests in flight per bucket (max and mean), over
    requests that overlap [from, to), so one started before `from` still counts."""
    docs, coverage = _read(store, flt, overlapping=True)
    window = _window(flt, docs)
    series = llm_stats.concurrency_series(docs, window) if window else []
    return {**_stats_head(flt, window), **coverage, "series": series}
