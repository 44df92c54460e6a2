"""An OTLP trace receiver for tests, built from the official opentelemetry-proto definitions:
a gRPC server registering the package's generated TraceServiceServicer, and an HTTP server
that parses POST /v1/traces bodies as ExportTraceServiceRequest. Both listen on 127.0.0.1
(ports chosen by the kernel), keep every request they accepted, and can be told to answer the
next attempts with failures first (a 503 with Retry-After, UNAVAILABLE, a RetryInfo...).

Use as a context manager: the servers stop on exit, whatever the test did."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from zerotrace_query import otlp_retry

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class GrpcFailure:
    code: grpc.StatusCode
    message: str = "try later"
    retry_delay_s: float | None = None  # sent as a google.rpc.RetryInfo when set


@dataclass(frozen=True)
class HttpFailure:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    content_type: str = "text/plain"


@dataclass
class Received:
    """What one protocol's server saw: every attempt's metadata/headers, and the requests it
    accepted, in order."""

    attempts: int = 0
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


class OtlpReceiver:
    def __init__(self) -> None:
        self.grpc = Received()
        self.http = Received()
        # Answers to the next attempts, one each, before the receiver takes every request:
        # a failure, or None to take that attempt's request.
        self.grpc_failures: list[GrpcFailure | None] = []
        self.http_failures: list[HttpFailure | None] = []
        self.partial: ExportTracePartialSuccess | None = None  # on every accepted request
        self._lock = threading.Lock()
        self._grpc_server: grpc.Server | None = None
        self._http_server: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self.grpc_port = 0
        self.http_port = 0

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def __enter__(self) -> OtlpReceiver:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Servicer(self), server
        )
        self.grpc_port = server.add_insecure_port("127.0.0.1:0")
        self._grpc_server = server
        server.start()
        http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        http.daemon_threads = True
        self._http_server = http
        self.http_port = http.server_address[1]
        self._http_thread = threading.Thread(
            target=http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._http_thread.start()

    def stop(self) -> None:
        if self._grpc_server is not None:
            self._grpc_server.stop(None).wait()
            self._grpc_server = None
        if self._http_server is not None:
            self._http_server.shutdown()
            self._http_server.server_close()
            self._http_server = None
        if self._http_thread is not None:
            self._http_thread.join()
            self._http_thread = None

    def response(self) -> ExportTraceServiceResponse:
        reply = ExportTraceServiceResponse()
        if self.partial is not None:
            reply.partial_success.CopyFrom(self.partial)
        return reply

    def spans(self, protocol: str) -> Iterator[tuple[dict[str, Any], str, Any]]:
        """(resource attributes, scope name, span) of every span `protocol`'s server took."""
        received = self.grpc if protocol == "grpc" else self.http
        for request in received.requests:
            for resource_spans in request.resource_spans:
                resource = decode_attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        yield resource, scope_spans.scope.name, span


def decode_attributes(key_values: Any) -> dict[str, Any]:
    """OTLP KeyValues as {key: python value}, the AnyValue's set field deciding the type."""
    out: dict[str, Any] = {}
    for kv in key_values:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> ExportTraceServiceResponse:
        r = self._receiver
        with r._lock:
            r.grpc.attempts += 1
            r.grpc.headers.append({k: str(v) for k, v in context.invocation_metadata()})
            failure = r.grpc_failures.pop(0) if r.grpc_failures else None
            if failure is None:
                r.grpc.requests.append(request)
        if failure is not None:
            if failure.retry_delay_s is not None:
                details = otlp_retry.rpc_status(
                    failure.code.value[0], failure.message, failure.retry_delay_s
                )
                context.set_trailing_metadata(((otlp_retry.GRPC_STATUS_DETAILS_KEY, details),))
            context.abort(failure.code, failure.message)
        return r.response()


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self._answer(404, b"not found", "text/plain")
                return
            with receiver._lock:
                receiver.http.attempts += 1
                receiver.http.headers.append({k.lower(): v for k, v in self.headers.items()})
                failure = receiver.http_failures.pop(0) if receiver.http_failures else None
            if failure is not None:
                self._answer(failure.status, failure.body, failure.content_type, failure.headers)
                return
            if self.headers.get("Content-Type") != PROTOBUF:
                self._answer(415, b"want application/x-protobuf", "text/plain")
                return
            try:
                request = ExportTraceServiceRequest.FromString(body)
            except DecodeError:
                status = otlp_retry.rpc_status(3, "the body is not an ExportTraceServiceRequest")
                self._answer(400, status, PROTOBUF)
                return
            with receiver._lock:
                receiver.http.requests.append(request)
            self._answer(200, receiver.response().SerializeToString(), PROTOBUF)

        def _answer(
            self,
            status: int,
            body: bytes,
            content_type: str,
            headers: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

    return Handler
