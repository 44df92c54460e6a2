"""The GPU and RDMA device answers (pure over the store port): the devices seen, one device's
windows over time, and the GPU events (XIDs) of a time range.

A device window (profiler-agg's device windows, documents.DEVICE_WINDOWS) is one series over
one window: a GPU, an RDMA port's counters (source SYSFS), a process's queue pair counter set
(RDMA_STATISTIC, with its pid and the kernel's counter set id, counter_id) or a RoCE flow seen
in packets (PACKETS, with its flow label).
A series is told apart by SERIES_FIELDS; its metrics, counters, events and processes are stored,
not searched, and come back as stored.

- `GET /api/v1/gpu/devices`, `/api/v1/rdma/ports`: each series with windows in [from, to)
  (all time without them): its newest window's identity, the last value of each metric and
  counter, what it does not support, and how many windows and events it had in the range.
- `GET /api/v1/gpu/windows`, `/api/v1/rdma/windows`: the windows matching the filters that
  start in [from, to), oldest first: the newest `limit` of them when more matched.
- `GET /api/v1/gpu/events`: the events of the GPU windows in [from, to), newest first.

Bounded work: the device list is one Store.histogram (the series and their window and event
counts, the store aggregating), one search for the newest windows (twice as many as there are
series: a series still reporting has its newest window among them), then one search per
series not found there (one that stopped reporting earlier), at most `limit` series. Windows
and events read at most `limit` documents. Every answer says when it was cut (`truncated`,
with the total and a `warning`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs

from zerotrace.errors import ZerotraceError
from zerotrace.store import GroupKey, Query, Store
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query.documents import DEVICE_WINDOWS

KIND_GPU = "gpu"
KIND_RDMA = "rdma"
RDMA_SOURCES = ("SYSFS", "RDMA_STATISTIC", "PACKETS")
# What tells one series from another within a kind, in this order (a GPU needs only its UUID;
# an RDMA port its node, device and port; a counter set also its pid and counter set id (two
# sets of one pid, or the kernel's sets without one, stay apart), a flow its label).
SERIES_FIELDS = ("node_id", "device", "device_index", "source", "flow", "pid", "counter_id")
# The identity a listed series keeps from its newest window.
IDENTITY_FIELDS = (
    "kind",
    "node_id",
    "vendor",
    "model",
    "device",
    "device_index",
    "source",
    "flow",
    "pid",
    "counter_id",
    "process_name",
    "driver_version",
)

DEVICES_PATHS = {KIND_GPU: "/api/v1/gpu/devices", KIND_RDMA: "/api/v1/rdma/ports"}
WINDOWS_PATHS = {KIND_GPU: "/api/v1/gpu/windows", KIND_RDMA: "/api/v1/rdma/windows"}
EVENTS_PATH = "/api/v1/gpu/events"
ROUTES: dict[str, tuple[str, str]] = {
    **{path: (kind, "list") for kind, path in DEVICES_PATHS.items()},
    **{path: (kind, "windows") for kind, path in WINDOWS_PATHS.items()},
    EVENTS_PATH: (KIND_GPU, "events"),
}
# (default, maximum) of `limit` per answer. A 5 s window makes 720 an hour of one device.
LIMITS = {"list": (200, 1_000), "windows": (720, MAX_LIMIT), "events": (100, 1_000)}
PARAMS = {
    KIND_GPU: frozenset({"node", "device", "from", "to", "limit"}),
    KIND_RDMA: frozenset(
        {"node", "device", "port", "source", "flow", "pid", "counter_id", "from", "to", "limit"}
    ),
}


@dataclass(frozen=True)
class DeviceFilter:
    kind: str  # KIND_GPU or KIND_RDMA
    node: str = ""
    device: str = ""  # a GPU's UUID, an RDMA device's name ("" for a flow)
    port: int | None = None  # an RDMA port (the document's device_index)
    source: str = ""  # RDMA: SYSFS, RDMA_STATISTIC or PACKETS
    flow: str = ""
    pid: int = 0
    counter_id: int | None = None  # RDMA_STATISTIC: the kernel's counter set id
    start_ns_from: int = 0
    start_ns_to: int = 0  # 0: open
    limit: int = 0  # 0: the answer's default

    def check(self) -> DeviceFilter:
        """This filter, unchanged; ValueError names the bad field."""
        if self.kind not in (KIND_GPU, KIND_RDMA):
            raise ValueError(f"'kind' must be {KIND_GPU} or {KIND_RDMA}")
        if self.source and self.source not in RDMA_SOURCES:
            raise ValueError(f"'source' must be one of {', '.join(RDMA_SOURCES)}")
        if self.start_ns_from < 0 or self.start_ns_to < 0:
            raise ValueError("'from' and 'to' must not be negative")
        if self.start_ns_to and self.start_ns_to <= self.start_ns_from:
            raise ValueError("'to' must be after 'from'")
        ids = (self.port, self.counter_id)
        if self.limit < 0 or self.pid < 0 or any(i is not None and i < 0 for i in ids):
            raise ValueError("'limit', 'port', 'pid' and 'counter_id' must not be negative")
        return self

    def query(self, limit: int, descending: bool = True) -> Query:
        """The windows of this filter starting in [from, to), by start."""
        equals: dict[str, str | int | float | bool] = {"kind": self.kind}
        pairs = (("node_id", self.node), ("device", self.device), ("source", self.source))
        equals.update((name, value) for name, value in pairs if value)
        if self.flow:
            equals["flow"] = self.flow
        if self.port is not None:
            equals["device_index"] = self.port
        if self.pid:
            equals["pid"] = self.pid
        if self.counter_id is not None:
            equals["counter_id"] = self.counter_id
        ranges: dict[str, tuple[int | float | None, int | float | None]] = {}
        if self.start_ns_from or self.start_ns_to:
            ranges["window_start_ns"] = (self.start_ns_from or None, self.start_ns_to or None)
        return Query(
            equals=equals,
            ranges=ranges,
            sort="window_start_ns",
            descending=descending,
            limit=limit,
        )


def _limit(flt: DeviceFilter, answer: str) -> int:
    default, maximum = LIMITS[answer]
    limit = flt.limit or default
    if limit > maximum:
        raise ValueError(f"'limit' must be between 1 and {maximum}")
    return limit


def _key(doc: Mapping[str, Any]) -> GroupKey:
    return tuple(doc.get(name) for name in SERIES_FIELDS)


def _order(key: GroupKey) -> tuple[str, ...]:
    """Series in a stable order: node, then device, port, source, flow, pid, counter set id
    (None first)."""
    return tuple("" if v is None else f"{v:>20}" if isinstance(v, int) else v for v in key)


def last_values(doc: Mapping[str, Any], part: str) -> dict[str, Any]:
    """{name: last} of a window's metrics or counters."""
    values = doc.get(part) or {}
    return {name: values[name].get("last") for name in sorted(values)}


