"""The trace view's two answers (pure over the store port): one whole trace, and the traces
whose spans match a search.

- `GET /api/v1/traces/{id}`: the trace holding this trace id or span id, as
  trace_trees.trace puts it together, its spans in tree order (each parent before its
  children, siblings by start) with their depth, duration and parts (`span_parts`).
- `GET /api/v1/traces?service=&operation=&min_duration=&max_duration=&error=&from=&to=&limit=`:
  a trace is found by one of its spans that matches every filter (as Jaeger's search):
  service and operation (the span's name) exactly, the span's own duration in
  [min_duration, max_duration), error=true a span that failed and error=false one that did
  not, its start in [from, to). So a trace found with error=false may still hold another span
  that failed, and says so (`error`). Durations are ns, or a number with a unit (250ms, 1.5s);
  from/to are ns since the epoch.

Bounded work: one store search reads the newest matching spans, at most SCAN_PER_TRACE per
trace asked for and MAX_SCAN in all; then, newest first, each span not already in a trace read
before is put into its trace (trace_trees.trace, itself bounded by its MAX_ROUNDS and
MAX_SPANS), until `limit` distinct traces are found or 2 * `limit` traces were read (only a
trace cut short by trace_trees can be read twice). Traces are deduplicated by trace id and
listed newest first (by their first span's start). `more` says the answer may have left
matching traces out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs, unquote

from zerotrace import names
from zerotrace.errors import ZerotraceError
from zerotrace.store import Query, Store
from zerotrace_query.documents import SPANS
from zerotrace_query.span_search import STATUS_ERROR, STATUSES, SpanFilter, span_query
from zerotrace_query.trace_trees import trace

TRACES_PATH = "/api/v1/traces"
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
# Matching spans read per trace asked for: a span of a trace already read costs nothing more,
# so a search whose spans are several to a trace (a gateway's calls) still fills its page.
SCAN_PER_TRACE = 10
MAX_SCAN = 1_000
TRACE_PARAMS = frozenset(
    {"service", "operation", "min_duration", "max_duration", "error", "from", "to", "limit"}
)
_ID = re.compile(r"[0-9A-Za-z_.:-]{1,128}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}

# Where a span's time went (zerotrace_correlator/span_timings.py), as the waterfall draws it:
# (part, attribute). Connection set-up came before the request's first byte, the span's start;
# the exchange's phases follow each other from the start; file I/O is the calls' own time
# summed, not where in the span it happened.
SETUP_PARTS = (
    (names.PROTOCOL_DNS, names.ATTR_DNS_DURATION),  # its DNS spans for the peer's name
    ("connect", names.ATTR_CONNECT_DURATION),
    ("tls", names.ATTR_TLS_HANDSHAKE_DURATION),
)
EXCHANGE_PARTS = (
    ("send", names.ATTR_REQUEST_SEND_DURATION),
    ("server", names.ATTR_SERVER_DURATION),
    ("transfer", names.ATTR_RESPONSE_TRANSFER_DURATION),
)
FILE_PARTS = (
    ("file_read", names.ATTR_FILE_READ_DURATION),
    ("file_write", names.ATTR_FILE_WRITE_DURATION),
)


@dataclass(frozen=True)
class TraceFilter:
    service: str = ""
    operation: str = ""  # the span's name, exactly: "GET /orders", "SELECT orders"
    # The matching span's duration, ns: min_duration_ns <= end - start < max_duration_ns; 0: none.
    min_duration_ns: int = 0
    max_duration_ns: int = 0
    error: bool | None = None  # None: either
    start_ns_from: int = 0
    start_ns_to: int = 0
    limit: int = DEFAULT_LIMIT

    def check(self) -> TraceFilter:
        """This filter, unchanged; ValueError names the bad field."""
        if not 1 <= self.limit <= MAX_LIMIT:
            raise ValueError(f"'limit' must be between 1 and {MAX_LIMIT}")
        if self.start_ns_from < 0 or self.start_ns_to < 0:
            raise ValueError("'from' and 'to' must not be negative")
        if self.start_ns_to and self.start_ns_to <= self.start_ns_from:
            raise ValueError("'to' must be after 'from'")
        if self.min_duration_ns < 0 or self.max_duration_ns < 0:
            raise ValueError("'min_duration' and 'max_duration' must not be negative")
        if self.max_duration_ns and self.max_duration_ns <= self.min_duration_ns:
            raise ValueError("'max_duration' must be above 'min_duration'")
        return self


def parse_duration(name: str, text: str) -> int:
    """ "" -> 0; "1500" (ns), "250ms", "1.5s", "20us" -> ns; ValueError names the parameter."""
    if not text:
        return 0
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"query parameter {name!r} must be a duration: ns, or 250ms, 1.5s")
    return round(float(found[1]) * _UNIT_NS[found[2] or "ns"])


def parse_trace_query(query_string: str) -> TraceFilter:
    """?service=&operation=&min_duration=&max_duration=&error=true|false&from=&to=&limit= ->
    TraceFilter (checked); ValueError names the bad parameter."""
    try:
        pairs = parse_qs(query_string, keep_blank_values=True, strict_parsing=bool(query_string))
    except ValueError:
        raise ValueError(f"malformed query string {query_string!r}") from None
    params = {k: v[-1] for k, v in pairs.items()}
    unknown = sorted(set(params) - TRACE_PARAMS)
    if unknown:
        raise ValueError(
            f"unknown query parameter {unknown[0]!r}; known: {', '.join(sorted(TRACE_PARAMS))}"
        )

    def integer(name: str, default: int) -> int:
        try:
            return int(params.get(name) or default)
        except ValueError:
            raise ValueError(f"query parameter {name!r} must be an integer") from None

    error = params.get("error", "").lower()
    if error not in ("", "true", "false"):
        raise ValueError("query parameter 'error' must be true or false")
    return TraceFilter(
        service=params.get("service", ""),
        operation=params.get("operation", ""),
        min_duration_ns=parse_duration("min_duration", params.get("min_duration", "")),
        max_duration_ns=parse_duration("max_duration", params.get("max_duration", "")),
        error=None if not error else error == "true",
        start_ns_from=integer("from", 0),
        start_ns_to=integer("to", 0),
        limit=integer("limit", DEFAULT_LIMIT),
    ).check()


def matching_span_queries(flt: TraceFilter) -> list[Query]:
    """The store queries of the spans that find traces, newest first, each reading at most
    the scan window; error=false is one query per status that is not an error."""
    base = span_query(
        SpanFilter(
            service=flt.service,
            start_ns_from=flt.start_ns_from,
            start_ns_to=flt.start_ns_to,
            min_duration_ns=flt.min_duration_ns,
            max_duration_ns=flt.max_duration_ns,
        )
    )
    equals = dict(base.equals)
    if flt.operation:
        equals["name"] = flt.operation
    base = replace(base, equals=equals, limit=min(flt.limit * SCAN_PER_TRACE, MAX_SCAN))
    if flt.error is None:
        return [base]
    statuses = [STATUS_ERROR] if flt.error else [s for s in STATUSES if s != STATUS_ERROR]
    return [replace(base, equals={**equals, "status": s}) for s in statuses]


def trace_page(store: Store, flt: TraceFilter) -> dict[str, Any]:
    """{"traces": [trace_summary, ...] newest first, "count", "spans_matched" (matching spans
    read), "more"}; see the module docstring for what is read."""
    queries = matching_span_queries(flt)
    window = queries[0].limit
    found: list[dict[str, Any]] = []
    for query in queries:
        found.extend(store.search(SPANS.name, query))
    found.sort(key=lambda s: (int(s["start_ns"]), str(s["span_id"])), reverse=True)
    candidates = found[:window]
    seen: set[str] = set()
    traces: dict[str, dict[str, Any]] = {}
    reads = 0
    more = len(found) >= window
    for span in candidates:
        if str(span["span_id"]) in seen:
            continue
        if len(traces) == flt.limit or reads == 2 * flt.limit:
            more = True
            break
        reads += 1
        spans = trace(store, str(span["span_id"]))
        seen.update(str(s["span_id"]) for s in spans)
        if spans:
            summary = trace_summary(spans)
            traces.setdefault(summary["trace_id"], summary)
    listed = sorted(traces.values(), key=lambda t: (t["start_ns"], t["trace_id"]), reverse=True)
    return {
        "traces": listed,
        "count": len(listed),
        "spans_matched": len(candidates),
        "more": more,
    }


def trace_summary(spans: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One line of the trace list, of linked spans (trace_trees.link's answer, not empty)."""
    root = next((s for s in spans if not s.get("parent_span_id")), spans[0])
    start = min(int(s["start_ns"]) for s in spans)
    end = max(int(s["end_ns"]) for s in spans)
    return {
        "trace_id": str(root["trace_id"]),
        "root": {
            "span_id": root["span_id"],
            "service": root.get("service"),
            "name": root.get("name"),
            "kind": root.get("kind"),
        },
        "start_ns": start,
        "end_ns": end,
        "duration_ns": end - start,
        "span_count": len(spans),
        "services": sorted({str(s["service"]) for s in spans if s.get("service")}),
        "error": any(s.get("status") == STATUS_ERROR for s in spans),
        "cut": (root.get("attributes") or {}).get(names.ATTR_TRACE_CUT) == "true",
    }


