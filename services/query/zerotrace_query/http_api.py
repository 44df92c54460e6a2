"""HTTP API: GET /api/v1/spans{,/histogram}, /api/v1/llm/{requests,percentiles,concurrency} (JSON),
/api/v1/traces and /api/v1/traces/{id} (zerotrace_query.trace_search), /api/v1/services/map
(zerotrace_query.service_map), /api/v1/profiles/{flamegraph,diff,catalog} (JSON, folded text,
pprof, speedscope), /api/v1/gpu/{devices,windows,events} and /api/v1/rdma/{ports,windows}
(zerotrace_query.device_search), /api/v1/gpu/models (zerotrace_query.chip_compare), the web pages
(GET /, /spans, /flamegraph, /devices, /static/...), GET /healthz, and GET /metrics: the
OpenTelemetry GenAI histograms of the stored LLM requests in Prometheus's text format
(zerotrace_query.gen_ai_metrics), then the service map's RED metrics
(zerotrace_query.service_map_metrics), then the GPU metrics under DCGM's names and the RDMA
counters (zerotrace_query.device_metrics). Standard library server, one thread per request; the
store does its own locking. Handlers only parse, call a pure function, and write the answer. With a
token (zerotrace_query.api_auth) every request but /healthz needs it, /metrics included (a
Prometheus scrape config sends it as `authorization: {credentials: ...}`): a missing or wrong one
gets 401 and one line of JSON; the pages also take it once in their address and hand the browser a
session cookie."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from zerotrace.errors import ZerotraceError
from zerotrace.store import Store
from zerotrace_query import (
    api_auth,
    chip_compare,
    device_metrics,
    device_search,
    gen_ai_metrics,
    prometheus_text,
    service_map,
    service_map_metrics,
    trace_search,
)
from zerotrace_query.flame_graph import FlameFilter
from zerotrace_query.llm_search import (
    DEFAULT_LIST_LIMIT,
    DEFAULT_STATS_LIMIT,
    LlmFilter,
    list_llm_requests,
    llm_concurrency,
    llm_percentiles,
)
from zerotrace_query.llm_stats import NS_PER_S
from zerotrace_query.profile_formats import folded_text, pprof_bytes, speedscope_json
from zerotrace_query.profile_search import (
    base_filter,
    flame_diff,
    flame_graph,
    merged_profile,
    profile_catalog,
)
from zerotrace_query.span_search import SpanFilter, span_histograms, span_page

log = logging.getLogger(__name__)


def parse_span_filter(query_string: str) -> SpanFilter:
    """?kind=&protocol=&service=&pid=&status=OK|ERROR&min_duration_ns=&max_duration_ns=
    &from=&to=&limit= -> SpanFilter (checked); ValueError names the bad field. from/to: ns
    since the epoch, [from, to); durations: ns, [min, max)."""
    params = {k: v[-1] for k, v in parse_qs(query_string).items()}

    def integer(name: str) -> int:
        try:
            return int(params.get(name, "0") or 0)
        except ValueError:
            raise ValueError(f"query parameter {name!r} must be an integer") from None

    return SpanFilter(
        kind=params.get("kind", ""),
        service=params.get("service", ""),
        pid=integer("pid"),
        start_ns_from=integer("from"),
        start_ns_to=integer("to"),
        limit=integer("limit") or 100,
        protocol=params.get("protocol", ""),
        status=params.get("status", ""),
        min_duration_ns=integer("min_duration_ns"),
        max_duration_ns=integer("max_duration_ns"),
    ).check()


LLM_LIST_PARAMS = frozenset(
    {"model", "service", "status", "from", "to", "limit", "observation_point"}
)
LLM_STATS_PARAMS = LLM_LIST_PARAMS | {"bucket_s"}


def parse_llm_filter(query_string: str, stats: bool = False) -> LlmFilter:
    """?model=&service=&status=ok|error&from=&to=&limit=&observation_point=[&bucket_s=] ->
    LlmFilter (checked); ValueError names the bad parameter. from/to: ns since the epoch;
    bucket_s: seconds; observation_point: absent or "" each request once, CLIENT, SERVER or
    NETWORK that point's records, "all" every record (zerotrace_query/llm_observations.py)."""
    try:
        pairs = parse_qs(query_string, keep_blank_values=True, strict_parsing=bool(query_string))
    except ValueError:
        raise ValueError(f"malformed query string {query_string!r}") from None
    params = {k: v[-1] for k, v in pairs.items()}
    allowed = LLM_STATS_PARAMS if stats else LLM_LIST_PARAMS
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(
            f"unknown query parameter {unknown[0]!r}; known: {', '.join(sorted(allowed))}"
        )

    def integer(name: str, default: int) -> int:
        try:
            return int(params.get(name) or default)
        except ValueError:
            raise ValueError(f"query parameter {name!r} must be an integer") from None

    bucket_ns = 0
    if params.get("bucket_s"):
        try:
            bucket_s = float(params["bucket_s"])
        except ValueError:
            raise ValueError("query parameter 'bucket_s' must be a number of seconds") from None
        if not 0.001 <= bucket_s <= 86400 * 366:
            raise ValueError("query parameter 'bucket_s' must be between 0.001 and 31622400")
        bucket_ns = round(bucket_s * NS_PER_S)
    default_limit = DEFAULT_STATS_LIMIT if stats else DEFAULT_LIST_LIMIT
    return LlmFilter(
        model=params.get("model", ""),
        service=params.get("service", ""),
        status=params.get("status", ""),
        start_ns_from=integer("from", 0),
        start_ns_to=integer("to", 0),
        limit=integer("limit", default_limit),
        bucket_ns=bucket_ns,
        observation_point=params.get("observation_point", ""),
    ).check()


