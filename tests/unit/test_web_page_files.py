"""The web page's files as the query service serves them: paths, types, and nothing loaded
from anywhere else (no CDN: the page must work on a machine without internet access)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.http_api import WEB_DIR, WEB_FILES, HttpApi


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    store = DuckDBStore()
    http = HttpApi(store, port=0).start()
    yield http.url
    http.stop()
    store.close()


@pytest.mark.parametrize(
    ("path", "kind", "text"),
    [
        ("/", "text/html", '<script src="/static/app.js">'),
        ("/static/common.js", "text/javascript", "const zt = "),
        ("/static/app.js", "text/javascript", "/api/v1/llm/percentiles"),
        ("/static/style.css", "text/css", ".chart"),
        ("/spans", "text/html", '<script src="/static/spans.js">'),
        ("/static/spans.js", "text/javascript", "/api/v1/spans/histogram"),
        ("/devices", "text/html", '<script src="/static/devices.js">'),
        ("/static/devices.js", "text/javascript", "/api/v1/gpu/windows"),
        ("/static/devices.css", "text/css", "svg .event"),
    ],
)
def test_the_page_is_served(url: str, path: str, kind: str, text: str) -> None:
    with urllib.request.urlopen(url + path) as response:
        assert response.headers["Content-Type"].startswith(kind)
        assert text in response.read().decode()


def test_only_the_page_files_are_reachable(url: str) -> None:
    for path in ("/static/../http_api.py", "/static/index.html", "/static/", "/web/app.js"):
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url + path)
        assert missing.value.code == 404
        missing.value.close()


def test_the_page_loads_nothing_from_elsewhere() -> None:
    assert {name for name, _ in WEB_FILES.values()} == {p.name for p in WEB_DIR.iterdir()}
    for path in WEB_DIR.iterdir():
        text = path.read_text()
        # The SVG namespace is a name, not a fetch; anything else absolute would be.
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.\w+[^\s\"')]*", text))
        assert urls <= {"http://www.w3.org/2000/svg"}, (path.name, urls)
        assert "@import" not in text


def test_every_page_loads_the_shared_helpers_before_its_own_script() -> None:
    pages = {name for name, kind in WEB_FILES.values() if kind.startswith("text/html")}
    assert pages == {
        "index.html",
        "spans.html",
        "traces.html",
        "services.html",
        "flamegraph.html",
        "devices.html",
    }
    for name in pages:
        scripts = re.findall(r'<script src="([^"]+)"></script>', (WEB_DIR / name).read_text())
        own = "/static/app.js" if name == "index.html" else f"/static/{name[:-5]}.js"
        assert scripts == ["/static/common.js", own], name


def test_every_page_links_the_devices_page() -> None:
    pages = {name for name, kind in WEB_FILES.values() if kind.startswith("text/html")}
    for name in pages - {"devices.html"}:
        assert '<a class="nav" href="/devices">Devices</a>' in (WEB_DIR / name).read_text(), name