def trace_detail(store: Store, trace_or_span_id: str) -> dict[str, Any] | None:
    """The whole trace holding this trace id or span id: its summary and "spans" in tree order,
    each with "depth", "duration_ns" and "parts"; None when no span has the id."""
    spans = trace(store, trace_or_span_id)
    if not spans:
        return None
    ordered = []
    for depth, span in tree_order(spans):
        doc = {k: v for k, v in span.items() if k != "_id"}
        doc["depth"] = depth
        doc["duration_ns"] = int(span["end_ns"]) - int(span["start_ns"])
        doc["parts"] = span_parts(span.get("attributes") or {})
        ordered.append(doc)
    return {**trace_summary(spans), "spans": ordered}


def tree_order(spans: Sequence[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    """(depth, span) with each parent before its children, roots and siblings by start then
    span id. A span whose parent is not among the spans is a root. No recursion: a chain of
    trace_trees.MAX_SPANS spans is deeper than Python's stack."""
    by_start = sorted(spans, key=lambda s: (int(s["start_ns"]), str(s["span_id"])))
    ids = {str(s["span_id"]) for s in spans}
    children: dict[str, list[Mapping[str, Any]]] = {}
    roots = []
    for span in by_start:
        parent = span.get("parent_span_id")
        if parent and str(parent) in ids:
            children.setdefault(str(parent), []).append(span)
        else:
            roots.append(span)
    out: list[tuple[int, Mapping[str, Any]]] = []
    stack = [(0, span) for span in reversed(roots)]
    while stack:
        depth, span = stack.pop()
        out.append((depth, span))
        stack.extend((depth + 1, c) for c in reversed(children.get(str(span["span_id"]), [])))
    return out


def span_parts(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A span's parts, each {"part", "duration_ns", "offset_ns"} (offset from the span's
    start), from the span_timings attributes; a missing, zero or malformed one is left out.

    Connection set-up is laid end to end before the start (DNS, connect, TLS; the gaps
    between them are not measured), the exchange's phases end to end from it (send, server,
    transfer). File I/O ("summed": true) is the calls' own time added up, placed from the
    server phase (the handler's time, when the thread did its I/O) or from the start."""
    setup = [(part, _ns(attributes.get(key))) for part, key in SETUP_PARTS]
    setup = [(part, ns) for part, ns in setup if ns]
    offset = -sum(ns for _, ns in setup)
    parts: list[dict[str, Any]] = []
    for part, ns in setup:
        parts.append({"part": part, "duration_ns": ns, "offset_ns": offset})
        offset += ns
    file_offset = 0
    for part, key in EXCHANGE_PARTS:
        ns = _ns(attributes.get(key))
        if ns:
            if part == "server":
                file_offset = offset
            parts.append({"part": part, "duration_ns": ns, "offset_ns": offset})
            offset += ns
    for part, key in FILE_PARTS:
        ns = _ns(attributes.get(key))
        if ns:
            parts.append(
                {"part": part, "duration_ns": ns, "offset_ns": file_offset, "summed": True}
            )
            file_offset += ns
    return parts


def _ns(value: Any) -> int:
    try:
        ns = int(value)
    except (TypeError, ValueError):
        return 0
    return max(ns, 0)


def answer(store: Store, path: str, query_string: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of GET /api/v1/traces[/{id}]: 400 with one line for a bad
    parameter or id, 404 for an id no span has, 503 when the store cannot answer."""
    try:
        if path.rstrip("/") == TRACES_PATH:
            return 200, trace_page(store, parse_trace_query(query_string))
        trace_id = unquote(path[len(TRACES_PATH) + 1 :])
        if not _ID.fullmatch(trace_id):
            return 400, {"error": f"{trace_id!r} is not a trace id or span id"}
        if query_string:
            return 400, {"error": "GET /api/v1/traces/{id} takes no query parameters"}
        detail = trace_detail(store, trace_id)
    except ValueError as exc:
        return 400, {"error": str(exc)}
    except ZerotraceError as exc:
        return 503, {"error": str(exc)}
    if detail is None:
        return 404, {"error": f"no trace or span has the id {trace_id}"}
    return 200, detail