PROFILE_PARAMS = frozenset(
    {"type", "from", "to", "node", "service", "pid", "thread", "frame", "group", "format"}
)
DIFF_PARAMS = PROFILE_PARAMS | {"base_from", "base_to"}
PROFILE_FORMATS = ("json", "folded", "pprof", "speedscope")


def parse_profile_query(
    query_string: str, diff: bool = False
) -> tuple[FlameFilter, dict[str, str]]:
    """?type=&from=&to=&node=&service=&pid=&thread=&frame=&group=thread&format= (diff: also
    base_from=&base_to=) -> (checked FlameFilter, all parameters); ValueError names the bad
    one. from/to: ns since the epoch; type defaults to ON_CPU, format to json."""
    try:
        pairs = parse_qs(query_string, keep_blank_values=True, strict_parsing=bool(query_string))
    except ValueError:
        raise ValueError(f"malformed query string {query_string!r}") from None
    params = {k: v[-1] for k, v in pairs.items()}
    allowed = DIFF_PARAMS if diff else PROFILE_PARAMS
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(
            f"unknown query parameter {unknown[0]!r}; known: {', '.join(sorted(allowed))}"
        )
    for name in ("from", "to", "pid", "thread", "base_from", "base_to"):
        try:
            int(params.get(name) or 0)
        except ValueError:
            raise ValueError(f"query parameter {name!r} must be an integer") from None
    if params.get("format", "json") not in PROFILE_FORMATS:
        raise ValueError(f"'format' must be one of {', '.join(PROFILE_FORMATS)}")
    if params.get("group", "") not in ("", "thread"):
        raise ValueError("'group' may only be 'thread'")
    flt = FlameFilter(
        profile_type=params.get("type") or "ON_CPU",
        node=params.get("node", ""),
        service=params.get("service", ""),
        pid=int(params.get("pid") or 0),
        thread=int(params.get("thread") or 0),
        frame=params.get("frame", ""),
        by_thread=params.get("group") == "thread",
        start_ns_from=int(params.get("from") or 0),
        start_ns_to=int(params.get("to") or 0),
    ).check()
    return flt, params


