"""OTLP trace export of a time window (the I/O shell): read, link, encode, send, retry.

`export_window` reads the spans that started in [from, to) and the links trace assembly
wrote for them, puts the traces together with `trace_trees.link` (as every view does), and
sends them in batches to an OTLP receiver over gRPC (TraceService/Export, port 4317) or HTTP
(POST /v1/traces, application/x-protobuf, port 4318). Encoding is otlp_spans', the retry
rules otlp_retry's and the attempt loop retry_policy's; this module only moves bytes.

A span whose parent started before the window keeps its parent and its trace's id: the
ancestors outside the window are read too (link by link, as `trace_trees.trace` follows
them) so the trace id is the root's, the same one the earlier window's export gave; they are
not sent again. The window is held in memory to be linked: at most MAX_WINDOW_SPANS spans.

Errors, each one line: ConfigError for a bad endpoint or protocol, or a receiver's final
refusal (a 400 is never retried); TransientIO when the receiver stayed away or busy past the
time allowed (`give_up_after_s` for each batch). Both say what was sent before.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from zerotrace import names
from zerotrace.clock import Clock, SystemClock
from zerotrace.errors import ConfigError
from zerotrace.store import Query, Store
from zerotrace.store_rules import MAX_LIMIT
from zerotrace_query import otlp_retry, otlp_spans, retry_policy, trace_trees, window_read
from zerotrace_query.documents import SPANS, TRACE_EDGES

PROTOCOL_GRPC = names.PROTOCOL_GRPC
PROTOCOL_HTTP = "http"
DEFAULT_PORTS = {PROTOCOL_GRPC: 4317, PROTOCOL_HTTP: 4318}
TRACES_PATH = "/v1/traces"
CONTENT_TYPE = "application/x-protobuf"
# The OpenTelemetry SDKs' default batch (BatchSpanProcessor's max export batch size): a
# request of 512 spans stays far below a receiver's usual 4 MiB message limit.
BATCH_SPANS = 512
# Linking needs the whole window in memory (a few KiB a span): refuse more than this, and
# say to export shorter windows.
MAX_WINDOW_SPANS = 500_000
# Ancestors read outside the window, at most (each costs two store searches).
MAX_ANCESTORS = 10_000
MAX_MESSAGES = 5  # distinct partial-success messages kept for the summary


@dataclass
class ExportResult:
    """What an export sent. `spans`: spans in requests the receiver took; `rejected`: of
    those, how many it said it dropped (OTLP partial success), with its messages."""

    protocol: str
    target: str
    spans: int = 0
    rejected: int = 0
    batches: int = 0
    retries: int = 0
    messages: list[str] = field(default_factory=list)

    def summary(self) -> str:
        line = (
            f"OTLP/{self.protocol} {self.target}: {self.spans} spans sent in "
            f"{self.batches} request{'s' if self.batches != 1 else ''}"
        )
        line += retry_policy.retries_note(self.retries)
        if self.rejected:
            line += f", {self.rejected} rejected by the receiver"
            if self.messages:
                line += f" ({'; '.join(self.messages)})"
        return line


@dataclass(frozen=True)
class Answer:
    """A request the receiver took: how many of its spans it said it dropped, and why."""

    rejected: int = 0
    message: str = ""


class Sender:
    """Sends one encoded request, once: its Answer, or a retry_policy.Failure (to be sent
    again after its wait, or refused for good). Implementations: _GrpcSender, _HttpSender."""

    target: str

    def send(
        self, request: ExportTraceServiceRequest, attempt: int, now_ns: int
    ) -> Answer | retry_policy.Failure:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def export_window(
    store: Store,
    from_ns: int,
    to_ns: int,
    endpoint: str,
    protocol: str,
    *,
    headers: Mapping[str, str] | None = None,
    batch_spans: int = BATCH_SPANS,
    timeout_s: float = 10.0,
    give_up_after_s: float = 60.0,
    edge_margin_ns: int = window_read.LINK_MARGIN_NS,
    backoff: otlp_retry.Backoff | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ExportResult:
    """Sends every span that started in [from_ns, to_ns), linked into its trace, to the OTLP
    receiver at `endpoint` ("host[:port]" or a URL; protocol "grpc" or "http"). `headers` go
    with every request (an API key, say). Blocks until all are sent; raises ConfigError or
    TransientIO with one line (module docstring)."""
    if protocol not in DEFAULT_PORTS:
        raise ConfigError(f"OTLP protocol {protocol!r} is unknown: use 'grpc' or 'http'.")
    if to_ns <= from_ns:
        raise ConfigError("The export window is empty: '--to' must be after '--from'.")
    if batch_spans < 1:
        raise ConfigError("An OTLP batch must hold at least one span.")
    clock = clock or SystemClock()
    backoff = backoff or otlp_retry.Backoff()
    sender: Sender = (
        _GrpcSender(endpoint, headers or {}, timeout_s, backoff)
        if protocol == PROTOCOL_GRPC
        else _HttpSender(endpoint, headers or {}, timeout_s, backoff)
    )
    result = ExportResult(protocol, sender.target)
    try:
        spans = window_spans(store, from_ns, to_ns, edge_margin_ns)
        for batch in _batches(spans, batch_spans):
            _deliver(sender, batch, result, clock, sleep, give_up_after_s)
    finally:
        sender.close()
    return result


def window_spans(
    store: Store,
    from_ns: int,
    to_ns: int,
    edge_margin_ns: int = window_read.LINK_MARGIN_NS,
    page: int = MAX_LIMIT,
) -> list[dict[str, Any]]:
    """The spans that started in [from_ns, to_ns), linked (trace_trees.link) with their
    ancestors outside the window read to find each trace's root; ordered by start. Read
    `page` documents a store query at most (window_read.documents)."""
    spans: dict[str, dict[str, Any]] = {}
    for span in window_read.documents(store, SPANS, from_ns, to_ns, page):
        spans[str(span["span_id"])] = span
        if len(spans) > MAX_WINDOW_SPANS:
            raise ConfigError(
                f"The window holds more than {MAX_WINDOW_SPANS} spans: export shorter windows."
            )
    low, high = max(from_ns - edge_margin_ns, 0), to_ns + edge_margin_ns
    edges = {str(e["_id"]): e for e in window_read.documents(store, TRACE_EDGES, low, high, page)}
    ancestors = _ancestors(store, spans, edges)
    linked = trace_trees.link([*spans.values(), *ancestors.values()], edges.values())
    return [s for s in linked if str(s["span_id"]) in spans]


def _ancestors(
    store: Store, spans: Mapping[str, Any], edges: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The spans outside the window that the window's spans descend from, following links up
    for trace_trees.MAX_ROUNDS rounds; adds their links to `edges`."""
    found: dict[str, dict[str, Any]] = {}
    frontier = set(spans)
    for _ in range(trace_trees.MAX_ROUNDS):
        parent_of = trace_trees.parents(edges.values())
        wanted = sorted(
            {parent_of[c] for c in frontier if c in parent_of} - spans.keys() - found.keys()
        )[: max(MAX_ANCESTORS - len(found), 0)]
        frontier = set()
        for span_id in wanted:
            for span in store.search(SPANS.name, Query(equals={"span_id": span_id}, limit=1)):
                found[span_id] = span
                frontier.add(span_id)
                up = Query(equals={"child_span_id": span_id}, limit=MAX_LIMIT)
                edges.update((str(e["_id"]), e) for e in store.search(TRACE_EDGES.name, up))
        if not frontier:
            break
    return found


