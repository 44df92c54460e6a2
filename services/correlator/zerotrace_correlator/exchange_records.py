"""Finished HTTP exchanges as derived records: a derived.span for every exchange and a
derived.llm for every LLM API one (llm_apis.py). Pure.

Ids are deterministic (conn_id, the exchange's start and its rank among exchanges starting
at the same nanosecond), so a replay of the same raw events yields the same ids, also when it
starts mid-connection (where the index on the connection would differ); the LLM record's id is
its span's id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zerotrace import names
from zerotrace.service_identity import record_service
from zerotrace_correlator.conversation import CLIENT, NETWORK, SERVER, Exchange
from zerotrace_correlator.fileio_spans import stable_id
from zerotrace_correlator.llm_metrics import ContentTimeline, compute_timings
from zerotrace_correlator.span_timings import phase_attributes

UNKNOWN_MODEL = "unknown"
# A packet capture sees both ends; spans from it are filed as client spans (the convention
# that EGRESS packets go client->server makes the capture point the client's side).
_KIND = {
    CLIENT: names.SPAN_KIND_HTTP_CLIENT,
    SERVER: names.SPAN_KIND_HTTP_SERVER,
    NETWORK: names.SPAN_KIND_HTTP_CLIENT,
}


def exchange_span_id(ex: Exchange) -> str:
    return stable_id("http", ex.conn_id, str(ex.start_rank), str(ex.start_ns), length=8)


def endpoint_attributes(origin: Mapping[str, Any], requests_sent_locally: bool) -> dict[str, str]:
    """Who asked and who answered, and the observed process: every span of a connection,
    HTTP's and other protocols' (proto_records.py), carries these."""
    local = (str(origin.get("local_addr", "")), str(origin.get("local_port", "")))
    remote = (str(origin.get("remote_addr", "")), str(origin.get("remote_port", "")))
    client, server = (local, remote) if requests_sent_locally else (remote, local)
    seq, task = origin.get("tcp_seq"), origin.get("py_task")
    extra = {} if seq is None else {names.ATTR_TCP_REQUEST_SEQ: str(seq)}
    if task and requests_sent_locally:  # a client's request, written by this asyncio task
        extra[names.ATTR_ASYNC_TASK] = f"{task:x}"
    return {
        **extra,
        names.ATTR_SERVER_ADDRESS: server[0],
        names.ATTR_SERVER_PORT: server[1],
        names.ATTR_CLIENT_ADDRESS: client[0],
        names.ATTR_CLIENT_PORT: client[1],
        names.ATTR_PROCESS_PID: str(origin.get("pid", "")),
        names.ATTR_THREAD_ID: str(origin.get("tid", "")),
        names.ATTR_PROCESS_NAME: str(origin.get("process_name", "")),
    }


# Request headers kept on the span for trace assembly (trace_assembly.propagated_ids): ids the
# application propagates, never credentials.
_HEADER_ATTR_PREFIX = "http.request.header."
_PROPAGATED = {
    attr.removeprefix(_HEADER_ATTR_PREFIX): attr
    for attr in (names.ATTR_HEADER_TRACEPARENT, names.ATTR_HEADER_B3, names.ATTR_HEADER_REQUEST_ID)
}
MAX_HEADER_VALUE = 256


def propagated_headers(headers: Sequence[tuple[str, str]]) -> dict[str, str]:
    """traceparent, b3 (the single header, or X-B3-TraceId and X-B3-SpanId as one) and
    X-Request-ID, as span attributes; the first of each, values capped."""
    out: dict[str, str] = {}
    multi: dict[str, str] = {}
    for name, value in headers:
        attr = _PROPAGATED.get(name)
        if attr is not None:
            out.setdefault(attr, value.strip()[:MAX_HEADER_VALUE])
        elif name in ("x-b3-traceid", "x-b3-spanid"):
            multi.setdefault(name, value.strip()[:64])
    if names.ATTR_HEADER_B3 not in out and "x-b3-traceid" in multi:
        out[names.ATTR_HEADER_B3] = "-".join(
            v for v in (multi["x-b3-traceid"], multi.get("x-b3-spanid")) if v
        )
    return out


def http_span(ex: Exchange) -> dict[str, Any]:
    origin = ex.origin
    request, response, llm = ex.request, ex.response, ex.llm
    path = request.target.split("?", 1)[0]
    attributes = {
        names.ATTR_HTTP_METHOD: request.method,
        names.ATTR_URL_PATH: path,
        **endpoint_attributes(origin, ex.requests_sent_locally),
        names.ATTR_NETWORK_PROTOCOL_VERSION: request.version,
        names.ATTR_HTTP_REQUEST_BODY_SIZE: str(ex.request_body_bytes),
        names.ATTR_OBSERVATION_POINT: ex.observation_point,
        names.ATTR_SOURCE_EVENTS: str(ex.source_events),
    }
    attributes.update(propagated_headers(request.headers))
    if ex.response_task and not ex.requests_sent_locally:  # a server's answer, by this task
        attributes[names.ATTR_ASYNC_TASK] = f"{ex.response_task:x}"
    error = _llm_error(ex)
    # A capture gap leaves the exchange fine and only our view of it short: not a failure.
    failed = _framing_error(ex) is not None or (llm is not None and llm.failed)
    if ex.gap:
        attributes[names.ATTR_CAPTURE_GAP] = "true"
    if response is not None:
        attributes[names.ATTR_HTTP_STATUS] = str(response.status)
        attributes[names.ATTR_HTTP_RESPONSE_BODY_SIZE] = str(ex.response_body_bytes)
        if ex.response_end_ns is not None:
            attributes.update(
                phase_attributes(
                    ex.start_ns, ex.request_end_ns, response.start_ns, ex.response_end_ns
                )
            )
        # OpenTelemetry HTTP conventions: 4xx fails a client span, only 5xx a server span.
        threshold = 500 if ex.observation_point == SERVER else 400
        if response.status >= threshold:
            failed = True
            attributes[names.ATTR_ERROR_TYPE] = str(response.status)
    if error is not None:
        attributes.setdefault(names.ATTR_ERROR_TYPE, error.split(":", 1)[0])
        attributes[names.ATTR_ERROR_MESSAGE] = error
    if ex.endpoint is not None:
        api = ex.api
        attributes[names.ATTR_GEN_AI_OPERATION] = ex.endpoint if api is None else api.operation
        if api is not None and api.provider is not None:
            attributes[names.ATTR_GEN_AI_PROVIDER] = api.provider
        model = ex.request_info.model if ex.request_info is not None else None
        if model:
            attributes[names.ATTR_GEN_AI_REQUEST_MODEL] = model
        if llm is not None:
            if llm.model:
                attributes[names.ATTR_GEN_AI_RESPONSE_MODEL] = llm.model
            if llm.input_tokens is not None:
                attributes[names.ATTR_GEN_AI_INPUT_TOKENS] = str(llm.input_tokens)
            if llm.output_tokens is not None:
                attributes[names.ATTR_GEN_AI_OUTPUT_TOKENS] = str(llm.output_tokens)
            if llm.finish_reason:
                attributes[names.ATTR_GEN_AI_FINISH_REASONS] = llm.finish_reason
    span_id = exchange_span_id(ex)
    return {
        "span_id": span_id,
        "trace_id": stable_id("trace", ex.conn_id, str(ex.start_rank), str(ex.start_ns), length=16),
        "parent_span_id": None,
        "node_id": str(origin.get("node_id", "")),
        "pid": int(origin.get("pid", 0)),
        "tid": int(origin.get("tid", 0)),
        "process_name": str(origin.get("process_name", "")),
        "container_id": origin.get("container_id"),
        "service": record_service(origin),
        "kind": _KIND[ex.observation_point],
        "name": f"{request.method} {path}",
        "start_ns": ex.start_ns,
        "end_ns": ex.end_ns,
        "status": "ERROR" if failed else "OK",
        "attributes": attributes,
        "source_event_ids": list(ex.source_event_ids),
    }


def llm_request(ex: Exchange) -> dict[str, Any] | None:
    """The derived.llm record of an LLM API exchange; None for any other."""
    if ex.endpoint is None:
        return None
    info, llm, response = ex.request_info, ex.llm, ex.response
    timings = compute_timings(
        ex.start_ns,
        None if response is None else response.start_ns,
        ex.end_ns,
        ContentTimeline() if llm is None else llm.timeline,
        None if llm is None else llm.output_tokens,
    )
    model = (info.model if info else None) or (llm.model if llm else None) or UNKNOWN_MODEL
    span_id = exchange_span_id(ex)
    origin = ex.origin
    return {
        "request_id": span_id,
        "span_id": span_id,
        "node_id": str(origin.get("node_id", "")),
        "service": record_service(origin),
        "observation_point": ex.observation_point,
        "model": model,
        "endpoint": ex.endpoint,
        "stream": llm.stream if llm is not None else bool(info and info.stream),
        "start_ns": ex.start_ns,
        "end_ns": ex.end_ns,
        "ttft_ns": timings.ttft_ns,
        "tpot_ns": timings.tpot_ns,
        "input_tokens": None if llm is None else llm.input_tokens,
        "output_tokens": timings.output_tokens,
        "output_tokens_estimated": timings.output_tokens_estimated,
        "finish_reason": None if llm is None else llm.finish_reason,
        "error": _llm_error(ex),
        "cached_tokens": None if llm is None else llm.cached_tokens,
        "itl_p50_ns": timings.itl_p50_ns,
        "itl_p99_ns": timings.itl_p99_ns,
        "itl_max_ns": timings.itl_max_ns,
        "tokens_per_s": timings.tokens_per_s,
        "status_code": None if response is None else response.status,
        "path": ex.request.target.split("?", 1)[0],
        "pid": None if ex.observation_point == NETWORK else int(origin.get("pid", 0)),
        "first_byte_ns": timings.first_byte_ns,
        "content_events": timings.content_events,
    }


def _framing_error(ex: Exchange) -> str | None:
    """The HTTP framing's complaint, unless the stream inside reached its final event: an SDK
    stops reading at `data: [DONE]` and may leave the chunked terminator unread, and if the
    connection then closes, framing says "incomplete" while the stream was whole."""
    return None if ex.llm is not None and ex.llm.done else ex.error


def _llm_error(ex: Exchange) -> str | None:
    return (ex.llm.error if ex.llm is not None else None) or _framing_error(ex)
