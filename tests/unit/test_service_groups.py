"""Spans counted per group inside the store (zerotrace_query/service_groups.py): client and
server spans per node, service, protocol, side and peer address, statuses folded into an error
count, other kinds left out; and percentiles read from the buckets as Prometheus's
histogram_quantile reads them."""

from __future__ import annotations

from typing import Any

import pytest

from zerotrace import names
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import SPANS, span_document
from zerotrace_query.service_groups import (
    CLIENT,
    SERVER,
    Counts,
    SpanGroup,
    group_order,
    merge,
    no_counts,
    parse_kind,
    percentile_ns,
    read_groups,
)

pytestmark = pytest.mark.unit
US = 1_000
BOUNDS = (100 * US, 200 * US, 500 * US)


def span(i: int, kind: str, status: str, duration: int, **attributes: str) -> dict[str, Any]:
    return {
        "span_id": f"{i:016x}",
        "trace_id": f"{i:032x}",
        "parent_span_id": None,
        "node_id": "node-a",
        "pid": 7,
        "tid": 7,
        "process_name": "api",
        "container_id": None,
        "service": "api",
        "kind": kind,
        "name": "GET",
        "start_ns": 1_000 + i,
        "end_ns": 1_000 + i + duration,
        "status": status,
        "attributes": attributes,
        "source_event_ids": [],
    }


def test_read_groups_counts_inside_the_store() -> None:
    redis = {names.ATTR_SERVER_ADDRESS: "127.0.0.1", names.ATTR_SERVER_PORT: "6379"}
    spans = [
        span(1, "redis.client", "OK", 50 * US, **redis),
        span(2, "redis.client", "ERROR", 150 * US, **redis),
        span(3, "redis.client", "UNSET", 900 * US, **redis),
        span(4, "redis.client", "OK", 120 * US, **{**redis, names.ATTR_SERVER_PORT: "6380"}),
        span(5, names.SPAN_KIND_HTTP_SERVER, "OK", 300 * US),  # no address: still a group
        span(6, names.SPAN_KIND_FILE_OPEN, "OK", 10 * US),  # not a call
        span(7, "redis.other", "OK", 10 * US, **redis),  # neither side
        span(8, "redis.client", "OK", 10 * US, **redis),  # outside the range below
    ]
    spans[-1]["start_ns"] = 5_000
    store = DuckDBStore()
    try:
        store.ensure_index(SPANS)
        assert store.bulk_upsert(SPANS.name, [span_document(s) for s in spans]).ok
        groups = read_groups(store, 0, 2_000, BOUNDS)
    finally:
        store.close()
    assert groups == {
        SpanGroup("node-a", "api", "redis", CLIENT, "127.0.0.1", 6379): Counts(
            (1, 2, 2), 3, 1, float(50 * US + 150 * US + 900 * US)
        ),
        SpanGroup("node-a", "api", "redis", CLIENT, "127.0.0.1", 6380): Counts(
            (0, 1, 1), 1, 0, float(120 * US)
        ),
        SpanGroup("node-a", "api", "http", SERVER, None, None): Counts(
            (0, 0, 1), 1, 0, float(300 * US)
        ),
    }


def test_span_document_keeps_the_peer_searchable() -> None:
    attrs = {names.ATTR_SERVER_ADDRESS: "10.0.0.7", names.ATTR_SERVER_PORT: "8080"}
    _, doc = span_document(span(1, "http.client", "OK", 5, **attrs))
    assert (doc["server_address"], doc["server_port"]) == ("10.0.0.7", 8080)
    for port in ("", "http", "99999999", "-1"):
        _, doc = span_document(span(1, "http.client", "OK", 5, **{names.ATTR_SERVER_PORT: port}))
        assert (doc["server_address"], doc["server_port"]) == (None, None)


def test_parse_kind() -> None:
    assert parse_kind("redis.client") == ("redis", CLIENT)
    assert parse_kind("http2.server") == ("http2", SERVER)
    assert [parse_kind(k) for k in ("file.open", ".client", "client", None, 5)] == [None] * 5


def test_percentiles_interpolate_inside_a_bucket() -> None:
    # 10 spans: 4 <= 100 us, 4 in (100, 200], 2 in (200, 500] us.
    counts = Counts((4, 8, 10), 10, 0, 0.0)
    # p50: rank 5, in (100, 200] holding 4 from 4 -> 100 + 100 * 1/4 us.
    assert percentile_ns(counts, BOUNDS, 50) == 125 * US
    # p95: rank 9.5, in (200, 500] holding 2 from 8 -> 200 + 300 * 1.5/2 us.
    assert percentile_ns(counts, BOUNDS, 95) == 425 * US
    # p20: rank 2 in the first bucket, from 0.
    assert percentile_ns(counts, BOUNDS, 20) == 50 * US
    # A rank on a bucket's edge reads its upper bound.
    assert percentile_ns(counts, BOUNDS, 40) == 100 * US


def test_percentiles_in_the_overflow_bucket_read_the_last_bound() -> None:
    counts = Counts((1, 1, 1), 4, 0, 0.0)  # 3 of 4 above 500 us
    assert percentile_ns(counts, BOUNDS, 25) == 100 * US
    assert percentile_ns(counts, BOUNDS, 50) == 500 * US
    assert percentile_ns(no_counts(BOUNDS), BOUNDS, 50) is None


def test_counts_add_and_merge() -> None:
    a = SpanGroup("n", "s", "redis", CLIENT, "h", 1)
    b = SpanGroup("n", "s", "redis", CLIENT, None, None)
    one = Counts((1, 1, 1), 1, 1, 2.0)
    assert merge([{a: one}, {a: one, b: one}]) == {a: one + one, b: one}
    assert one + one == Counts((2, 2, 2), 2, 2, 4.0)
    assert sorted([a, b], key=group_order) == [b, a]
