"""gRPC API (schemas/zerotrace_api.proto): the same span search, span latency histograms and
LLM queries as the HTTP API; each method builds a filter, calls the pure function and maps its
dict to messages. With a token (zerotrace_query.api_auth) an interceptor refuses,
UNAUTHENTICATED, every call whose `authorization` metadata is not `Bearer <token>`."""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from zerotrace.errors import ZerotraceError
from zerotrace.store import Store
from zerotrace_query import api_auth
from zerotrace_query.api import zerotrace_api_pb2 as pb
from zerotrace_query.api import zerotrace_api_pb2_grpc as pb_grpc
from zerotrace_query.http_api import host_port
from zerotrace_query.llm_search import (
    DEFAULT_LIST_LIMIT,
    DEFAULT_STATS_LIMIT,
    LlmFilter,
    list_llm_requests,
    llm_concurrency,
    llm_percentiles,
)
from zerotrace_query.llm_stats import NS_PER_S
from zerotrace_query.span_search import SpanFilter, span_histograms, span_page

# LlmRequest message fields, copied from the document when present (None stays unset); the
# once view's annotations are messages, built apart.
_ANNOTATIONS = ("also_seen_at", "client_gap_ns")
_LLM_FIELDS = tuple(n for n in pb.LlmRequest.DESCRIPTOR.fields_by_name if n not in _ANNOTATIONS)


def span_message(doc: dict[str, Any]) -> Any:
    return pb.Span(
        span_id=doc["span_id"],
        trace_id=doc["trace_id"],
        node_id=doc["node_id"],
        pid=doc["pid"],
        tid=doc["tid"],
        process_name=doc["process_name"],
        service=doc["service"],
        kind=doc["kind"],
        name=doc["name"],
        start_ns=doc["start_ns"],
        end_ns=doc["end_ns"],
        status=doc["status"],
        attributes={str(k): str(v) for k, v in (doc.get("attributes") or {}).items()},
    )


def _set(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if v is not None}


def llm_request_message(doc: dict[str, Any]) -> Any:
    message = pb.LlmRequest(**{k: doc[k] for k in _LLM_FIELDS if doc.get(k) is not None})
    for seen in doc.get("also_seen_at") or ():
        message.also_seen_at.add(**_set(seen))
    if doc.get("client_gap_ns"):
        message.client_gap_ns.CopyFrom(pb.LlmClientGap(**_set(doc["client_gap_ns"])))
    return message


def coverage_message(body: dict[str, Any]) -> Any:
    return pb.Coverage(
        count=body["count"],
        total=body["total"],
        limit=body["limit"],
        truncated=body["truncated"],
        complete_from_ns=body.get("complete_from_ns", 0),
        warning=body.get("warning", ""),
        counted=body.get("counted", ""),
        seen_at_both=body.get("seen_at_both", 0),
        records=body.get("records", 0),
        total_records=body.get("total_records", 0),
        pairing_complete=body.get("pairing_complete", False),
    )


def _percentiles(values: dict[str, float] | None) -> Any:
    return pb.Percentiles(**values) if values else None


def percentiles_message(body: dict[str, Any]) -> Any:
    return pb.LlmPercentilesResponse(
        bucket_ns=body["bucket_ns"],
        from_ns=body["from_ns"],
        to_ns=body["to_ns"],
        coverage=coverage_message(body),
        series=[
            pb.LlmPercentileSeries(
                model=s["model"],
                service=s["service"],
                count=s["count"],
                errors=s["errors"],
                ttft_ns=_percentiles(s["ttft_ns"]),
                tpot_ns=_percentiles(s["tpot_ns"]),
                tokens_per_s=_percentiles(s["tokens_per_s"]),
                buckets=[
                    pb.LlmPercentileBucket(
                        start_ns=b["start_ns"],
                        count=b["count"],
                        errors=b["errors"],
                        ttft_ns=_percentiles(b["ttft_ns"]),
                        tpot_ns=_percentiles(b["tpot_ns"]),
                        tokens_per_s=_percentiles(b["tokens_per_s"]),
                        output_tokens=b["output_tokens"],
                        throughput_tokens_per_s=b["throughput_tokens_per_s"],
                    )
                    for b in s["buckets"]
                ],
            )
            for s in body["series"]
        ],
    )


def concurrency_message(body: dict[str, Any]) -> Any:
    return pb.LlmConcurrencyResponse(
        bucket_ns=body["bucket_ns"],
        from_ns=body["from_ns"],
        to_ns=body["to_ns"],
        coverage=coverage_message(body),
        series=[
            pb.LlmConcurrencySeries(
                model=s["model"],
                service=s["service"],
                buckets=[pb.LlmConcurrencyBucket(**b) for b in s["buckets"]],
            )
            for s in body["series"]
        ],
    )


def span_filter(request: Any) -> SpanFilter:
    """The SpanFilter of a ListSpansRequest, checked (ValueError names the bad field)."""
    return SpanFilter(
        kind=request.kind,
        service=request.service,
        pid=request.pid,
        start_ns_from=request.start_ns_from,
        start_ns_to=request.start_ns_to,
        limit=request.limit or 100,
        protocol=request.protocol,
        status=request.status,
        min_duration_ns=request.min_duration_ns,
        max_duration_ns=request.max_duration_ns,
    ).check()


