"""GET /metrics: the OpenTelemetry GenAI histograms of the stored LLM requests, on DuckDB filled
through llm_document, read back with prometheus_client's parser and compared with counts made
here from the requests themselves. Also the oracle the OpenSearch test uses."""

from __future__ import annotations

import http.client
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any
from urllib.parse import urlparse

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.test_llm_query_documents import MS, S, llm_request, realistic_requests
from zerotrace.store import GroupKey, Histogram, Query, Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_correlator import h2_llm, llm_apis
from zerotrace_query import gen_ai_metrics
from zerotrace_query.documents import LLM_REQUESTS, llm_document
from zerotrace_query.gen_ai_metrics import (
    METRICS,
    collect,
    error_type,
    exposition,
    operation_and_provider,
)
from zerotrace_query.http_api import HttpApi
from zerotrace_query.prometheus_text import CONTENT_TYPE

pytestmark = pytest.mark.unit

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
SIDES = {"SERVER": ("SERVER", "NETWORK", None), "CLIENT": ("CLIENT", "NETWORK", None)}


# --- the oracle: counts made from the requests, not from the store --------------------------


def expected_samples(requests: Sequence[Mapping[str, Any]]) -> Samples:
    """Every sample /metrics must carry for these requests, keyed by (sample name, labels with
    `le` as a float's repr), counted one request at a time with exact decimal bounds."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = defaultdict(float)
    docs = [llm_document(r)[1] for r in requests]
    for metric in METRICS:
        name = metric.prometheus_name
        scale = metric.scale
        for field, extra in metric.sources:
            for doc in docs:
                value = doc.get(field)
                if value is None or doc.get("observation_point") not in SIDES[metric.side]:
                    continue
                if metric.successful_only and doc["status"] != "ok":
                    continue
                operation, provider = operation_and_provider(doc["endpoint"])
                labels = {
                    "gen_ai_operation_name": operation,
                    "gen_ai_provider_name": provider,
                    "gen_ai_request_model": doc["model"],
                    "service_name": doc["service"],
                    "zerotrace_observation_point": doc.get("observation_point") or "",
                }
                if extra is not None:
                    labels[extra[0]] = extra[1]
                if metric.error_type:
                    labels["error_type"] = error_type(doc["status"], doc.get("status_code"))
                pairs = frozenset((k, v) for k, v in labels.items() if v)
                for bound in (*metric.bounds, float("inf")):
                    inside = bound == float("inf") or value <= Fraction(repr(bound)) * scale
                    key = (name + "_bucket", pairs | {("le", repr(float(bound)))})
                    out[key] += 1 if inside else 0
                out[(name + "_count", pairs)] += 1
                out[(name + "_sum", pairs)] += value
    # Sums were added in the field's units (exact integers); the metric's unit divides once.
    scales = {m.prometheus_name: m.scale for m in METRICS}
    return {
        key: (total / scales[key[0].removesuffix("_sum")] if key[0].endswith("_sum") else total)
        for key, total in out.items()
    }


def parsed_samples(text: str) -> Samples:
    """The samples prometheus_client's parser reads, `le` normalised as a float's repr."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            if "le" in labels:
                labels["le"] = repr(float(labels["le"]))
            key = (sample.name, frozenset(labels.items()))
            assert key not in out, key
            out[key] = sample.value
    return out