def series_summary(doc: Mapping[str, Any], windows: int, events: int) -> dict[str, Any]:
    """One listed series: its newest window's identity and last values, and its counts."""
    out = {name: doc.get(name) for name in IDENTITY_FIELDS}
    out.update(
        last_window_start_ns=doc.get("window_start_ns"),
        last_window_end_ns=doc.get("window_end_ns"),
        windows=windows,
        event_count=events,
        metrics=last_values(doc, "metrics"),
        counters=last_values(doc, "counters"),
        unsupported=list(doc.get("unsupported") or []),
        failed=list(doc.get("failed") or []),
    )
    if doc.get("kind") == KIND_GPU:
        out["clocks_event_reason_names"] = list(doc.get("clocks_event_reason_names") or [])
        out["processes"] = list(doc.get("processes") or [])
    return out


def latest_windows(
    store: Store, flt: DeviceFilter, limit: int
) -> tuple[list[tuple[dict[str, Any], int, int]], int]:
    """([(newest window, windows, events)] of at most `limit` series in series order, how many
    series matched in all). ConfigError (from the store) past MAX_LIMIT series: filter more."""
    base = flt.query(0)
    groups = store.histogram(DEVICE_WINDOWS.name, base, "window_start_ns", [0], SERIES_FIELDS)
    events = store.histogram(DEVICE_WINDOWS.name, base, "event_count", [0], SERIES_FIELDS)
    keys = sorted(groups, key=_order)[:limit]
    newest: dict[GroupKey, dict[str, Any]] = {}
    if keys:
        page = flt.query(min(2 * len(groups), MAX_LIMIT))
        for found in store.search(DEVICE_WINDOWS.name, page):
            newest.setdefault(_key(found), found)
    out = []
    for key in keys:
        if key not in newest:  # silent for a while: its own newest window
            own = _newest_of(store, base, key)
            if own is None:  # removed meanwhile (retention)
                continue
            newest[key] = own
        doc = newest[key]
        event_sum = events[key].total if key in events else 0.0
        out.append((doc, groups[key].count, round(event_sum)))
    return out, len(groups)