def _batches(spans: Sequence[dict[str, Any]], size: int) -> Iterator[Sequence[dict[str, Any]]]:
    for i in range(0, len(spans), size):
        yield spans[i : i + size]


def _deliver(
    sender: Sender,
    batch: Sequence[dict[str, Any]],
    result: ExportResult,
    clock: Clock,
    sleep: Callable[[float], None],
    give_up_after_s: float,
) -> None:
    request = otlp_spans.export_request(batch)
    ending = retry_policy.send_within(
        lambda attempt: sender.send(request, attempt, clock.now_ns()),
        clock.now_ns,
        sleep,
        give_up_after_s,
        refused=f"The OTLP receiver at {sender.target} refused the spans",
        gave_up=f"OTLP export to {sender.target} gave up",
        before=f"{result.spans} spans were sent before",
    )
    answer = ending.taken or Answer()
    result.retries += ending.retries
    result.spans += len(batch)
    result.batches += 1
    result.rejected += answer.rejected
    if answer.message not in ("", *result.messages) and len(result.messages) < MAX_MESSAGES:
        result.messages.append(answer.message)


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str  # an IPv6 address in brackets
    port: int
    path: str


def parse_endpoint(endpoint: str, protocol: str) -> Endpoint:
    """ "host[:port]" (OTLP's port for the protocol when none is given) or an http(s) URL
    (its own port, else its scheme's, as the OpenTelemetry SDKs read an endpoint URL)."""
    text = endpoint.strip()
    if not text:
        raise ConfigError("The OTLP endpoint is empty: give host[:port] or an http(s) URL.")
    bare = "://" not in text
    parts = urllib.parse.urlsplit(f"http://{text}" if bare else text)
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"The OTLP endpoint {endpoint!r} has a bad port.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"The OTLP endpoint {endpoint!r} is not host[:port] or an http(s) URL.")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = DEFAULT_PORTS[protocol] if bare else (443 if parts.scheme == "https" else 80)
    return Endpoint(parts.scheme, host, port or default, parts.path)