def families_and_buckets(text: str) -> dict[str, list[str]]:
    """Each family's type and the `le` values of its first series, as written."""
    found: dict[str, list[str]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "histogram", family.name
        buckets = [s.labels for s in family.samples if s.name.endswith("_bucket")]
        first = {k: v for k, v in buckets[0].items() if k != "le"}
        found[family.name] = [
            labels["le"] for labels in buckets if {**labels, "le": ""} == {**first, "le": ""}
        ]
    return found


def store_with(requests: Sequence[Mapping[str, Any]]) -> DuckDBStore:
    store = DuckDBStore()
    store.ensure_index(LLM_REQUESTS)
    result = store.bulk_upsert(LLM_REQUESTS.name, [llm_document(r) for r in requests])
    assert result.ok
    return store


# --- a few requests, every kind of label --------------------------------------------------------

HAND_MADE = [
    # On bounds exactly: TTFT 1 s and TPOT 10 ms fall in le="1.0" and le="0.01".
    llm_request(request_id="s1", ttft_ns=1000 * MS, tpot_ns=10 * MS),
    llm_request(request_id="s2", ttft_ns=1000 * MS + 1, tpot_ns=10 * MS + 1, input_tokens=4),
    llm_request(
        request_id="s3",
        status_code=503,
        error="HTTP 503",
        ttft_ns=None,
        tpot_ns=None,
        output_tokens=None,
    ),
    llm_request(
        request_id="c1",
        observation_point="CLIENT",
        service='gate"way\\one',  # escaped in the label value, read back whole
        endpoint="messages",
        model="claude-sonnet-4",
        input_tokens=16,
        output_tokens=17,
    ),
    llm_request(request_id="n1", observation_point="NETWORK", error="stream cut", model=""),
    llm_request(request_id="u1", endpoint="some/new/api", model="m\nx"),
]


SERVER_VLLM = frozenset(
    {
        ("gen_ai_operation_name", "chat"),
        ("gen_ai_provider_name", "openai"),
        ("gen_ai_request_model", "llama-3.1-8b-instruct"),
        ("service_name", "vllm"),
        ("zerotrace_observation_point", "SERVER"),
    }
)


def test_hand_made_requests_counted_exactly() -> None:
    store = store_with(HAND_MADE)
    try:
        text = exposition(store)
    finally:
        store.close()
    assert parsed_samples(text) == expected_samples(HAND_MADE)
    samples = parsed_samples(text)
    server = SERVER_VLLM
    ttft = "gen_ai_server_time_to_first_token_seconds"
    assert samples[(ttft + "_bucket", server | {("le", "0.75")})] == 0
    assert samples[(ttft + "_bucket", server | {("le", "1.0")})] == 1  # s1, on the bound
    assert samples[(ttft + "_bucket", server | {("le", "2.5")})] == 2
    assert samples[(ttft + "_count", server)] == 2  # s3 failed: no TTFT
    assert samples[(ttft + "_sum", server)] == 2.000000001
    duration = "gen_ai_server_request_duration_seconds"
    failed = server | {("error_type", "503")}
    assert samples[(duration + "_count", failed)] == 1
    assert samples[(duration + "_count", server)] == 2
    # The wire's view counts on both sides, its cut stream an `_OTHER` error.
    network = frozenset(
        {
            ("gen_ai_operation_name", "chat"),
            ("gen_ai_provider_name", "openai"),
            ("service_name", "vllm"),
            ("zerotrace_observation_point", "NETWORK"),
            ("error_type", "_OTHER"),
        }
    )
    assert samples[(duration + "_count", network)] == 1
    assert samples[("gen_ai_client_operation_duration_seconds_count", network)] == 1
    client = frozenset(
        {
            ("gen_ai_operation_name", "chat"),
            ("gen_ai_provider_name", "anthropic"),
            ("gen_ai_request_model", "claude-sonnet-4"),
            ("service_name", 'gate"way\\one'),
            ("zerotrace_observation_point", "CLIENT"),
        }
    )
    usage = "gen_ai_client_token_usage"
    for kind, tokens, within in (("input", 16, "16.0"), ("output", 17, "64.0")):
        labels = client | {("gen_ai_token_type", kind)}
        assert samples[(usage + "_sum", labels)] == tokens
        assert samples[(usage + "_bucket", labels | {("le", within)})] == 1
        assert samples[(usage + "_bucket", labels | {("le", "4.0")})] == 0
    # The client's request is in no server metric; the servers' in no client metric.
    assert not any(k[0].startswith("gen_ai_server") and client <= k[1] for k in samples)
    assert not any(k[0].startswith("gen_ai_client") and server <= k[1] for k in samples)
    unknown = [k for k in samples if ("gen_ai_operation_name", "some/new/api") in k[1]]
    assert unknown and all(("gen_ai_request_model", "m\nx") in k[1] for k in unknown)
    assert not any(k[0] == "gen_ai_provider_name" for labels in unknown for k in labels[1])


def test_names_types_and_bucket_bounds() -> None:
    store = store_with(HAND_MADE)
    try:
        found = families_and_buckets(exposition(store))
    finally:
        store.close()
    assert found == {
        "gen_ai_server_time_to_first_token_seconds": [
            *("0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1"),
            *("0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "+Inf"),
        ],
        "gen_ai_server_time_per_output_token_seconds": [
            *("0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4"),
            *("0.5", "0.75", "1.0", "2.5", "+Inf"),
        ],
        "gen_ai_server_request_duration_seconds": [
            *("0.01", "0.02", "0.04", "0.08", "0.16", "0.32", "0.64", "1.28", "2.56"),
            *("5.12", "10.24", "20.48", "40.96", "81.92", "+Inf"),
        ],
        "gen_ai_client_operation_duration_seconds": [
            *("0.01", "0.02", "0.04", "0.08", "0.16", "0.32", "0.64", "1.28", "2.56"),
            *("5.12", "10.24", "20.48", "40.96", "81.92", "+Inf"),
        ],
        "gen_ai_client_token_usage": [
            *("1.0", "4.0", "16.0", "64.0", "256.0", "1024.0", "4096.0", "16384.0"),
            *("65536.0", "262144.0", "1.048576e+06", "4.194304e+06", "1.6777216e+07"),
            *("6.7108864e+07", "+Inf"),
        ],
    }


def test_realistic_requests_counted_exactly() -> None:
    requests = realistic_requests(1_700_000_400 * S, 300, seed=11)
    for i, request in enumerate(requests):
        if i % 7 == 0:
            request["observation_point"] = "NETWORK"
    store = store_with(requests)
    try:
        samples = parsed_samples(exposition(store))
    finally:
        store.close()
    assert samples == expected_samples(requests)
    counts = [v for (name, _), v in samples.items() if name.endswith("_count")]
    assert sum(counts) > 300  # not trivially empty: every request is in several families


def test_an_empty_store_has_every_name_and_no_series() -> None:
    store = store_with([])
    try:
        text = exposition(store)
    finally:
        store.close()
    assert [(f.name, f.samples) for f in text_string_to_metric_families(text)] == [
        (m.prometheus_name, []) for m in METRICS
    ]


def test_indexing_again_counts_once() -> None:
    store = store_with(HAND_MADE)
    try:
        before = exposition(store)
        store.bulk_upsert(LLM_REQUESTS.name, [llm_document(r) for r in HAND_MADE])
        assert exposition(store) == before
        store.bulk_upsert(LLM_REQUESTS.name, [llm_document(llm_request(request_id="new"))])
        after = parsed_samples(exposition(store))
    finally:
        store.close()
    key = ("gen_ai_server_time_to_first_token_seconds_count", SERVER_VLLM)
    assert after[key] == parsed_samples(before)[key] + 1 == 3  # cumulative: it only grows


class CountingStore:
    """A store that counts the calls made to it (Store protocol, delegating)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def ensure_index(self, spec: Any) -> None:
        self.inner.ensure_index(spec)

    def bulk_upsert(self, index: str, docs: Any) -> Any:
        return self.inner.bulk_upsert(index, docs)

    def refresh(self, index: str) -> None:
        self.inner.refresh(index)

    def search(self, index: str, query: Query) -> list[dict[str, Any]]:
        self.calls.append("search")
        return self.inner.search(index, query)

    def count(self, index: str, query: Query) -> int:
        self.calls.append("count")
        return self.inner.count(index, query)

    def histogram(
        self,
        index: str,
        query: Query,
        field: str,
        bounds: Sequence[float],
        group_by: Sequence[str] = (),
    ) -> dict[GroupKey, Histogram]:
        self.calls.append(f"histogram {field}")
        return self.inner.histogram(index, query, field, bounds, group_by)

    def close(self) -> None:
        self.inner.close()


def test_a_scrape_aggregates_in_the_store_and_fetches_no_document() -> None:
    store = CountingStore(store_with(HAND_MADE))
    try:
        collect(store)
    finally:
        store.close()
    assert store.calls == [
        "histogram ttft_ns",
        "histogram tpot_ns",
        "histogram duration_ns",
        "histogram input_tokens",
        "histogram output_tokens",
    ]


# --- labels -----------------------------------------------------------------------------------


def test_operations_agree_with_the_correlators_apis() -> None:
    """Every API the correlator recognises has its endpoint here: the operation and provider
    its spans carry, except the OpenAI-compatible ones (no provider on spans, the endpoint as
    operation), which get the conventions' well-known values."""
    apis = [api for _, api in llm_apis._SUFFIXES] + list(llm_apis._GEMINI.values())
    openai = {"chat.completions": "chat", "completions": "text_completion", "responses": "chat"}
    for api in apis:
        if api.provider is None:
            expected = (openai[api.endpoint], "openai")
        else:
            expected = (api.operation, api.provider)
        assert operation_and_provider(api.endpoint) == expected, api.endpoint
    assert operation_and_provider(h2_llm.TRITON_ENDPOINT) == ("text_completion", "")
    assert set(gen_ai_metrics.OPERATIONS) == {a.endpoint for a in apis} | {h2_llm.TRITON_ENDPOINT}
    assert operation_and_provider("x/y") == ("x/y", "")
    assert operation_and_provider(None) == ("", "")


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        ("ok", 200, ""),
        ("ok", None, ""),
        (None, 500, ""),
        ("error", 503, "503"),
        ("error", 404, "404"),
        ("error", 200, "_OTHER"),  # a stream cut after a good start
        ("error", None, "_OTHER"),
    ],
)
def test_error_type(status: str | None, code: int | None, expected: str) -> None:
    assert error_type(status, code) == expected


