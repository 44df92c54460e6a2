"""The service map's RED metrics on /metrics (zerotrace_query/service_map_metrics.py), on
DuckDB filled with the realistic topology (tests/unit/service_map_data.py), read back with
prometheus_client's parser: Tempo's service graph names, every request and error count exact,
buckets and sums exact against the topology's durations, client-side and server-side
durations apart, nothing added for a store without spans, and GET /metrics serving the GenAI
histograms and these together."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.service_map_data import EXPECTED, index_topology, topology
from tests.unit.test_span_search import span_codec
from zerotrace import names
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import INDEX_SPECS, LLM_REQUESTS, SPANS
from zerotrace_query.http_api import HttpApi
from zerotrace_query.prometheus_text import CONTENT_TYPE, number
from zerotrace_query.service_map_metrics import BOUNDS_S, exposition

pytestmark = pytest.mark.unit
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def store() -> Iterator[DuckDBStore]:
    db = DuckDBStore()
    for spec in INDEX_SPECS:
        db.ensure_index(spec)
    index_topology(db, span_codec(), *topology())
    yield db
    db.close()


def samples_of(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, key
            out[key] = sample.value
    return out


def expected_samples() -> Samples:
    """What the topology's edges must show, counted here from its calls."""
    out: Samples = {}
    for x in EXPECTED:
        labels = {"client": x.client, "server": x.server, "zerotrace_protocol": x.protocol}
        if x.connection_type:
            labels["connection_type"] = x.connection_type
        durations = x.calls.durations_ns
        out[(names.METRIC_SERVICE_GRAPH_REQUESTS, frozenset(labels.items()))] = len(durations)
        out[(names.METRIC_SERVICE_GRAPH_FAILED, frozenset(labels.items()))] = len(x.calls.errors)
        family = (
            names.METRIC_SERVICE_GRAPH_SERVER_SECONDS
            if x.view == "server"
            else names.METRIC_SERVICE_GRAPH_CLIENT_SECONDS
        )
        for bound in (*BOUNDS_S, float("inf")):
            le = {**labels, "le": number(bound)}
            top = bound * 1e9 if bound == float("inf") else round(bound * 1e9)
            count = sum(1 for d in durations if d <= top)
            out[(f"{family}_bucket", frozenset(le.items()))] = count
        out[(f"{family}_count", frozenset(labels.items()))] = len(durations)
        out[(f"{family}_sum", frozenset(labels.items()))] = sum(durations) / 1e9
    return out


def test_exact_counts_buckets_and_sums(store: DuckDBStore) -> None:
    found = samples_of(exposition(store))
    want = expected_samples()
    assert found.keys() == want.keys()
    for key, value in want.items():
        assert found[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_names_types_and_buckets(store: DuckDBStore) -> None:
    text = exposition(store)
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families == {
        "traces_service_graph_request": "counter",
        "traces_service_graph_request_failed": "counter",
        "traces_service_graph_request_client_seconds": "histogram",
        "traces_service_graph_request_server_seconds": "histogram",
    }
    bucket_line = next(line for line in text.splitlines() if "_client_seconds_bucket{" in line)
    assert 'le="0.0001"' in bucket_line
    assert [number(b) for b in BOUNDS_S][-4:] == ["10.0", "30.0", "60.0", "120.0"]
    # Only the edge no observed client made is measured at the server.
    server_side = [line for line in text.splitlines() if "_server_seconds_count{" in line]
    assert server_side == [
        'traces_service_graph_request_server_seconds_count{client="(unobserved clients)",'
        'server="gateway",connection_type="virtual_node",zerotrace_protocol="http"} 30'
    ]


def test_without_a_spans_index_nothing_is_added() -> None:
    db = DuckDBStore()
    try:
        db.ensure_index(LLM_REQUESTS)
        assert exposition(db) == ""
        db.ensure_index(SPANS)
        text = exposition(db)
    finally:
        db.close()
    assert [(f.name, f.samples) for f in text_string_to_metric_families(text)] == [
        ("traces_service_graph_request", []),
        ("traces_service_graph_request_failed", []),
        ("traces_service_graph_request_client_seconds", []),
        ("traces_service_graph_request_server_seconds", []),
    ]


def test_metrics_over_http_carry_both(store: DuckDBStore) -> None:
    api = HttpApi(store, port=0).start()
    try:
        url = urlparse(api.url)
        connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read().decode()
        connection.close()
    finally:
        api.stop()
    assert (response.status, response.headers["Content-Type"]) == (200, CONTENT_TYPE)
    families = [f.name for f in text_string_to_metric_families(body)]
    assert families[0] == "gen_ai_server_time_to_first_token_seconds"
    assert families[-4:] == [
        "traces_service_graph_request",
        "traces_service_graph_request_failed",
        "traces_service_graph_request_client_seconds",
        "traces_service_graph_request_server_seconds",
    ]
    assert samples_of(body).items() >= expected_samples().items()
