"""The span search and per-protocol latency histograms both APIs answer with
(zerotrace_query/span_search.py), over the embedded store: each filter field narrows, times are
[from, to), newest first, the limit is kept between 1 and MAX_LIMIT, and every filter
(protocol, service, status, duration) is a term of the store query, so pages and histograms
cover all matching spans. `protocol_spans` and `fill_spans` serve the integration and browser
tests too."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, cast

import pytest

from zerotrace import names
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.store import Query, Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import SPANS
from zerotrace_query.indexer import Indexer
from zerotrace_query.span_search import (
    MAX_LIMIT,
    SpanFilter,
    search_spans,
    span_histograms,
    span_page,
    span_query,
)
from zerotrace_query.span_stats import BUCKETS, EDGES_NS, histogram, protocol_latency, protocol_of

pytestmark = pytest.mark.unit
MS = 1_000_000
# (protocol, side, service, names, median duration in ms, share of errors, attributes)
PROFILES: list[tuple[str, str, str, tuple[str, ...], float, float, dict[str, str]]] = [
    (
        names.PROTOCOL_REDIS,
        "client",
        "api",
        ("GET", "SET", "HGETALL"),
        0.25,
        0.05,
        {names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_REDIS},
    ),
    (
        names.PROTOCOL_REDIS,
        "server",
        "redis-server",
        ("GET", "SET"),
        0.04,
        0.05,
        {names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_REDIS},
    ),
    (
        names.PROTOCOL_POSTGRESQL,
        "client",
        "api",
        ("SELECT orders", "INSERT orders"),
        4.0,
        0.1,
        {names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_POSTGRESQL},
    ),
    (
        names.PROTOCOL_MYSQL,
        "client",
        "billing",
        ("SELECT invoices",),
        2.5,
        0.0,
        {names.ATTR_DB_SYSTEM_NAME: names.DB_SYSTEM_MYSQL},
    ),
    (
        names.PROTOCOL_GRPC,
        "client",
        "api",
        ("inventory.Stock/Get",),
        12.0,
        0.15,
        {names.ATTR_RPC_SYSTEM: names.PROTOCOL_GRPC},
    ),
    (
        "http",
        "server",
        "api",
        ("GET /orders", "POST /orders"),
        30.0,
        0.08,
        {names.ATTR_HTTP_METHOD: "GET"},
    ),
    (
        names.PROTOCOL_HTTP2,
        "client",
        "api",
        ("GET /v2/catalog",),
        8.0,
        0.0,
        {names.ATTR_NETWORK_PROTOCOL_VERSION: "2"},
    ),
    (
        names.PROTOCOL_DNS,
        "client",
        "api",
        ("A db.internal",),
        0.8,
        0.2,
        {names.ATTR_NETWORK_TRANSPORT: "udp"},
    ),
]


def protocol_spans(
    end_ns: int, count: int, seed: int = 1, span_s: int = 240
) -> list[dict[str, Any]]:
    """Derived span records of several protocols (the schema's shape), starting in the
    `span_s` seconds before end_ns, log-normal durations around each protocol's median."""
    rng = random.Random(seed)
    spans: list[dict[str, Any]] = []
    for i in range(count):
        protocol, side, service, labels, median_ms, errors, attrs = PROFILES[i % len(PROFILES)]
        start = end_ns - rng.randrange(1, span_s * 1_000_000) * 1000
        duration = max(1, int(median_ms * MS * rng.lognormvariate(0, 1.2)))
        spans.append(
            {
                "span_id": f"{seed:02x}{i:014x}",
                "trace_id": f"{seed:02x}{i:030x}",
                "parent_span_id": None,
                "node_id": f"node-{i % 2}",
                "pid": 100 + i % 5,
                "tid": 100 + i % 5,
                "process_name": service,
                "container_id": None,
                "service": service,
                "kind": names.protocol_span_kind(protocol, side),
                "name": rng.choice(labels),
                "start_ns": start,
                "end_ns": start + duration,
                "status": "ERROR" if rng.random() < errors else "OK",
                "attributes": dict(attrs),
                "source_event_ids": [],
            }
        )
    return spans


def fill_spans(store: Store, codec: AvroCodec, spans: Sequence[dict[str, Any]]) -> None:
    """Through the real path: Avro records on the in-process bus, the Indexer into the store."""
    broker = InMemoryBroker()
    broker.ensure_topics()
    producer = broker.producer()
    for span in spans:
        producer.produce(
            names.DERIVED_SPAN.name,
            span["trace_id"].encode(),
            codec.encode(names.DERIVED_SPAN.record, span),
        )
    indexer = Indexer(broker.consumer("spans"), broker.producer(), store, codec, ManualClock(7))
    while indexer.run_once(0.05):
        pass
    assert (indexer.indexed, indexer.dead_letters) == (len(spans), 0)


def span_codec() -> AvroCodec:
    return AvroCodec(load_schema_dir(), InMemorySchemaRegistry())


def matching(spans: Sequence[dict[str, Any]], flt: SpanFilter) -> list[dict[str, Any]]:
    """What the filter means, spelled out over the records: the reference the store must match."""
    found = []
    for s in spans:
        duration = s["end_ns"] - s["start_ns"]
        if (
            (not flt.protocol or protocol_of(s["kind"]) == flt.protocol)
            and (not flt.kind or s["kind"] == flt.kind)
            and (not flt.service or s["service"] == flt.service)
            and (not flt.status or s["status"] == flt.status.upper())
            and duration >= flt.min_duration_ns
            and (not flt.max_duration_ns or duration < flt.max_duration_ns)
            and s["start_ns"] >= flt.start_ns_from
            and (not flt.start_ns_to or s["start_ns"] < flt.start_ns_to)
        ):
            found.append(s)
    return sorted(found, key=lambda s: (s["start_ns"], s["span_id"]), reverse=True)


def expected_histograms(spans: Sequence[dict[str, Any]], flt: SpanFilter) -> dict[str, Any]:
    found = matching(spans, flt)
    answer = []
    for protocol in sorted({protocol_of(s["kind"]) for s in found}):
        mine = [s for s in found if protocol_of(s["kind"]) == protocol]
        counts = histogram(s["end_ns"] - s["start_ns"] for s in mine)
        errors = sum(s["status"] == "ERROR" for s in mine)
        answer.append(protocol_latency(protocol, counts, errors))
    return {"edges_ns": list(EDGES_NS), "protocols": answer}


T0 = 1_700_000_000_000_000_000


def span(
    n: int, kind: str = "file.open", service: str = "train", pid: int = 7
) -> dict[str, object]:
    return {
        "span_id": f"s{n}",
        "kind": kind,
        "service": service,
        "pid": pid,
        "name": f"open /data/{n}",
        "start_ns": T0 + n,
        "end_ns": T0 + n + 10,
        "status": "OK",
    }


@pytest.fixture
def store() -> Iterator[DuckDBStore]:
    store = DuckDBStore()
    store.ensure_index(SPANS)
    spans = [span(n) for n in range(5)]
    spans += [span(10, kind="http.request", service="api", pid=8), span(11, service="api", pid=8)]
    store.bulk_upsert(SPANS.name, [(str(s["span_id"]), s) for s in spans])
    store.refresh(SPANS.name)
    yield store
    store.close()


def ids(docs: list[dict[str, object]]) -> list[object]:
    return [d["span_id"] for d in docs]


def test_no_filter_finds_every_span_newest_first(store: DuckDBStore) -> None:
    assert ids(search_spans(store, SpanFilter())) == ["s11", "s10", "s4", "s3", "s2", "s1", "s0"]


def test_each_field_narrows_the_search(store: DuckDBStore) -> None:
    assert ids(search_spans(store, SpanFilter(kind="http.request"))) == ["s10"]
    assert ids(search_spans(store, SpanFilter(service="api"))) == ["s11", "s10"]
    assert ids(search_spans(store, SpanFilter(pid=8, kind="file.open"))) == ["s11"]
    assert search_spans(store, SpanFilter(service="nobody")) == []


def test_times_are_from_inclusive_to_exclusive_either_end_open(store: DuckDBStore) -> None:
    assert ids(search_spans(store, SpanFilter(start_ns_from=T0 + 2, start_ns_to=T0 + 4))) == [
        "s3",
        "s2",
    ]
    assert ids(search_spans(store, SpanFilter(start_ns_from=T0 + 10))) == ["s11", "s10"]
    assert ids(search_spans(store, SpanFilter(start_ns_to=T0 + 1))) == ["s0"]


def test_the_limit_is_kept_in_bounds(store: DuckDBStore) -> None:
    assert ids(search_spans(store, SpanFilter(limit=2))) == ["s11", "s10"]
    assert ids(search_spans(store, SpanFilter(limit=-5))) == ["s11"]  # at least one
    assert len(search_spans(store, SpanFilter(limit=0))) == 7  # 0: the default of 100


class Recording:
    """Only what search_spans asks the store."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Query]] = []

    def search(self, index: str, query: Query) -> list[dict[str, Any]]:
        self.asked.append((index, query))
        return []


def test_one_query_on_the_spans_index_newest_first_at_most_max_limit() -> None:
    recording = Recording()
    search_spans(cast(Store, recording), SpanFilter(pid=3, limit=MAX_LIMIT * 10))
    assert recording.asked == [
        (
            SPANS.name,
            Query(equals={"pid": 3}, sort="start_ns", descending=True, limit=MAX_LIMIT),
        )
    ]


# --- protocol, status and duration filters, and the histograms, over realistic spans --------

END = 1_700_000_600 * 1_000_000_000
SPANS_OF_SEVERAL_PROTOCOLS = protocol_spans(END, 397, seed=5)
FILTERS = [
    SpanFilter(limit=MAX_LIMIT),
    SpanFilter(protocol=names.PROTOCOL_REDIS, limit=MAX_LIMIT),
    SpanFilter(protocol="http", limit=MAX_LIMIT),  # not http2
    SpanFilter(protocol=names.PROTOCOL_GRPC, status="error", limit=MAX_LIMIT),
    SpanFilter(service="api", status="OK", min_duration_ns=MS, limit=MAX_LIMIT),
    SpanFilter(min_duration_ns=2 * MS, max_duration_ns=20 * MS, limit=MAX_LIMIT),
    SpanFilter(max_duration_ns=300_000, limit=MAX_LIMIT),
    SpanFilter(kind="redis.server", min_duration_ns=10_000, limit=MAX_LIMIT),
    SpanFilter(start_ns_from=END - 120 * 10**9, status="ERROR", limit=MAX_LIMIT),
    SpanFilter(protocol="smtp", limit=MAX_LIMIT),
]


@pytest.fixture(scope="module")
def realistic() -> Iterator[DuckDBStore]:
    store = DuckDBStore()
    fill_spans(store, span_codec(), SPANS_OF_SEVERAL_PROTOCOLS)
    yield store
    store.close()


@pytest.mark.parametrize("flt", FILTERS)
def test_every_filter_is_applied_by_the_store(realistic: DuckDBStore, flt: SpanFilter) -> None:
    expected = matching(SPANS_OF_SEVERAL_PROTOCOLS, flt.check())
    assert ids(search_spans(realistic, flt.check())) == [s["span_id"] for s in expected]
    page = span_page(realistic, replace(flt, limit=7).check())
    assert page["count"] == min(7, len(expected)) and page["total"] == len(expected)
    assert ids(page["spans"]) == [s["span_id"] for s in expected[:7]]


@pytest.mark.parametrize("flt", FILTERS)
def test_histograms_count_every_matching_span(realistic: DuckDBStore, flt: SpanFilter) -> None:
    answer = span_histograms(realistic, replace(flt, limit=1).check())  # the limit is not used
    assert answer == expected_histograms(SPANS_OF_SEVERAL_PROTOCOLS, flt.check())


def test_the_data_spans_protocols_buckets_and_errors(realistic: DuckDBStore) -> None:
    answer = span_histograms(realistic, SpanFilter())
    protocols = {p["protocol"]: p for p in answer["protocols"]}
    assert sorted(protocols) == ["dns", "grpc", "http", "http2", "mysql", "postgresql", "redis"]
    assert sum(p["count"] for p in protocols.values()) == 397
    assert protocols["redis"]["count"] == 100  # client and server: 50 + 50
    assert all(sum(1 for c in p["buckets"] if c) >= 4 for p in protocols.values())
    assert protocols["grpc"]["errors"] > 0 and protocols["mysql"]["errors"] == 0
    ok_only = span_histograms(realistic, SpanFilter(status="OK"))
    assert all(p["errors"] == 0 for p in ok_only["protocols"])


def test_the_query_holds_every_filter() -> None:
    flt = SpanFilter(
        protocol="redis",
        service="api",
        status="error",
        min_duration_ns=5,
        max_duration_ns=9,
        start_ns_from=1,
        limit=20,
    ).check()
    assert span_query(flt) == Query(
        equals={"service": "api", "status": "ERROR"},
        ranges={"start_ns": (1, None), "duration_ns": (5, 9)},
        prefixes={"kind": "redis."},
        sort="start_ns",
        descending=True,
        limit=20,
    )
    assert span_query(SpanFilter(max_duration_ns=9)).ranges == {"duration_ns": (None, 9)}


class Counting:
    """Answers every count with 1 and records the queries."""

    def __init__(self) -> None:
        self.counted: list[Query] = []

    def count(self, index: str, query: Query) -> int:
        self.counted.append(query)
        return 1


def test_histogram_counts_stop_once_every_span_is_placed() -> None:
    store = Counting()
    answer = span_histograms(cast(Store, store), SpanFilter(protocol="redis", status="OK"))
    # total 1, then the first bucket holds it: two counts, no error count for OK spans
    assert len(store.counted) == 2
    assert store.counted[1].ranges == {"duration_ns": (None, EDGES_NS[0])}
    assert answer["protocols"][0]["buckets"] == [1] + [0] * (BUCKETS - 1)
    store.counted.clear()
    span_histograms(cast(Store, store), SpanFilter(protocol="redis", min_duration_ns=3 * MS))
    # buckets below 3 ms are not asked for; the first asked is clipped to [3 ms, 5 ms)
    assert store.counted[1].ranges == {"duration_ns": (3 * MS, 5 * MS)}


@pytest.mark.parametrize(
    ("flt", "why"),
    [
        (SpanFilter(status="fine"), "'status' must be one of OK, ERROR, UNSET"),
        (SpanFilter(protocol="Redis!"), "'protocol' 'Redis!' is not a protocol name"),
        (SpanFilter(min_duration_ns=-1), "must not be negative"),
        (SpanFilter(min_duration_ns=5, max_duration_ns=5), "must be above"),
    ],
)
def test_a_bad_filter_is_refused_with_the_field(flt: SpanFilter, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        flt.check()