def profile_body(store: Store, query_string: str, route: str) -> tuple[bytes, str]:
    """(body, content type) of a profile route; ValueError for a bad request."""
    if route == "catalog":
        flt, _ = parse_profile_query(query_string)
        return json.dumps(profile_catalog(store, flt)).encode(), "application/json"
    if route == "diff":
        flt, params = parse_profile_query(query_string, diff=True)
        base = base_filter(flt, int(params.get("base_from") or 0), int(params.get("base_to") or 0))
        return json.dumps(flame_diff(store, base, flt)).encode(), "application/json"
    flt, params = parse_profile_query(query_string)
    fmt = params.get("format", "json")
    if fmt == "json":
        return json.dumps(flame_graph(store, flt)).encode(), "application/json"
    merged, head = merged_profile(store, flt)
    if fmt == "folded":
        return folded_text(merged.stacks).encode(), "text/plain; charset=utf-8"
    if fmt == "pprof":
        duration = max(head["to_ns"] - head["from_ns"], 0)
        data = pprof_bytes(merged.stacks, flt.profile_type, head["from_ns"], duration)
        return data, "application/octet-stream"
    name = f"{flt.service or 'all services'} {flt.profile_type}"
    return speedscope_json(merged.stacks, flt.profile_type, name, flt.by_thread).encode(), (
        "application/json"
    )


WEB_DIR = Path(__file__).resolve().parent / "web"
# Every file the page needs, by URL path; nothing else under web/ is reachable.
WEB_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/static/common.js": ("common.js", "text/javascript; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
    "/flamegraph": ("flamegraph.html", "text/html; charset=utf-8"),
    "/static/flamegraph.js": ("flamegraph.js", "text/javascript; charset=utf-8"),
    "/static/flamegraph.css": ("flamegraph.css", "text/css; charset=utf-8"),
    "/spans": ("spans.html", "text/html; charset=utf-8"),
    "/static/spans.js": ("spans.js", "text/javascript; charset=utf-8"),
    "/services": ("services.html", "text/html; charset=utf-8"),
    "/static/services.js": ("services.js", "text/javascript; charset=utf-8"),
    "/static/services.css": ("services.css", "text/css; charset=utf-8"),
    "/traces": ("traces.html", "text/html; charset=utf-8"),
    "/static/traces.js": ("traces.js", "text/javascript; charset=utf-8"),
    "/static/traces.css": ("traces.css", "text/css; charset=utf-8"),
    "/devices": ("devices.html", "text/html; charset=utf-8"),
    "/static/devices.js": ("devices.js", "text/javascript; charset=utf-8"),
    "/static/devices.css": ("devices.css", "text/css; charset=utf-8"),
}
# The pages a person opens (the others are what they load): they take ?token= once.
PAGES = frozenset(path for path, (_, kind) in WEB_FILES.items() if kind.startswith("text/html"))
PROFILE_ROUTES = {
    "/api/v1/profiles/flamegraph": "flamegraph",
    "/api/v1/profiles/diff": "diff",
    "/api/v1/profiles/catalog": "catalog",
}
SPAN_ROUTES: dict[str, Callable[[Store, SpanFilter], dict[str, Any]]] = {
    "/api/v1/spans": span_page,
    "/api/v1/spans/histogram": span_histograms,
}
LLM_ROUTES: dict[str, tuple[bool, Callable[[Store, LlmFilter], dict[str, Any]]]] = {
    "/api/v1/llm/requests": (False, list_llm_requests),
    "/api/v1/llm/percentiles": (True, llm_percentiles),
    "/api/v1/llm/concurrency": (True, llm_concurrency),
}
METRICS_PATH = "/metrics"


