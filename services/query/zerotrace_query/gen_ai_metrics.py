"""The OpenTelemetry GenAI metrics of the LLM requests in the store (pure over the store port):
what the HTTP API's GET /metrics answers, in Prometheus form (prometheus_text).

- gen_ai.server.time_to_first_token (s): gen_ai_server_time_to_first_token_seconds, from
  ttft_ns of successful requests, server side;
- gen_ai.server.time_per_output_token (s): gen_ai_server_time_per_output_token_seconds, from
  tpot_ns of successful requests, server side;
- gen_ai.server.request.duration (s): gen_ai_server_request_duration_seconds, from duration_ns
  (end - start) of every request, server side;
- gen_ai.client.operation.duration (s): gen_ai_client_operation_duration_seconds, the same on
  the client side;
- gen_ai.client.token.usage ({token}): gen_ai_client_token_usage, from input_tokens and
  output_tokens (usage, or counted events when a stream has none) of every request, client
  side.

Buckets are the bounds the GenAI semantic conventions recommend for each (vLLM's TTFT and
inter-token histograms start with the same ones), so a dashboard built for them reads these.

Labels: gen_ai_operation_name and gen_ai_provider_name (from the document's endpoint:
OPERATIONS), gen_ai_request_model, service_name (zerotrace's service of the observed process),
zerotrace_observation_point (SERVER, CLIENT or NETWORK, as the documents and spans spell it),
gen_ai_token_type (input, output) on token usage, and error_type on the two durations when the
request failed: the HTTP status of an error answer ("503"), or the conventions' `_OTHER` for a
failure without one (a stream cut short, a reset). A label with no value is left out.

Sides: server metrics count requests observed at the server (SERVER), client metrics those
observed at the client (CLIENT). A capture on the wire (NETWORK, also any document without a
point) sees both ends' exchange at once, so it counts in both, its label telling it apart: a
request seen at the client and at the server counts once in each side's metrics.

Values are cumulative over every document the store keeps: as requests are indexed the counts
only grow, as a Prometheus histogram's do; a request indexed again (a replay, the same id)
replaces its document and still counts once. A retention purge that drops old documents lowers
them, which Prometheus's rate() and increase() take as a counter reset, as after an exporter's
restart. Cost: five Store.histogram calls a scrape, aggregated inside the store (OpenSearch
aggregations, DuckDB GROUP BY), whatever the number of documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from zerotrace import names
from zerotrace.store import GroupKey, Histogram, Query, Store
from zerotrace_query.documents import LLM_REQUESTS, LLM_STATUS_ERROR, LLM_STATUS_OK
from zerotrace_query.llm_stats import NS_PER_S
from zerotrace_query.prometheus_text import (
    HistogramFamily,
    Series,
    prometheus_name,
    render,
    sanitize,
)

# The bucket bounds the GenAI semantic conventions recommend (gen-ai-metrics.md).
TTFT_BOUNDS_S = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1),
    *(0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
)
TPOT_BOUNDS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
DURATION_BOUNDS_S = (
    *(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64),
    *(1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92),
)
TOKEN_BOUNDS = (
    *(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536),
    *(262144, 1048576, 4194304, 16777216, 67108864),
)
# The conventions' well-known fallback for an error without a more precise name.
ERROR_TYPE_OTHER = "_OTHER"
TOKEN_TYPES = (("input_tokens", "input"), ("output_tokens", "output"))

SERVER = "SERVER"
CLIENT = "CLIENT"
NETWORK = "NETWORK"
_SIDE_POINTS = {SERVER: (SERVER, NETWORK, None), CLIENT: (CLIENT, NETWORK, None)}

# The document's endpoint (zerotrace_correlator/llm_apis.py and h2_llm.py name them) ->
# (gen_ai.operation.name, gen_ai.provider.name). The other APIs as their spans carry them; the
# OpenAI-compatible ones with the conventions' well-known operations (their spans keep the
# endpoint name) and the `openai` provider the conventions require. Triton names no provider.
OPERATIONS: Mapping[str, tuple[str, str]] = {
    "chat.completions": (names.GEN_AI_OPERATION_CHAT, names.GEN_AI_PROVIDER_OPENAI),
    "completions": (names.GEN_AI_OPERATION_TEXT_COMPLETION, names.GEN_AI_PROVIDER_OPENAI),
    "responses": (names.GEN_AI_OPERATION_CHAT, names.GEN_AI_PROVIDER_OPENAI),
    "messages": (names.GEN_AI_OPERATION_CHAT, names.GEN_AI_PROVIDER_ANTHROPIC),
    "generateContent": (names.GEN_AI_OPERATION_GENERATE_CONTENT, names.GEN_AI_PROVIDER_GEMINI),
    "streamGenerateContent": (
        names.GEN_AI_OPERATION_GENERATE_CONTENT,
        names.GEN_AI_PROVIDER_GEMINI,
    ),
    "api/chat": (names.GEN_AI_OPERATION_CHAT, names.GEN_AI_PROVIDER_OLLAMA),
    "api/generate": (names.GEN_AI_OPERATION_TEXT_COMPLETION, names.GEN_AI_PROVIDER_OLLAMA),
    "generate": (names.GEN_AI_OPERATION_TEXT_COMPLETION, names.GEN_AI_PROVIDER_TGI),
    "generate_stream": (names.GEN_AI_OPERATION_TEXT_COMPLETION, names.GEN_AI_PROVIDER_TGI),
    "inference.GRPCInferenceService/ModelStreamInfer": (
        names.GEN_AI_OPERATION_TEXT_COMPLETION,
        "",
    ),
}
# What every store call groups by: one call serves every metric on its field.
GROUP_BY = ("model", "service", "endpoint", "observation_point", "status", "status_code")

LABEL_OPERATION = sanitize(names.ATTR_GEN_AI_OPERATION)
LABEL_PROVIDER = sanitize(names.ATTR_GEN_AI_PROVIDER)
LABEL_MODEL = sanitize(names.ATTR_GEN_AI_REQUEST_MODEL)
LABEL_TOKEN_TYPE = sanitize(names.ATTR_GEN_AI_TOKEN_TYPE)
LABEL_ERROR_TYPE = sanitize(names.ATTR_ERROR_TYPE)
LABEL_SERVICE = sanitize(names.ATTR_SERVICE_NAME)
LABEL_POINT = sanitize(names.ATTR_OBSERVATION_POINT)


@dataclass(frozen=True)
class GenAiMetric:
    """One metric: where its values come from and which documents count."""

    name: str  # OpenTelemetry's (names.METRIC_*)
    unit: str  # UCUM: "s" or "{token}"
    help: str  # the conventions' brief
    bounds: tuple[float, ...]  # in `unit`
    side: str  # SERVER or CLIENT: the observation points that count (module doc)
    # (document field, extra label or None) for each source; all in the same units.
    sources: tuple[tuple[str, tuple[str, str] | None], ...]
    scale: int  # the fields' units per `unit`: NS_PER_S for ns fields of a metric in s
    successful_only: bool = False
    error_type: bool = False

    @property
    def prometheus_name(self) -> str:
        return prometheus_name(self.name, self.unit)


_DURATION = (("duration_ns", None),)
METRICS = (
    GenAiMetric(
        names.METRIC_GEN_AI_SERVER_TTFT,
        "s",
        "Time to generate first token for successful responses.",
        TTFT_BOUNDS_S,
        SERVER,
        (("ttft_ns", None),),
        NS_PER_S,
        successful_only=True,
    ),
    GenAiMetric(
        names.METRIC_GEN_AI_SERVER_TPOT,
        "s",
        "Time per output token generated after the first token for successful responses.",
        TPOT_BOUNDS_S,
        SERVER,
        (("tpot_ns", None),),
        NS_PER_S,
        successful_only=True,
    ),
    GenAiMetric(
        names.METRIC_GEN_AI_SERVER_REQUEST_DURATION,
        "s",
        "Generative AI server request duration such as time-to-last byte or last output token.",
        DURATION_BOUNDS_S,
        SERVER,
        _DURATION,
        NS_PER_S,
        error_type=True,
    ),
    GenAiMetric(
        names.METRIC_GEN_AI_CLIENT_OPERATION_DURATION,
        "s",
        "GenAI operation duration.",
        DURATION_BOUNDS_S,
        CLIENT,
        _DURATION,
        NS_PER_S,
        error_type=True,
    ),
    GenAiMetric(
        names.METRIC_GEN_AI_CLIENT_TOKEN_USAGE,
        "{token}",
        "Number of input and output tokens used.",
        TOKEN_BOUNDS,
        CLIENT,
        tuple((field, (LABEL_TOKEN_TYPE, kind)) for field, kind in TOKEN_TYPES),
        1,
    ),
)


def operation_and_provider(endpoint: str | None) -> tuple[str, str]:
    """(gen_ai.operation.name, gen_ai.provider.name) of an endpoint; an unknown endpoint is its
    own operation, with no provider."""
    return OPERATIONS.get(endpoint or "", (endpoint or "", ""))


def error_type(status: str | None, status_code: int | None) -> str:
    """error.type of a request: "" for success, the status of an HTTP error, else `_OTHER`."""
    if status != LLM_STATUS_ERROR:
        return ""
    return str(status_code) if status_code is not None and status_code >= 400 else ERROR_TYPE_OTHER


def _store_bounds(bounds: Iterable[float], scale: int) -> tuple[float, ...]:
    # Integer field units (ns, tokens) make exact bounds: 0.001 s is 1_000_000 ns, not 999_999.99.
    return tuple(round(b * scale) if scale != 1 else b for b in bounds)


def _add(
    into: dict[tuple[tuple[str, str], ...], Histogram],
    key: tuple[tuple[str, str], ...],
    h: Histogram,
) -> None:
    old = into.get(key)
    if old is not None:
        h = Histogram(
            tuple(a + b for a, b in zip(old.cumulative, h.cumulative, strict=True)),
            old.count + h.count,
            old.total + h.total,
        )
    into[key] = h


def _order(item: tuple[tuple[str, str] | None, GroupKey, Histogram]) -> tuple[object, ...]:
    extra, key, _ = item
    return (extra or ("", ""), tuple((v is None, str(v)) for v in key))


def series_of(
    metric: GenAiMetric, groups: Iterable[tuple[tuple[str, str] | None, GroupKey, Histogram]]
) -> tuple[Series, ...]:
    """The metric's series from store groups, each (extra label, GROUP_BY key, counts): groups
    of the other side dropped, groups with the same labels merged, sums in `unit`, sorted by
    labels. Merged in the groups' own order and scaled once at the end, so the sums are the
    same doubles whatever order a store gave the groups in."""
    merged: dict[tuple[tuple[str, str], ...], Histogram] = {}
    for extra, key, counts in sorted(groups, key=_order):
        model, service, endpoint, point, status, code = key
        if point not in _SIDE_POINTS[metric.side]:
            continue
        operation, provider = operation_and_provider(_text(endpoint))
        labels = [(LABEL_OPERATION, operation), (LABEL_PROVIDER, provider)]
        labels.append((LABEL_MODEL, _text(model)))
        if extra is not None:
            labels.append(extra)
        if metric.error_type:
            code_int = code if isinstance(code, int) else None
            labels.append((LABEL_ERROR_TYPE, error_type(_text(status), code_int)))
        labels += [(LABEL_SERVICE, _text(service)), (LABEL_POINT, _text(point))]
        _add(merged, tuple((k, v) for k, v in labels if v), counts)
    return tuple(
        Series(labels, h.cumulative, h.count, h.total / metric.scale)
        for labels, h in sorted(merged.items())
    )


def _text(value: str | int | None) -> str:
    return "" if value is None else str(value)


def collect(store: Store) -> list[HistogramFamily]:
    """Every metric's family from the store's LLM request documents (module doc)."""
    read: dict[tuple[str, bool], dict[GroupKey, Histogram]] = {}
    families = []
    for metric in METRICS:
        groups = []
        for field, extra in metric.sources:
            if (field, metric.successful_only) not in read:
                equals: dict[str, str | int | float | bool] = (
                    {"status": LLM_STATUS_OK} if metric.successful_only else {}
                )
                read[(field, metric.successful_only)] = store.histogram(
                    LLM_REQUESTS.name,
                    Query(equals=equals),
                    field,
                    _store_bounds(metric.bounds, metric.scale),
                    GROUP_BY,
                )
            found = read[(field, metric.successful_only)]
            groups += [(extra, key, counts) for key, counts in found.items()]
        families.append(
            HistogramFamily(
                metric.prometheus_name, metric.help, metric.bounds, series_of(metric, groups)
            )
        )
    return families


def exposition(store: Store) -> str:
    """GET /metrics's body: every family in the Prometheus text format."""
    return render(collect(store))