def _newest_of(store: Store, base: Query, key: GroupKey) -> dict[str, Any] | None:
    """The newest window of one series. A field the series lacks (None in its key) cannot be
    an equals filter, so windows of other series that have it (another pid, a named counter
    set) also match: the first search takes one window and keeps it when its key is the
    series'; otherwise a second reads the newest MAX_LIMIT and keeps the first of the series
    (None when the series is not among them either: too many newer windows of the others)."""
    equals = dict(base.equals)
    equals.update((n, v) for n, v in zip(SERIES_FIELDS, key, strict=True) if v is not None)
    for limit in (1, MAX_LIMIT) if None in key else (1,):
        found = store.search(DEVICE_WINDOWS.name, replace(base, equals=equals, limit=limit))
        mine = next((doc for doc in found if _key(doc) == key), None)
        if mine is not None or len(found) < limit:
            return mine
    return None


def device_list(store: Store, flt: DeviceFilter) -> dict[str, Any]:
    """{kind, from_ns, to_ns, devices: [series_summary], count, total, truncated[, warning]}."""
    limit = _limit(flt, "list")
    found, total = latest_windows(store, flt, limit)
    devices = [series_summary(doc, windows, events) for doc, windows, events in found]
    return _cut(
        {
            "kind": flt.kind,
            "from_ns": flt.start_ns_from,
            "to_ns": flt.start_ns_to,
            "devices": devices,
            "count": len(devices),
            "total": total,
        },
        total > len(devices),
        f"{total} series matched; only the first {len(devices)} are listed: filter by node",
    )


def device_windows(store: Store, flt: DeviceFilter) -> dict[str, Any]:
    """{kind, from_ns, to_ns, windows (oldest first), count, total, unsupported (the union
    over the windows), truncated[, warning]}: the newest `limit` windows when more matched."""
    query = flt.query(_limit(flt, "windows"))
    docs = store.search(DEVICE_WINDOWS.name, query)
    total = store.count(DEVICE_WINDOWS.name, query) if len(docs) >= query.limit else len(docs)
    windows = [{k: v for k, v in doc.items() if k != "_id"} for doc in reversed(docs)]
    unsupported = sorted({name for w in windows for name in w.get("unsupported") or []})
    return _cut(
        {
            "kind": flt.kind,
            "from_ns": flt.start_ns_from,
            "to_ns": flt.start_ns_to,
            "windows": windows,
            "count": len(windows),
            "total": total,
            "unsupported": unsupported,
        },
        total > len(windows),
        f"{total} windows matched; only the newest {len(windows)} are here:"
        " narrow the time range or the filters",
    )


