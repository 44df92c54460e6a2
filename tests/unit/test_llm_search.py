"""The LLM request queries both APIs answer with (zerotrace_query/llm_search.py), over the
embedded store: filter checks that name the bad parameter, one store query each (started in
[from, to), or overlapping it for concurrency), and an honest account of truncation when
more requests matched than the limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from zerotrace import names
from zerotrace.store_duckdb import DuckDBStore
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query import llm_search, llm_stats
from zerotrace_query.documents import LLM_REQUESTS, TRACE_EDGES
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


# --- each request once though seen at both ends (zerotrace_query/llm_observations.py) -------


def both_ends(n: int, start_s: float, ttft_ms: int = 50) -> tuple[Any, Any, Any]:
    """The client's and the server's record of one request, and trace assembly's link."""
    client = {
        **request(n, start_s, start_s + 2),
        "request_id": f"c{n}",
        "span_id": f"c{n}",
        "service": "agent",
        "observation_point": "CLIENT",
        "ttft_ns": (ttft_ms + 3) * 1_000_000,
    }
    server = {
        **request(n, start_s + 0.001, start_s + 1.998),
        "request_id": f"s{n}",
        "span_id": f"s{n}",
        "observation_point": "SERVER",
        "ttft_ns": ttft_ms * 1_000_000,
    }
    link = {
        "edge_id": f"e{n}",
        "trace_id": "t",
        "parent_span_id": f"c{n}",
        "child_span_id": f"s{n}",
        "rule": names.TRACE_RULE_TCP_SEQ,
        "ts_ns": server["start_ns"],
    }
    return client, server, link


@pytest.fixture
def paired() -> Iterator[DuckDBStore]:
    """3 requests seen at both ends, 10 s apart, plus links that must not pair: another rule's
    link between two of them, and a taken-back link."""
    store = DuckDBStore()
    store.ensure_index(LLM_REQUESTS)
    store.ensure_index(TRACE_EDGES)
    docs, links = [], []
    for n in range(3):
        client, server, link = both_ends(n, 10 * n, ttft_ms=40 + 10 * n)
        docs += [client, server]
        links.append(link)
    links.append({**links[0], "edge_id": "x1", "rule": names.TRACE_RULE_SAME_THREAD})
    links.append({**links[1], "edge_id": "x2", "parent_span_id": ""})
    store.bulk_upsert(LLM_REQUESTS.name, [(d["request_id"], d) for d in docs])
    store.bulk_upsert(TRACE_EDGES.name, [(e["edge_id"], e) for e in links])
    yield store
    store.close()


def test_observation_point_is_checked_and_filters_by_equality() -> None:
    with pytest.raises(ValueError, match="'observation_point' must be '' \\(each request once\\)"):
        LlmFilter(observation_point="client").check()
    assert LlmFilter(observation_point="CLIENT").equals() == {"observation_point": "CLIENT"}
    assert LlmFilter(observation_point="all").equals() == LlmFilter().equals() == {}


@pytest.mark.parametrize(
    ("point", "count", "counted"),
    [
        ("", 3, "requests"),
        ("CLIENT", 3, "records"),
        ("SERVER", 3, "records"),
        ("NETWORK", 0, "records"),
        ("all", 6, "records"),
    ],
)
def test_requests_seen_at_both_ends_count_once_or_per_point(
    paired: DuckDBStore, point: str, count: int, counted: str
) -> None:
    flt = LlmFilter(observation_point=point, limit=MAX_LIMIT)
    listed = list_llm_requests(paired, flt)
    assert (listed["count"], listed["total"], listed["counted"]) == (count, count, counted)
    assert not listed["truncated"]
    stats = llm_percentiles(paired, flt)
    assert stats["count"] == count and sum(s["count"] for s in stats["series"]) == count
    assert llm_concurrency(paired, flt)["count"] == count


def test_the_once_view_keeps_the_server_record_with_the_client_s_view(
    paired: DuckDBStore,
) -> None:
    listed = list_llm_requests(paired, LlmFilter())
    assert ids(listed) == ["s2", "s1", "s0"]
    assert (listed["seen_at_both"], listed["records"], listed["total_records"]) == (3, 6, 6)
    assert listed["pairing_complete"] is True
    s0 = listed["requests"][-1]
    assert [(o["observation_point"], o["span_id"], o["service"]) for o in s0["also_seen_at"]] == [
        ("CLIENT", "c0", "agent")
    ]
    assert s0["client_gap_ns"] == {"start": 1_000_000, "ttft": 3_000_000, "end": 2_000_000}
    # Percentiles: one series, the server's service, over the servers' TTFTs only.
    [series] = llm_percentiles(paired, LlmFilter(bucket_ns=10 * S))["series"]
    assert (series["service"], series["count"]) == ("vllm", 3)
    assert series["ttft_ns"] == {"p50": 50_000_000, "p90": 60_000_000, "p99": 60_000_000}
    every = llm_percentiles(paired, LlmFilter(observation_point="all", bucket_ns=10 * S))
    assert [(s["service"], s["count"]) for s in every["series"]] == [("agent", 3), ("vllm", 3)]


def test_a_once_listing_reads_twice_its_limit_and_says_what_it_could_not_pair(
    paired: DuckDBStore,
) -> None:
    listed = list_llm_requests(paired, LlmFilter(limit=2))
    assert ids(listed) == ["s2", "s1"]  # 4 records read: s2 c2 s1 c1
    assert (listed["count"], listed["records"], listed["total_records"]) == (2, 4, 6)
    # 6 records less the 2 pairs read: at most 4 requests (in truth 3; c0 and s0 were not read)
    assert listed["total"] == 4 and listed["truncated"]
    assert listed["warning"].startswith("up to 4 requests matched; only the newest 2")
    assert listed["complete_from_ns"] == T0 + 10 * S + S // 1000


def test_a_client_record_whose_server_was_filtered_out_counts_once(paired: DuckDBStore) -> None:
    listed = list_llm_requests(paired, LlmFilter(service="agent"))
    assert ids(listed) == ["c2", "c1", "c0"] and listed["seen_at_both"] == 0


def test_too_many_links_to_read_is_said(
    paired: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Other exchanges' links at s1's start time, ordered before its own (ids "a..." < "e1"),
    # fill the pages: reading skips past that time, and s1 is left unpaired.
    t1 = T0 + 10 * S + S // 1000
    others = [
        (f"a{i}", {**EDGE_BASE, "edge_id": f"a{i}", "child_span_id": f"x{i}", "ts_ns": t1})
        for i in range(5)
    ]
    paired.bulk_upsert(TRACE_EDGES.name, others)
    monkeypatch.setattr(llm_search, "EDGE_PAGE_SIZE", 2)
    listed = list_llm_requests(paired, LlmFilter())
    assert listed["pairing_complete"] is False
    assert "some requests seen at both ends may count twice" in listed["warning"]
    assert ids(listed) == ["s2", "s1", "c1", "s0"] and listed["seen_at_both"] == 2
    monkeypatch.setattr(llm_search, "EDGE_PAGE_SIZE", 100)
    assert list_llm_requests(paired, LlmFilter())["seen_at_both"] == 3


EDGE_BASE = {
    "trace_id": "t",
    "parent_span_id": "p",
    "rule": names.TRACE_RULE_TCP_SEQ,
}
