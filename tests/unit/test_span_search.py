"""The one span search both APIs answer with (zerotrace_query/span_search.py), over the
embedded store: each filter field narrows, times are [from, to), newest first, and the limit
is kept between 1 and MAX_LIMIT."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from zerotrace.store import Query, Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import SPANS
from zerotrace_query.span_search import MAX_LIMIT, SpanFilter, search_spans

pytestmark = pytest.mark.unit

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