def histograms_message(body: dict[str, Any]) -> Any:
    return pb.SpanHistogramsResponse(
        edges_ns=body["edges_ns"],
        protocols=[
            pb.ProtocolLatency(**{k: v for k, v in p.items() if v is not None})
            for p in body["protocols"]
        ],
    )


def llm_filter(request: Any, stats: bool) -> LlmFilter:
    """The LlmFilter of a request message, checked (ValueError names the bad field)."""
    if not 0 <= request.bucket_s <= 86400 * 366:  # NaN fails too
        raise ValueError("'bucket_s' must be between 0 (automatic) and 31622400 seconds")
    return LlmFilter(
        model=request.model,
        service=request.service,
        status=request.status,
        start_ns_from=request.start_ns_from,
        start_ns_to=request.start_ns_to,
        limit=request.limit or (DEFAULT_STATS_LIMIT if stats else DEFAULT_LIST_LIMIT),
        bucket_ns=round(request.bucket_s * NS_PER_S),
        observation_point=request.observation_point,
    ).check()


class QueryServicer(pb_grpc.QueryServicer):  # type: ignore[misc]  # generated base, untyped
    def __init__(self, store: Store) -> None:
        self._store = store

    def ListSpans(self, request: Any, context: Any) -> Any:
        body = self._spans(span_page, request, context)
        return pb.ListSpansResponse(
            spans=[span_message(d) for d in body["spans"]], total=body["total"]
        )

    def SpanHistograms(self, request: Any, context: Any) -> Any:
        return histograms_message(self._spans(span_histograms, request, context))

    def _spans(self, answer: Any, request: Any, context: Any) -> dict[str, Any]:
        try:
            result: dict[str, Any] = answer(self._store, span_filter(request))
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # abort raises; this line only tells readers and type checkers so
        except ZerotraceError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise
        return result

    def ListLlmRequests(self, request: Any, context: Any) -> Any:
        body = self._answer(list_llm_requests, request, context, stats=False)
        return pb.ListLlmRequestsResponse(
            requests=[llm_request_message(d) for d in body["requests"]],
            coverage=coverage_message(body),
        )

    def LlmPercentiles(self, request: Any, context: Any) -> Any:
        return percentiles_message(self._answer(llm_percentiles, request, context, stats=True))

    def LlmConcurrency(self, request: Any, context: Any) -> Any:
        return concurrency_message(self._answer(llm_concurrency, request, context, stats=True))

    def _answer(self, answer: Any, request: Any, context: Any, stats: bool) -> dict[str, Any]:
        try:
            result: dict[str, Any] = answer(self._store, llm_filter(request, stats))
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # abort raises; this line only tells readers and type checkers so
        except ZerotraceError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise
        return result


def _refuse(request: Any, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.UNAUTHENTICATED, api_auth.DENIED)


# The refusing handler of each kind of method, by (request streaming, response streaming).
_REFUSALS: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


class BearerTokenInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """Lets a call through only when its `authorization` metadata is `Bearer <token>`."""

    def __init__(self, token: str) -> None:
        self._token = token

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        if handler is None or api_auth.bearer_ok(self._token, metadata.get(api_auth.METADATA_KEY)):
            return handler  # None: no such method, which gRPC answers UNIMPLEMENTED
        kind = (handler.request_streaming, handler.response_streaming)
        return _REFUSALS[kind](_refuse)


class GrpcApi:
    """The gRPC API on host:port (port 0: any free one; `address` says which). token: the
    bearer token every call needs ("" = none)."""

    def __init__(
        self, store: Store, host: str = "127.0.0.1", port: int = 50051, token: str = ""
    ) -> None:
        interceptors = [BearerTokenInterceptor(token)] if api_auth.check_token(token) else []
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4), interceptors=interceptors
        )
        pb_grpc.add_QueryServicer_to_server(QueryServicer(store), self._server)
        self.port = self._server.add_insecure_port(host_port(host, port))
        self.address = host_port(host, self.port)

    def start(self) -> GrpcApi:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=1).wait()


def list_spans(address: str, token: str = "", **filters: Any) -> list[Any]:
    """Client helper for the CLI and tests; token: the bearer token to send ("" = none)."""
    return list(_call(address, "ListSpans", pb.ListSpansRequest(**filters), token).spans)


def list_spans_rpc(address: str, token: str = "", **filters: Any) -> Any:
    """Client helpers for tests: the ListSpansResponse (spans and total), the
    SpanHistogramsResponse."""
    return _call(address, "ListSpans", pb.ListSpansRequest(**filters), token)


def span_histograms_rpc(address: str, token: str = "", **filters: Any) -> Any:
    return _call(address, "SpanHistograms", pb.ListSpansRequest(**filters), token)


def _call(address: str, method: str, request: Any, token: str = "") -> Any:
    with grpc.insecure_channel(address) as channel:
        return getattr(pb_grpc.QueryStub(channel), method)(
            request, timeout=10, metadata=api_auth.client_metadata(token)
        )


def list_llm_requests_rpc(address: str, token: str = "", **filters: Any) -> Any:
    """Client helpers for the CLI and tests: the response message."""
    return _call(address, "ListLlmRequests", pb.LlmFilter(**filters), token)


def llm_percentiles_rpc(address: str, token: str = "", **filters: Any) -> Any:
    return _call(address, "LlmPercentiles", pb.LlmFilter(**filters), token)


def llm_concurrency_rpc(address: str, token: str = "", **filters: Any) -> Any:
    return _call(address, "LlmConcurrency", pb.LlmFilter(**filters), token)
