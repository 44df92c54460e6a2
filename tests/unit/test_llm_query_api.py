"""The LLM endpoints over HTTP and gRPC, on DuckDB filled through the real indexing path."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.unit import test_llm_gpu_cost_store as gpu_cost
from tests.unit.test_llm_query_documents import (
    MS,
    S,
    index_all,
    llm_request,
    publish_llm,
    realistic_requests,
)
from zerotrace import names
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query import llm_gpu_cost_store
from zerotrace_query.documents import DEVICE_WINDOWS, LLM_REQUESTS, PROFILES
from zerotrace_query.grpc_api import (
    GrpcApi,
    list_llm_requests_rpc,
    llm_concurrency_rpc,
    llm_percentiles_rpc,
    llm_request_message,
)
from zerotrace_query.http_api import HttpApi, parse_llm_filter
from zerotrace_query.llm_search import LlmFilter, list_llm_requests, llm_percentiles

END = 1_700_000_400 * S  # a whole minute, so 60 s buckets line up with the window
REQUESTS = realistic_requests(END, 120)


@pytest.fixture(scope="module")
def apis() -> Iterator[tuple[str, str, DuckDBStore]]:
    from zerotrace.schema_registry import InMemorySchemaRegistry
    from zerotrace.schemas import load_schema_dir

    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    broker = InMemoryBroker()
    broker.ensure_topics()
    store = DuckDBStore()
    publish_llm(broker, codec, REQUESTS)
    index_all(broker, store, codec, "g")
    http = HttpApi(store, port=0).start()
    rpc = GrpcApi(store, port=0).start()
    yield http.url, rpc.address, store
    http.stop()
    rpc.stop()
    store.close()


def get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url) as response:
        body: dict[str, Any] = json.load(response)
    return body


def get_error(url: str) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(url)
    body = json.load(bad.value)
    bad.value.close()
    return bad.value.code, body["error"]


def test_requests_newest_first_with_filters(apis: tuple[str, str, DuckDBStore]) -> None:
    url, _, _ = apis
    body = get(f"{url}/api/v1/llm/requests?model=gpt-oss-20b&limit=500")
    expected = sorted(
        (r for r in REQUESTS if r["model"] == "gpt-oss-20b"), key=lambda r: -r["start_ns"]
    )
    assert [r["request_id"] for r in body["requests"]] == [r["request_id"] for r in expected]
    assert (body["count"], body["total"], body["truncated"]) == (40, 40, False)
    errors = get(f"{url}/api/v1/llm/requests?status=error&service=vllm")["requests"]
    assert errors and all(r["status"] == "error" and r["service"] == "vllm" for r in errors)
    window = get(f"{url}/api/v1/llm/requests?from={END - 300 * S}&to={END - 100 * S}&limit=1000")
    assert all(END - 300 * S <= r["start_ns"] < END - 100 * S for r in window["requests"])
    assert window["count"] == sum(END - 300 * S <= r["start_ns"] < END - 100 * S for r in REQUESTS)


def test_a_limit_that_truncates_says_so(apis: tuple[str, str, DuckDBStore]) -> None:
    url, _, _ = apis
    body = get(f"{url}/api/v1/llm/requests?limit=5")
    assert (body["count"], body["total"], body["truncated"]) == (5, 120, True)
    assert "newest 5" in body["warning"]
    stats = get(f"{url}/api/v1/llm/percentiles?limit=10&bucket_s=60")
    assert stats["truncated"] and stats["count"] == 10 and stats["total"] == 120
    newest = get(f"{url}/api/v1/llm/requests?limit=10")["requests"]
    assert stats["complete_from_ns"] == newest[-1]["start_ns"]
    assert sum(s["count"] for s in stats["series"]) == 10


def test_percentiles_and_concurrency(apis: tuple[str, str, DuckDBStore]) -> None:
    url, _, _ = apis
    frm, to = END - 600 * S, END
    body = get(f"{url}/api/v1/llm/percentiles?from={frm}&to={to}&bucket_s=60")
    assert (body["bucket_ns"], body["from_ns"], body["to_ns"]) == (60 * S, frm, to)
    assert [s["model"] for s in body["series"]] == [
        "gpt-oss-20b",
        "llama-3.1-8b-instruct",
        "qwen2.5-32b-instruct",
    ]
    llama = body["series"][1]
    assert len(llama["buckets"]) == 10
    assert sum(b["count"] for b in llama["buckets"]) == llama["count"] == 40
    assert llama["ttft_ns"]["p50"] < body["series"][2]["ttft_ns"]["p50"]  # 8B is faster
    assert body["truncated"] is False
    auto = get(f"{url}/api/v1/llm/percentiles?from={frm}&to={to}")
    assert auto["bucket_ns"] == 10 * S
    conc = get(f"{url}/api/v1/llm/concurrency?from={frm}&to={to}&bucket_s=30&model=gpt-oss-20b")
    (series,) = conc["series"]
    assert len(series["buckets"]) == 20
    assert max(b["max"] for b in series["buckets"]) >= 1
    assert all(0 <= b["mean"] <= b["max"] for b in series["buckets"])


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("requests?limit=abc", "'limit'"),
        ("requests?limit=0", "'limit'"),
        ("requests?limit=10001", "'limit'"),
        ("requests?status=broken", "'status'"),
        ("requests?from=20&to=10", "'to'"),
        ("requests?bucket_s=5", "'bucket_s'"),
        ("requests?modle=x", "'modle'"),
        ("percentiles?bucket_s=-1", "'bucket_s'"),
        ("percentiles?bucket_s=x", "'bucket_s'"),
        ("percentiles?from=1&to=100000000000000&bucket_s=0.001", "buckets"),
        ("concurrency?from=x", "'from'"),
        ("requests?to=99999999999999999999", "'to'"),
        ("percentiles?bucket_s=nan", "'bucket_s'"),
    ],
)
def test_bad_parameters_are_a_clear_400(
    apis: tuple[str, str, DuckDBStore], query: str, names: str
) -> None:
    url, _, _ = apis
    code, error = get_error(f"{url}/api/v1/llm/{query}")
    assert code == 400
    assert names in error


def test_grpc_mirrors_http(apis: tuple[str, str, DuckDBStore]) -> None:
    url, address, _ = apis
    via_http = get(f"{url}/api/v1/llm/requests?service=sglang&limit=7")
    via_grpc = list_llm_requests_rpc(address, service="sglang", limit=7)
    assert [r.request_id for r in via_grpc.requests] == [
        r["request_id"] for r in via_http["requests"]
    ]
    assert via_grpc.coverage.truncated and via_grpc.coverage.total == 40
    first = via_grpc.requests[0]
    assert first.observation_point == "SERVER" and first.status in ("ok", "error")
    assert first.HasField("output_tokens") == (via_http["requests"][0]["output_tokens"] is not None)
    # No GPU windows in this store: the GPU cost fields are unset, not 0.
    assert via_http["requests"][0]["gpu_time_ns"] is None
    for field in (*llm_gpu_cost_store.FIELDS, llm_gpu_cost_store.PARTIAL):
        assert not first.HasField(field), field

    frm = END - 600 * S
    http_stats = get(f"{url}/api/v1/llm/percentiles?from={frm}&to={END}&bucket_s=60")
    grpc_stats = llm_percentiles_rpc(address, start_ns_from=frm, start_ns_to=END, bucket_s=60)
    assert grpc_stats.bucket_ns == 60 * S
    for h, g in zip(http_stats["series"], grpc_stats.series, strict=True):
        assert (g.model, g.count, g.ttft_ns.p99) == (h["model"], h["count"], h["ttft_ns"]["p99"])
        for hb, gb in zip(h["buckets"], g.buckets, strict=True):
            assert gb.HasField("ttft_ns") == (hb["ttft_ns"] is not None)
            assert gb.throughput_tokens_per_s == pytest.approx(hb["throughput_tokens_per_s"])
    conc = llm_concurrency_rpc(address, start_ns_from=frm, start_ns_to=END, bucket_s=60)
    assert len(conc.series) == 3 and len(conc.series[0].buckets) == 10
    with pytest.raises(grpc.RpcError) as bad:
        list_llm_requests_rpc(address, status="nope")
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'status'" in (bad.value.details() or "")
    with pytest.raises(grpc.RpcError) as bad:
        llm_percentiles_rpc(address, bucket_s=float("nan"))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_filter_parsing_defaults() -> None:
    assert parse_llm_filter("") == LlmFilter(limit=100)
    stats = parse_llm_filter("model=m&bucket_s=2.5", stats=True)
    assert (stats.model, stats.bucket_ns, stats.limit) == ("m", 2_500_000_000, 10_000)


def test_empty_store_answers_empty_series() -> None:
    store = DuckDBStore()
    try:
        from zerotrace_query.documents import LLM_REQUESTS

        store.ensure_index(LLM_REQUESTS)
        body = llm_percentiles(store, LlmFilter(limit=10_000))
        assert body["series"] == [] and body["count"] == 0 and not body["truncated"]
        one = llm_request()
        store.bulk_upsert(LLM_REQUESTS.name, [("x", {**one, "status": "ok"})])
        body = llm_percentiles(store, LlmFilter(limit=10_000))
        assert body["series"][0]["count"] == 1
    finally:
        store.close()


# --- each request once though seen at both ends ------------------------------------------


def both_ends_records() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """3 requests each seen by the client (agent) and the server (vllm), and the links trace
    assembly wrote between them (tcp_sequence: the server's span the client's child)."""
    requests, links = [], []
    for n in range(3):
        start = END - (30 - 10 * n) * S
        client = llm_request(
            request_id=f"c{n}",
            span_id=f"c{n}",
            service="agent",
            observation_point="CLIENT",
            start_ns=start,
            ttft_ns=125 * MS,
        )
        server = llm_request(
            request_id=f"s{n}", span_id=f"s{n}", start_ns=start + MS, ttft_ns=120 * MS
        )
        server["end_ns"] = client["end_ns"] - 2 * MS
        requests += [client, server]
        links.append(
            {
                "edge_id": f"e{n}",
                "trace_id": f"t{n}",
                "parent_span_id": f"c{n}",
                "child_span_id": f"s{n}",
                "rule": names.TRACE_RULE_TCP_SEQ,
                "ts_ns": server["start_ns"],
            }
        )
    return requests, links


@pytest.fixture(scope="module")
def both_ends() -> Iterator[tuple[str, str]]:
    from zerotrace.schema_registry import InMemorySchemaRegistry
    from zerotrace.schemas import load_schema_dir

    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    broker = InMemoryBroker()
    broker.ensure_topics()
    requests, links = both_ends_records()
    publish_llm(broker, codec, requests)
    producer = broker.producer()
    for link in links:
        data = codec.encode(names.DERIVED_TRACE.record, link)
        producer.produce(names.DERIVED_TRACE.name, link["child_span_id"].encode(), data)
    store = DuckDBStore()
    index_all(broker, store, codec, "g")
    http = HttpApi(store, port=0).start()
    rpc = GrpcApi(store, port=0).start()
    yield http.url, rpc.address
    http.stop()
    rpc.stop()
    store.close()


@pytest.mark.parametrize(
    ("point", "count"), [("", 3), ("CLIENT", 3), ("SERVER", 3), ("NETWORK", 0), ("all", 6)]
)
def test_requests_seen_at_both_ends_count_once_or_per_observation_point(
    both_ends: tuple[str, str], point: str, count: int
) -> None:
    url, address = both_ends
    query = f"observation_point={point}&from={END - 60 * S}&to={END}"
    for route in ("requests", "percentiles", "concurrency"):
        body = get(f"{url}/api/v1/llm/{route}?{query}")
        assert (body["count"], body["total"], body["truncated"]) == (count, count, False), route
    stats = get(f"{url}/api/v1/llm/percentiles?{query}&bucket_s=60")
    assert sum(s["count"] for s in stats["series"]) == count
    window: dict[str, Any] = {"start_ns_from": END - 60 * S, "start_ns_to": END}
    listed = list_llm_requests_rpc(address, observation_point=point, **window)
    assert len(listed.requests) == listed.coverage.count == count
    grpc_stats = llm_percentiles_rpc(address, observation_point=point, bucket_s=60, **window)
    assert sum(s.count for s in grpc_stats.series) == grpc_stats.coverage.count == count
    conc = llm_concurrency_rpc(address, observation_point=point, **window)
    assert conc.coverage.count == count


def test_the_once_view_over_http_and_grpc(both_ends: tuple[str, str]) -> None:
    url, address = both_ends
    body = get(f"{url}/api/v1/llm/requests")
    assert [r["request_id"] for r in body["requests"]] == ["s2", "s1", "s0"]
    assert (body["counted"], body["seen_at_both"], body["records"]) == ("requests", 3, 6)
    s0 = body["requests"][-1]
    assert s0["also_seen_at"] == [
        {
            "observation_point": "CLIENT",
            "span_id": "c0",
            "service": "agent",
            "node_id": "node-a",
            "start_ns": END - 30 * S,
            "end_ns": END - 28 * S,
            "ttft_ns": 125 * MS,
        }
    ]
    assert s0["client_gap_ns"] == {"start": MS, "ttft": 5 * MS, "end": 2 * MS}
    stats = get(f"{url}/api/v1/llm/percentiles?bucket_s=60")
    assert [(s["service"], s["count"]) for s in stats["series"]] == [("vllm", 3)]

    listed = list_llm_requests_rpc(address)
    coverage = listed.coverage
    assert (coverage.counted, coverage.seen_at_both, coverage.records) == ("requests", 3, 6)
    assert (coverage.total_records, coverage.pairing_complete) == (6, True)
    first = listed.requests[-1]
    [seen] = first.also_seen_at
    assert (seen.observation_point, seen.span_id, seen.service, seen.ttft_ns) == (
        "CLIENT",
        "c0",
        "agent",
        125 * MS,
    )
    assert (first.client_gap_ns.start, first.client_gap_ns.ttft, first.client_gap_ns.end) == (
        MS,
        5 * MS,
        2 * MS,
    )
    records = list_llm_requests_rpc(address, observation_point="all")
    assert records.coverage.counted == "records" and not records.requests[0].also_seen_at
    assert not records.requests[0].HasField("client_gap_ns")


def test_a_bad_observation_point_is_refused_by_name(both_ends: tuple[str, str]) -> None:
    url, address = both_ends
    for route in ("requests", "percentiles", "concurrency"):
        code, error = get_error(f"{url}/api/v1/llm/{route}?observation_point=client")
        assert code == 400 and "'observation_point'" in error
    with pytest.raises(grpc.RpcError) as bad:
        llm_percentiles_rpc(address, observation_point="everything")
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'observation_point'" in (bad.value.details() or "")


def test_grpc_carries_each_request_s_gpu_cost_as_the_listing_has_it() -> None:
    store = DuckDBStore()
    for spec in (LLM_REQUESTS, PROFILES, DEVICE_WINDOWS):
        store.ensure_index(spec)
    gpu_cost.fill(store, LLM_REQUESTS.name, gpu_cost.REQUESTS, "request_id")
    gpu_cost.fill(store, PROFILES.name, gpu_cost.WINDOWS, "window_id")
    rpc = GrpcApi(store, port=0).start()
    try:
        via_grpc = list_llm_requests_rpc(rpc.address, observation_point="all")
        listed = list_llm_requests(store, LlmFilter(observation_point="all"))
    finally:
        rpc.stop()
        store.close()
    got = {r.request_id: r for r in via_grpc.requests}
    want = {r["request_id"]: r for r in listed["requests"]}
    a, b = got["a"], got["b"]
    assert a.gpu_time_ns == round(gpu_cost.SHARE_A * S) == want["a"]["gpu_time_ns"]
    assert b.gpu_time_ns == round(gpu_cost.SHARE_B * S)
    assert (a.gpu_launches, b.gpu_launches) == (99 * 12 / 20, 99 * 8 / 20)
    assert a.gpu_memory_byte_s == want["a"]["gpu_memory_byte_s"] > 0
    assert a.gpu_cost_method == (
        "tokens-processed/v1 time=GPU_TIME launches=GPU_LAUNCH memory=GPU_MEM_INUSE"
    )
    assert not a.HasField("gpu_cost_partial")
    for rid in ("other-pid", "client"):  # no GPU windows of its own: unset, not 0
        for field in (*llm_gpu_cost_store.FIELDS, llm_gpu_cost_store.PARTIAL):
            assert not got[rid].HasField(field), (rid, field)


def test_a_partial_gpu_cost_says_so_and_zero_stays_a_value() -> None:
    doc = {
        "request_id": "r",
        "gpu_time_ns": 0,
        "gpu_launches": 0.0,
        "gpu_memory_byte_s": None,
        "gpu_cost_method": "tokens-processed/v1 time=nvml_sm_util",
        "gpu_cost_partial": True,
    }
    message = llm_request_message(doc)
    assert message.HasField("gpu_time_ns") and message.gpu_time_ns == 0
    assert message.HasField("gpu_launches") and message.gpu_launches == 0.0
    assert not message.HasField("gpu_memory_byte_s")
    assert message.gpu_cost_partial is True
