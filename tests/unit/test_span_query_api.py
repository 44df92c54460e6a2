"""The spans view through the HTTP and gRPC APIs, over DuckDB: GET /api/v1/spans and
/api/v1/spans/histogram, and ListSpans and SpanHistograms, give the same answers as the pure
search for the same protocol, service, status and duration filters; bad filters are refused
(400, INVALID_ARGUMENT), and with a token both need it."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.unit.test_span_search import fill_spans, protocol_spans, span_codec
from zerotrace import names
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.grpc_api import GrpcApi, list_spans, list_spans_rpc, span_histograms_rpc
from zerotrace_query.http_api import HttpApi, parse_span_filter
from zerotrace_query.span_search import SpanFilter, span_histograms, span_page

pytestmark = pytest.mark.unit
END = 1_700_000_900 * 1_000_000_000
MS = 1_000_000
SPANS = protocol_spans(END, 211, seed=9)
TOKEN = "spans-token-0123456789abcdef"


@pytest.fixture(scope="module")
def apis() -> Iterator[tuple[DuckDBStore, str, str]]:
    store = DuckDBStore()
    fill_spans(store, span_codec(), SPANS)
    http = HttpApi(store, port=0).start()
    rpc = GrpcApi(store, port=0).start()
    try:
        yield store, http.url, rpc.address
    finally:
        http.stop()
        rpc.stop()
        store.close()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.load(error)


QUERIES: list[dict[str, Any]] = [
    {},
    {"protocol": names.PROTOCOL_REDIS},
    {"protocol": "http", "status": "OK"},
    {"protocol": names.PROTOCOL_POSTGRESQL, "min_duration_ns": 2 * MS},
    {"service": "api", "status": "ERROR", "max_duration_ns": 50 * MS},
    {"min_duration_ns": MS, "max_duration_ns": 10 * MS, "start_ns_from": END - 100 * 10**9},
]


def http_params(query: dict[str, Any]) -> str:
    renamed = {"start_ns_from": "from", "start_ns_to": "to"}
    return urllib.parse.urlencode({renamed.get(k, k): v for k, v in query.items()})


@pytest.mark.parametrize("query", QUERIES)
def test_http_and_grpc_answer_as_the_search(
    apis: tuple[DuckDBStore, str, str], query: dict[str, Any]
) -> None:
    store, url, address = apis
    flt = SpanFilter(**query, limit=25).check()
    status, page = get(f"{url}/api/v1/spans?{http_params(query)}&limit=25")
    assert status == 200
    assert page == json.loads(json.dumps(span_page(store, flt)))
    assert page["total"] >= page["count"] > 0
    status, hist = get(f"{url}/api/v1/spans/histogram?{http_params(query)}")
    assert status == 200
    assert hist == span_histograms(store, flt)
    assert hist["protocols"]

    via_grpc = list_spans(address, **query, limit=25)
    assert [s.span_id for s in via_grpc] == [s["span_id"] for s in page["spans"]]
    answer = span_histograms_rpc(address, **query)
    assert list(answer.edges_ns) == hist["edges_ns"]
    assert [
        {
            "protocol": p.protocol,
            "count": p.count,
            "errors": p.errors,
            "buckets": list(p.buckets),
            "p50_ns": p.p50_ns,
            "p90_ns": p.p90_ns,
            "p99_ns": p.p99_ns,
        }
        for p in answer.protocols
    ] == hist["protocols"]


def test_list_spans_reports_the_total(apis: tuple[DuckDBStore, str, str]) -> None:
    _, url, address = apis
    response = list_spans_rpc(address, protocol="redis", limit=3)
    redis = [s for s in SPANS if s["kind"].startswith("redis.")]
    assert len(response.spans) == 3 and response.total == len(redis)
    status, page = get(f"{url}/api/v1/spans?protocol=redis&limit=3")
    assert (status, page["count"], page["total"]) == (200, 3, len(redis))


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ("status=maybe", "'status'"),
        ("min_duration_ns=abc", "'min_duration_ns'"),
        ("min_duration_ns=9&max_duration_ns=3", "'max_duration_ns'"),
        ("protocol=Bad%20Name", "'protocol'"),
    ],
)
def test_a_bad_filter_is_refused_by_both(
    apis: tuple[DuckDBStore, str, str], params: str, field: str
) -> None:
    _, url, address = apis
    for path in ("/api/v1/spans", "/api/v1/spans/histogram"):
        status, body = get(f"{url}{path}?{params}")
        assert status == 400 and field in body["error"]
    if "abc" in params:
        return  # not expressible in a typed message
    query = dict(urllib.parse.parse_qsl(params))
    typed: dict[str, Any] = {k: int(v) if k.endswith("_ns") else v for k, v in query.items()}
    with pytest.raises(grpc.RpcError) as refused:
        span_histograms_rpc(address, **typed)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in str(refused.value.details())
    with pytest.raises(grpc.RpcError) as refused:
        list_spans(address, **typed)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_the_span_filter_parses_the_new_fields() -> None:
    flt = parse_span_filter(
        "protocol=redis&service=api&status=error&min_duration_ns=10&max_duration_ns=20"
    )
    assert (flt.protocol, flt.service, flt.status) == ("redis", "api", "ERROR")
    assert (flt.min_duration_ns, flt.max_duration_ns) == (10, 20)


def test_with_a_token_the_spans_routes_need_it() -> None:
    store = DuckDBStore()
    fill_spans(store, span_codec(), SPANS[:20])
    http = HttpApi(store, port=0, token=TOKEN).start()
    rpc = GrpcApi(store, port=0, token=TOKEN).start()
    try:
        for path in ("/api/v1/spans/histogram", "/api/v1/spans"):
            assert get(f"{http.url}{path}")[0] == 401
            status, body = get(f"{http.url}{path}", {"Authorization": f"Bearer {TOKEN}"})
            assert status == 200 and body
        status, _ = get(f"{http.url}/spans")
        assert status == 401
        with pytest.raises(grpc.RpcError) as refused:
            span_histograms_rpc(rpc.address)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        answer = span_histograms_rpc(rpc.address, token=TOKEN)
        assert sum(p.count for p in answer.protocols) == 20
    finally:
        http.stop()
        rpc.stop()
        store.close()
