"""gRPC API (schemas/zerotrace_api.proto): the same span search as the HTTP API."""

from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc

from zerotrace.store import Store
from zerotrace_query.api import zerotrace_api_pb2 as pb
from zerotrace_query.api import zerotrace_api_pb2_grpc as pb_grpc
from zerotrace_query.span_search import SpanFilter, search_spans


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


class QueryServicer(pb_grpc.QueryServicer):  # type: ignore[misc]  # generated base, untyped
    def __init__(self, store: Store) -> None:
        self._store = store

    def ListSpans(self, request: Any, context: Any) -> Any:
        flt = SpanFilter(
            kind=request.kind,
            service=request.service,
            pid=request.pid,
            start_ns_from=request.start_ns_from,
            start_ns_to=request.start_ns_to,
            limit=request.limit or 100,
        )
        return pb.ListSpansResponse(spans=[span_message(d) for d in search_spans(self._store, flt)])


class GrpcApi:
    def __init__(self, store: Store, host: str = "127.0.0.1", port: int = 50051) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_QueryServicer_to_server(QueryServicer(store), self._server)
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        self.address = f"{host}:{self.port}"

    def start(self) -> GrpcApi:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=1).wait()


def list_spans(address: str, **filters: Any) -> list[Any]:
    """Client helper for the CLI and tests."""
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.QueryStub(channel)
        return list(stub.ListSpans(pb.ListSpansRequest(**filters), timeout=10).spans)
