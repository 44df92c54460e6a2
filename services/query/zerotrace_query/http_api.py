"""HTTP API: GET /api/v1/spans (JSON), GET /healthz. Standard library server, one thread per
request; the store does its own locking."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from zerotrace.errors import ZerotraceError
from zerotrace.store import Store
from zerotrace_query.span_search import SpanFilter, search_spans

log = logging.getLogger(__name__)


def parse_span_filter(query_string: str) -> SpanFilter:
    """?kind=&service=&pid=&from=&to=&limit= -> SpanFilter; ValueError names the bad field."""
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
    )


def make_handler(store: Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path == "/healthz":
                self._send(200, {"status": "ok"})
            elif url.path == "/api/v1/spans":
                try:
                    flt = parse_span_filter(url.query)
                except ValueError as exc:
                    self._send(400, {"error": str(exc)})
                    return
                try:
                    spans = search_spans(store, flt)
                except ZerotraceError as exc:
                    self._send(503, {"error": str(exc)})
                    return
                self._send(200, {"spans": spans, "count": len(spans)})
            else:
                self._send(404, {"error": f"no such path {url.path}; try /api/v1/spans"})

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http: " + format, *args)

    return Handler


class HttpApi:
    def __init__(self, store: Store, host: str = "127.0.0.1", port: int = 8080) -> None:
        self._server = ThreadingHTTPServer((host, port), make_handler(store))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http-api", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HttpApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
