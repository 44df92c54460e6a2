"""The CLI's GET of a query service route (zerotrace_cli/api_fetch.py), against a stub HTTP
server on 127.0.0.1: the body and the token sent, and each failure as its one line (the
service's JSON `error`, else the HTTP reason; no service at all, with the caller's hint)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from zerotrace.errors import ConfigError, TransientIO
from zerotrace_cli.api_fetch import fetch, refusal_reason

pytestmark = pytest.mark.unit

# path -> (status, content type, body)
ROUTES: dict[str, tuple[int, str, bytes]] = {
    "/ok": (200, "application/json", b'{"spans": [1, 2]}'),
    "/denied": (401, "application/json", b'{"error": "missing or wrong bearer token"}'),
    "/broken": (500, "text/plain", b"Traceback (most recent call last): ..."),
}


class _Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        _Handler.seen.append((f"{path}?{query}", self.headers.get("Authorization", "")))
        status, content_type, body = ROUTES.get(path, (404, "text/plain", b""))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_body_comes_back_and_the_token_goes_as_a_bearer(base: str) -> None:
    _Handler.seen.clear()
    assert fetch(base + "/", "/ok", {"kind": "http", "limit": 5}, "s3cret") == (
        b'{"spans": [1, 2]}'
    )
    assert json.loads(fetch(base, "/ok", {})) == {"spans": [1, 2]}
    assert _Handler.seen == [("/ok?kind=http&limit=5", "Bearer s3cret"), ("/ok?", "")]


def test_a_refusal_says_the_services_error_else_the_http_reason(base: str) -> None:
    with pytest.raises(ConfigError) as denied:
        fetch(base, "/denied", {})
    assert str(denied.value) == (
        f"the query service at {base} refused: missing or wrong bearer token"
    )
    with pytest.raises(ConfigError) as broken:
        fetch(base, "/broken", {})
    assert str(broken.value) == f"the query service at {base} refused: Internal Server Error"
    with pytest.raises(ConfigError) as missing:
        fetch(base, "/nowhere", {}, refused="the query service refused the request")
    assert str(missing.value) == "the query service refused the request: Not Found"


def test_no_service_is_a_transient_error_with_the_callers_hint() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        away = f"http://127.0.0.1:{sock.getsockname()[1]}"  # closed again: nothing listens
    with pytest.raises(TransientIO) as plain:
        fetch(away, "/ok", {}, timeout_s=5)
    assert str(plain.value) == f"no query service at {away} ([Errno 111] Connection refused)"
    with pytest.raises(TransientIO) as hinted:
        fetch(away, "/ok", {}, hint=": start one with `zerotrace run`")
    assert str(hinted.value).endswith("Connection refused): start one with `zerotrace run`")


def test_the_refusal_reason_is_the_json_error_or_the_http_reason() -> None:
    assert refusal_reason(json.dumps({"error": "bad --from"}).encode(), "Bad Request") == (
        "bad --from"
    )
    assert refusal_reason(b'{"detail": "x"}', "Bad Request") == "Bad Request"
    assert refusal_reason(b"<html>oops</html>", "Bad Gateway") == "Bad Gateway"
    assert refusal_reason(b'["not", "an", "object"]', "Bad Gateway") == "Bad Gateway"
    assert refusal_reason(b"", "Not Found") == "Not Found"