def device_events(store: Store, flt: DeviceFilter) -> dict[str, Any]:
    """{kind, from_ns, to_ns, events (newest first), count, total, truncated[, warning]}: each
    event with its device (node, UUID, index, model) and window. Read from the newest `limit`
    windows that have events; `total` counts the events of every matching window (the store
    sums their event_count when the windows read were not all)."""
    limit = _limit(flt, "events")
    base = flt.query(limit)
    query = Query(
        equals=base.equals,
        ranges={**base.ranges, "event_count": (1, None)},
        sort=base.sort,
        descending=True,
        limit=limit,
    )
    docs = store.search(DEVICE_WINDOWS.name, query)
    windows_total = store.count(DEVICE_WINDOWS.name, query) if len(docs) >= limit else len(docs)
    events = [event_of(doc, e) for doc in docs for e in doc.get("events") or []]
    events.sort(key=lambda e: (-int(e["ts_ns"]), e["device"] or "", e["code"]))
    total = len(events)
    if windows_total > len(docs):
        summed = store.histogram(DEVICE_WINDOWS.name, query, "event_count", [0])
        total = max(total, round(sum(h.total for h in summed.values())))
    events = events[:limit]
    return _cut(
        {
            "kind": flt.kind,
            "from_ns": flt.start_ns_from,
            "to_ns": flt.start_ns_to,
            "events": events,
            "count": len(events),
            "total": total,
        },
        total > len(events),
        f"{total} events in this range; only the newest {len(events)} are here:"
        " narrow the time range or the filters",
    )


def event_of(doc: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "ts_ns": event.get("ts_ns"),
        "kind": event.get("kind"),
        "code": event.get("code"),
        "node_id": doc.get("node_id"),
        "device": doc.get("device"),
        "device_index": doc.get("device_index"),
        "model": doc.get("model"),
        "window_id": doc.get("window_id"),
    }


def _cut(body: dict[str, Any], truncated: bool, warning: str) -> dict[str, Any]:
    body["truncated"] = truncated
    if truncated:
        body["warning"] = warning
    return body


def parse_device_query(query_string: str, kind: str) -> DeviceFilter:
    """?node=&device=&from=&to=&limit= (RDMA also port=&source=&flow=&pid=&counter_id=) ->
    DeviceFilter
    (checked); ValueError names the bad parameter. from/to: ns since the epoch."""
    try:
        pairs = parse_qs(query_string, keep_blank_values=True, strict_parsing=bool(query_string))
    except ValueError:
        raise ValueError(f"malformed query string {query_string!r}") from None
    params = {k: v[-1] for k, v in pairs.items()}
    allowed = PARAMS[kind]
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(
            f"unknown query parameter {unknown[0]!r}; known: {', '.join(sorted(allowed))}"
        )

    def integer(name: str) -> int | None:
        text = params.get(name, "")
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"query parameter {name!r} must be an integer") from None

    return DeviceFilter(
        kind=kind,
        node=params.get("node", ""),
        device=params.get("device", ""),
        port=integer("port"),
        source=params.get("source", ""),
        flow=params.get("flow", ""),
        pid=integer("pid") or 0,
        counter_id=integer("counter_id"),
        start_ns_from=integer("from") or 0,
        start_ns_to=integer("to") or 0,
        limit=integer("limit") or 0,
    ).check()


ANSWERS = {"list": device_list, "windows": device_windows, "events": device_events}


def answer(store: Store, path: str, query_string: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of a route in ROUTES: 400 with one line for a bad parameter,
    503 when the store cannot answer (or more series match than it groups: filter by node)."""
    kind, name = ROUTES[path]
    try:
        return 200, ANSWERS[name](store, parse_device_query(query_string, kind))
    except ValueError as exc:
        return 400, {"error": str(exc)}
    except ZerotraceError as exc:
        return 503, {"error": str(exc)}
