"""A stand-in for Grafana Pyroscope's ingest endpoint (POST /ingest), for the export tests: it
keeps every request (query parameters, headers, body) and answers from a script first (e.g. a
429 with Retry-After, a 503), then 200. It checks what Pyroscope itself would refuse: a
missing name, from or until, a format other than pprof or folded, an application name or a
label key with characters Pyroscope's name parser rejects, an empty body.

No real Pyroscope runs in these tests (it is a Go binary that cannot be installed here); the
checks follow its ingest handler: pkg/og/storage/segment/key.go and pkg/og/flameql (name
syntax), pkg/og/convert/pprof (a raw pprof body when the request is not multipart).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

_APP = re.compile(r"[A-Za-z0-9_./-]+")
_KEY = re.compile(r"[A-Za-z0-9_.]+")


@dataclass
class Received:
    path: str
    params: dict[str, str]
    headers: dict[str, str]  # names in lower case
    body: bytes


def parse_name(name: str) -> tuple[str, dict[str, str]]:
    """(application, labels) as Pyroscope's key parser reads `app{k=v,...}`; ValueError for
    what it refuses."""
    app, _, rest = name.partition("{")
    if not _APP.fullmatch(app.strip()):
        raise ValueError(f"bad application name {app!r}")
    labels: dict[str, str] = {}
    inner = rest.rstrip("}")
    for pair in filter(None, inner.split(",")):
        key, sep, value = pair.partition("=")
        if not sep or not _KEY.fullmatch(key.strip()):
            raise ValueError(f"bad label {pair!r}")
        labels[key.strip()] = value.strip()
    return app.strip(), labels


@dataclass
class Receiver:
    url: str
    script: list[tuple[int, dict[str, str]]]
    received: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why requests were refused (400)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def accepted(self) -> list[Received]:
        """The requests answered 200."""
        with self.lock:
            return [r for r in self.received if r.params.get("_status") == "200"]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            parts = urlsplit(self.path)
            params = dict(parse_qsl(parts.query, keep_blank_values=True))
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            why = self._check(parts.path, params, body)
            with receiver.lock:
                status, headers = receiver.script.pop(0) if receiver.script else (200, {})
                if why and status == 200:
                    status = 400
                    receiver.refused.append(why)
                params["_status"] = str(status)
                receiver.received.append(
                    Received(
                        parts.path, params, {k.lower(): v for k, v in self.headers.items()}, body
                    )
                )
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            text = (why or "ok").encode()
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def _check(self, path: str, params: dict[str, str], body: bytes) -> str:
            if path != "/ingest":
                return f"no route {path}"
            for name in ("name", "from", "until"):
                if not params.get(name):
                    return f"{name} is required"
            if params.get("format", "folded") not in ("pprof", "folded"):
                return f"unknown format {params['format']}"
            try:
                parse_name(params["name"])
            except ValueError as exc:
                return str(exc)
            if not (params["from"].isdigit() and params["until"].isdigit()):
                return "from/until must be unix seconds"
            return "" if body else "empty body"

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextmanager
def pyroscope_receiver(
    script: list[tuple[int, dict[str, str]]] | None = None,
) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1 (a free port) for the `with` block; stopped after it."""
    receiver = Receiver("", list(script or []))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