def make_handler(store: Store, token: str = "") -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if not self._authorized(url.path, url.query):
                return
            if url.path == "/healthz":
                self._send(200, {"status": "ok"})
            elif url.path in SPAN_ROUTES:
                try:
                    flt = parse_span_filter(url.query)
                except ValueError as exc:
                    self._send(400, {"error": str(exc)})
                    return
                try:
                    body = SPAN_ROUTES[url.path](store, flt)
                except ZerotraceError as exc:
                    self._send(503, {"error": str(exc)})
                    return
                self._send(200, body)
            elif url.path in LLM_ROUTES:
                stats, answer = LLM_ROUTES[url.path]
                try:
                    llm_filter = parse_llm_filter(url.query, stats=stats)
                except ValueError as exc:
                    self._send(400, {"error": str(exc)})
                    return
                try:
                    body = answer(store, llm_filter)
                except ValueError as exc:  # e.g. too many buckets for the range
                    self._send(400, {"error": str(exc)})
                    return
                except ZerotraceError as exc:
                    self._send(503, {"error": str(exc)})
                    return
                self._send(200, body)
            elif url.path in PROFILE_ROUTES:
                try:
                    data, content_type = profile_body(store, url.query, PROFILE_ROUTES[url.path])
                except ValueError as exc:
                    self._send(400, {"error": str(exc)})
                    return
                except ZerotraceError as exc:
                    self._send(503, {"error": str(exc)})
                    return
                self._send_bytes(200, data, content_type)
            elif url.path.split("/")[:4] == trace_search.TRACES_PATH.split("/"):
                self._send(*trace_search.answer(store, url.path, url.query))
            elif url.path in device_search.ROUTES:
                self._send(*device_search.answer(store, url.path, url.query))
            elif url.path == chip_compare.MODELS_PATH:
                self._send(*chip_compare.answer(store, url.query))
            elif url.path == service_map.MAP_PATH:
                self._send(*service_map.answer(store, url.query, time.time_ns()))
            elif url.path == METRICS_PATH:
                try:
                    text = gen_ai_metrics.exposition(store) + service_map_metrics.exposition(store)
                    text += device_metrics.exposition(store, time.time_ns())
                except ZerotraceError as exc:
                    self._send(503, {"error": str(exc)})
                    return
                self._send_bytes(200, text.encode(), prometheus_text.CONTENT_TYPE)
            elif url.path in WEB_FILES:
                name, content_type = WEB_FILES[url.path]
                self._send_bytes(200, (WEB_DIR / name).read_bytes(), content_type)
            else:
                routes = [*SPAN_ROUTES, trace_search.TRACES_PATH, service_map.MAP_PATH]
                routes += [*LLM_ROUTES, *PROFILE_ROUTES, *device_search.ROUTES]
                routes.append(chip_compare.MODELS_PATH)
                known = ", ".join(["/", *routes, METRICS_PATH])
                self._send(404, {"error": f"no such path {url.path}; try one of {known}"})

        def _authorized(self, path: str, query: str) -> bool:
            """True when the request may go on; else it has been answered (401, or 303 to
            the page without the token it was opened with)."""
            offered = api_auth.page_token(query) if token and path in PAGES else None
            if offered is not None and api_auth.token_ok(token, offered[0]):
                location = f"{path}?{offered[1]}" if offered[1] else path
                headers = {"Location": location, "Set-Cookie": api_auth.session_cookie(token)}
                self._send_bytes(303, b"", "text/plain", headers)
                return False
            if offered is None and api_auth.allowed(
                token, path, self.headers.get("Authorization"), self.headers.get("Cookie")
            ):
                return True
            self._send(401, {"error": api_auth.DENIED}, {"WWW-Authenticate": "Bearer"})
            return False

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            self._send_bytes(status, json.dumps(body).encode(), "application/json", headers)

        def _send_bytes(
            self,
            status: int,
            data: bytes,
            content_type: str,
            headers: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-cache")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            if log.isEnabledFor(logging.DEBUG):  # the request line may hold a page's ?token=
                log.debug("http: %s", api_auth.redact(format % args))

    return Handler


class _Ipv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class HttpApi:
    """The HTTP API on host:port (port 0: any free one; `url` says which). token: the bearer
    token every request needs ("" = none)."""

    def __init__(
        self, store: Store, host: str = "127.0.0.1", port: int = 8080, token: str = ""
    ) -> None:
        server = _Ipv6Server if ":" in host else ThreadingHTTPServer
        self._server = server((host, port), make_handler(store, api_auth.check_token(token)))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http-api", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host_port(str(host), int(port))}"

    def start(self) -> HttpApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def host_port(host: str, port: int) -> str:
    """`host:port`, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