# --- over HTTP ------------------------------------------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[str, str]]:
    store = store_with(HAND_MADE)
    open_api = HttpApi(store, port=0).start()
    locked = HttpApi(store, port=0, token="s3cret-token").start()
    try:
        yield open_api.url, locked.url
    finally:
        open_api.stop()
        locked.stop()
        store.close()


def get(base: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    url = urlparse(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        body = response.read().decode()
        return response.status, response.headers["Content-Type"], body
    finally:
        connection.close()


def test_metrics_over_http(served: tuple[str, str]) -> None:
    open_url, _ = served
    status, content_type, body = get(open_url, "/metrics")
    assert (status, content_type) == (200, CONTENT_TYPE)
    assert parsed_samples(body) == expected_samples(HAND_MADE)


def test_metrics_need_the_token_when_one_is_set(served: tuple[str, str]) -> None:
    _, locked_url = served
    assert get(locked_url, "/metrics")[0] == 401
    assert get(locked_url, "/metrics", {"Authorization": "Bearer wrong"})[0] == 401
    status, content_type, body = get(
        locked_url, "/metrics", {"Authorization": "Bearer s3cret-token"}
    )
    assert (status, content_type) == (200, CONTENT_TYPE)
    assert parsed_samples(body) == expected_samples(HAND_MADE)


def test_metrics_without_the_llm_index_answer_503() -> None:
    store = DuckDBStore()  # nothing indexed yet: the index does not exist
    api = HttpApi(store, port=0).start()
    try:
        status, content_type, body = get(api.url, "/metrics")
    finally:
        api.stop()
        store.close()
    assert (status, content_type) == (503, "application/json")
    assert "does not exist" in body


def test_merged_groups_sum_the_same_in_any_order() -> None:
    """Groups that share labels (two Gemini endpoints, 200 and 201 answers) are merged in one
    order whatever order the store answered in: double sums depend on it."""
    ttft = METRICS[0]
    point = ("SERVER",)
    groups = [
        (None, ("g", "svc", "generateContent", *point, "ok", 200), Histogram((1,) * 16, 1, 1e16)),
        (
            None,
            ("g", "svc", "streamGenerateContent", *point, "ok", 200),
            Histogram((1,) * 16, 1, 1),
        ),
        (None, ("g", "svc", "generateContent", *point, "ok", None), Histogram((1,) * 16, 1, 1)),
    ]
    forward = gen_ai_metrics.series_of(ttft, groups)
    assert gen_ai_metrics.series_of(ttft, groups[::-1]) == forward
    assert gen_ai_metrics.series_of(ttft, [groups[1], groups[0], groups[2]]) == forward
    ((labels, cumulative, count, _),) = [
        (s.labels, s.cumulative, s.count, s.total) for s in forward
    ]
    assert (cumulative, count) == ((3,) * 16, 3)
    assert dict(labels)["gen_ai_operation_name"] == "generate_content"
