"""The LLM request queries both APIs answer with (zerotrace_query/llm_search.py), over the
embedded store: filter checks that name the bad parameter, one store query each (started in
[from, to), or overlapping it for concurrency), and an honest account of truncation when
more requests matched than the limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from zerotrace.store_duckdb import DuckDBStore
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query import llm_stats
from zerotrace_query.documents import LLM_REQUESTS
from zerotrace_query.llm_search import (
    MAX_NS,
    LlmFilter,
    list_llm_requests,
    llm_concurrency,
    llm_percentiles,
)

pytestmark = pytest.mark.unit

S = llm_stats.NS_PER_S
T0 = 1_700_000_000 * S


def request(n: int, start_s: float, end_s: float, model: str = "m1", status: str = "ok") -> Any:
    return {
        "request_id": f"r{n}",
        "model": model,
        "service": "vllm",
        "status": status,
        "start_ns": T0 + int(start_s * S),
        "end_ns": T0 + int(end_s * S),
        "ttft_ns": 50_000_000,
        "output_tokens": 10,
    }


@pytest.fixture
def store() -> Iterator[DuckDBStore]:
    store = DuckDBStore()
    store.ensure_index(LLM_REQUESTS)
    docs = [
        request(0, -5, 15),  # started before the window, still running in it
        request(1, 1, 2),
        request(2, 3, 4, model="m2"),
        request(3, 5, 9, status="error"),
        request(4, 12, 13),  # after the window
    ]
    store.bulk_upsert(LLM_REQUESTS.name, [(d["request_id"], d) for d in docs])
    store.refresh(LLM_REQUESTS.name)
    yield store
    store.close()


WINDOW = LlmFilter(start_ns_from=T0, start_ns_to=T0 + 10 * S)


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        (LlmFilter(status="broken"), "'status' must be 'ok' or 'error'"),
        (LlmFilter(limit=0), f"'limit' must be between 1 and {MAX_LIMIT}"),
        (LlmFilter(limit=MAX_LIMIT + 1), "'limit' must be between"),
        (LlmFilter(start_ns_from=-1), "'from' is ns since the epoch"),
        (LlmFilter(start_ns_to=MAX_NS + 1), "'to' is ns since the epoch"),
        (LlmFilter(start_ns_from=T0, start_ns_to=T0), "'to' must be after 'from'"),
        (LlmFilter(bucket_ns=-1), "'bucket_s' must be positive"),
    ],
)
def test_a_bad_filter_names_its_parameter(flt: LlmFilter, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        flt.check()


def test_a_good_filter_checks_as_itself_and_matches_only_what_is_set() -> None:
    flt = LlmFilter(model="m1", status="error", limit=MAX_LIMIT)
    assert flt.check() is flt
    assert flt.equals() == {"model": "m1", "status": "error"}
    assert LlmFilter().equals() == {}


def ids(result: dict[str, Any]) -> list[str]:
    return [r["request_id"] for r in result["requests"]]


def test_listing_finds_requests_started_in_the_window_newest_first(store: DuckDBStore) -> None:
    result = list_llm_requests(store, WINDOW)
    assert ids(result) == ["r3", "r2", "r1"]
    assert result["count"] == result["total"] == 3 and not result["truncated"]
    assert "warning" not in result
    assert ids(list_llm_requests(store, LlmFilter(status="error"))) == ["r3"]
    assert ids(list_llm_requests(store, LlmFilter(model="m2"))) == ["r2"]


def test_a_truncated_listing_says_how_many_matched_and_from_when_it_is_complete(
    store: DuckDBStore,
) -> None:
    result = list_llm_requests(store, LlmFilter(limit=2))
    assert ids(result) == ["r4", "r3"]
    assert (result["count"], result["total"], result["limit"]) == (2, 5, 2)
    assert result["truncated"] and result["complete_from_ns"] == T0 + 5 * S
    assert "5 requests matched; only the newest 2" in result["warning"]


def test_percentiles_cover_requests_started_in_the_window_in_round_buckets(
    store: DuckDBStore,
) -> None:
    result = llm_percentiles(store, WINDOW)
    assert result["bucket_ns"] == llm_stats.auto_bucket_ns(10 * S)
    assert (result["from_ns"], result["to_ns"]) == (T0, T0 + 10 * S)
    assert result["total"] == 3
    assert sorted(s["model"] for s in result["series"]) == ["m1", "m2"]


def test_concurrency_counts_a_request_started_before_the_window(store: DuckDBStore) -> None:
    flt = LlmFilter(model="m1", start_ns_from=T0, start_ns_to=T0 + 10 * S, bucket_ns=10 * S)
    result = llm_concurrency(store, flt)
    assert result["total"] == 3  # r0 overlaps the window; r4 starts after it
    [series] = result["series"]
    assert series["buckets"] == [{"start_ns": T0, "max": 2, "mean": 1.5}]


def test_with_nothing_matched_the_statistics_are_empty(store: DuckDBStore) -> None:
    result = llm_percentiles(store, LlmFilter(model="nobody"))
    assert result["series"] == [] and result["total"] == 0
    assert result["bucket_ns"] == 10 * S  # the default width when nothing sets one