def grpc_target(endpoint: str) -> tuple[str, bool]:
    """(host:port, TLS?) for a gRPC channel: TLS only for an https URL."""
    where = parse_endpoint(endpoint, PROTOCOL_GRPC)
    return f"{where.host}:{where.port}", where.scheme == "https"


def http_url(endpoint: str) -> str:
    """The URL to POST to: the endpoint with /v1/traces added, unless it ends so already."""
    where = parse_endpoint(endpoint, PROTOCOL_HTTP)
    path = where.path.rstrip("/")
    if not path.endswith(TRACES_PATH):
        path += TRACES_PATH
    return f"{where.scheme}://{where.host}:{where.port}{path}"


class _GrpcSender(Sender):
    def __init__(
        self,
        endpoint: str,
        headers: Mapping[str, str],
        timeout_s: float,
        backoff: otlp_retry.Backoff,
    ) -> None:
        self.target, secure = grpc_target(endpoint)
        self._backoff = backoff
        self._channel = (
            grpc.secure_channel(self.target, grpc.ssl_channel_credentials())
            if secure
            else grpc.insecure_channel(self.target)
        )
        self._stub = TraceServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = tuple((k.lower(), v) for k, v in headers.items())
        self._timeout_s = timeout_s

    def send(
        self, request: ExportTraceServiceRequest, attempt: int, now_ns: int
    ) -> Answer | retry_policy.Failure:
        try:
            response: ExportTraceServiceResponse = self._stub.Export(
                request, timeout=self._timeout_s, metadata=self._metadata
            )
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = error.details() if isinstance(error, grpc.Call) else str(error)
            trailers = error.trailing_metadata() if isinstance(error, grpc.Call) else ()
            status = dict(trailers or ()).get(otlp_retry.GRPC_STATUS_DETAILS_KEY)
            delay = otlp_retry.retry_info_delay_s(status if isinstance(status, bytes) else None)
            wait = otlp_retry.grpc_wait_s(code.name, delay, attempt, self._backoff)
            return retry_policy.Failure(f"{code.name}: {details}", wait)
        partial = response.partial_success
        return Answer(rejected=int(partial.rejected_spans), message=partial.error_message)

    def close(self) -> None:
        self._channel.close()


class _HttpSender(Sender):
    def __init__(
        self,
        endpoint: str,
        headers: Mapping[str, str],
        timeout_s: float,
        backoff: otlp_retry.Backoff,
    ) -> None:
        self.target = http_url(endpoint)
        self._backoff = backoff
        self._client = httpx.Client(
            timeout=timeout_s, headers={**headers, "Content-Type": CONTENT_TYPE}
        )

    def send(
        self, request: ExportTraceServiceRequest, attempt: int, now_ns: int
    ) -> Answer | retry_policy.Failure:
        try:
            response = self._client.post(self.target, content=request.SerializeToString())
        except httpx.TransportError as error:  # refused, reset, timed out: as a 503 would be
            return retry_policy.connection_failure(error, attempt, self._backoff)
        protobuf = CONTENT_TYPE in response.headers.get("content-type", "")
        if response.is_success:
            reply = ExportTraceServiceResponse()
            if response.content and protobuf:
                try:
                    reply.ParseFromString(response.content)
                except DecodeError:  # the spans were taken; only the details are unreadable
                    reply.Clear()
            partial = reply.partial_success
            return Answer(rejected=int(partial.rejected_spans), message=partial.error_message)
        # OTLP/HTTP error bodies are a google.rpc.Status; some receivers answer in text.
        reason = (
            otlp_retry.status_message(response.content)
            if protobuf
            else retry_policy.one_line(response.text)
        )
        return retry_policy.http_failure(
            response.status_code,
            reason,
            response.headers.get("retry-after"),
            attempt,
            now_ns,
            self._backoff,
            otlp_retry.RETRYABLE_HTTP,
        )

    def close(self) -> None:
        self._client.close()
