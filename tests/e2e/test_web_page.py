"""The LLM web page in a real browser: realistic LlmRequest records go through the real path
(Avro on the in-process bus -> Indexer -> store), the query service's HTTP API serves the page,
and headless Chromium, driven over the DevTools protocol, loads it, waits for the table rows
and chart lines, collects every console error and uncaught exception, and takes a screenshot
(into the test's tmp dir and .zerotrace/screenshots/ for people to look at).

Once on DuckDB (the embedded mode's store) and once on the real OpenSearch node.
Needs Debian's Chromium: `apt-get install -y chromium`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.unit.test_llm_query_documents import index_all, publish_llm, realistic_requests
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.store import Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import INDEX_SPECS
from zerotrace_query.http_api import HttpApi

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / ".zerotrace" / "screenshots"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",  # Chromium picks a port and writes it to DevToolsActivePort
)
VIEWPORT = {"width": 1440, "height": 1000}
# What the page must show before it counts as loaded: rows in the table, a line in each chart.
READY_JS = """JSON.stringify({
  rows: document.querySelectorAll('#requests tbody tr td.time').length,
  charts: [...document.querySelectorAll('.chart')].filter(c => c.querySelector('path.line')).length,
  estimated: document.querySelectorAll('#requests .est').length,
  failed: document.querySelectorAll('#requests .pill.err').length,
  cards: document.querySelectorAll('#summary .card').length,
  models: [...document.querySelectorAll('#model option')].map(o => o.value).filter(Boolean),
  empty: !document.getElementById('empty').hidden,
  emptyText: document.getElementById('empty').innerText,
  banner: (b => b.hidden ? '' : b.innerText)(document.getElementById('banner')),
  status: document.getElementById('status').innerText,
})"""


def chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        message = "Chromium is missing; install it with `apt-get install -y chromium`"
        if os.environ.get("ZEROTRACE_ALLOW_SKIP_INFRA") == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)
    return path


@dataclass
class PageReport:
    state: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    screenshot: Path | None = None
    tooltip: str = ""
    refreshed: bool = False
    filtered_models: set[str] = field(default_factory=set)
    location: str = ""


class Cdp:
    """The few DevTools protocol calls the test needs, over one page target's websocket."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._next = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for raw in self._ws:
            message = json.loads(raw)
            future = self._waiting.pop(message.get("id", -1), None)
            if future is not None:
                future.set_result(message)
            else:
                self.events.append(message)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = future
        await self._ws.send(json.dumps({"id": self._next, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, 30)
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def evaluate(self, expression: str) -> Any:
        reply = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return reply["result"].get("value")

    async def wait_for(
        self, state_js: str, done: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        """The page's state (*state_js* returns it as JSON) once its status says "updated"
        and *done* holds; fails after 30 s, showing the last state."""
        state: dict[str, Any] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = json.loads(await self.evaluate(state_js) or "{}")
            if "updated" in state.get("status", "") and done(state):
                return state
            await asyncio.sleep(0.2)
        raise AssertionError(f"the page did not show {what} in 30 s: {state}")

    async def screenshot(self, out: Path) -> None:
        """The whole page as a PNG in *out*, also kept in SCREENSHOTS for people to look at."""
        await asyncio.sleep(0.3)  # let layout settle before the picture
        size = (await self.call("Page.getLayoutMetrics"))["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": size["height"], "scale": 1}
        shot = await self.call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip
        )
        out.write_bytes(base64.b64decode(shot["data"]))
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(out, SCREENSHOTS / out.name)
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", out

    def problems(self) -> list[str]:
        """Console errors and assertions, uncaught exceptions, and browser log errors (a
        failed request, a refused script) seen so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                args = " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                found.append(f"console.{params['type']}: {args}")
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                description = details.get("exception", {}).get("description", details["text"])
                found.append(f"uncaught: {description}")
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                found.append(f"log: {entry['text']} {entry.get('url', '')}".strip())
        return found

    async def close(self) -> None:
        self._reader.cancel()


async def _inspect(ws_url: str, page_url: str, out: Path, want_rows: bool) -> PageReport:
    async with connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        for domain in ("Runtime", "Log", "Page"):
            await cdp.call(f"{domain}.enable")
        await cdp.call(
            "Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT
        )
        await cdp.call("Page.navigate", url=page_url)
        state: dict[str, Any] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = json.loads(await cdp.evaluate(READY_JS) or "{}")
            loaded = state.get("rows", 0) > 0 and state.get("charts") == 4
            if (loaded if want_rows else state.get("empty")) and "updated" in state["status"]:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"the page did not finish loading in 30 s: {state}")
        await asyncio.sleep(0.3)  # let layout settle before the picture
        metrics = await cdp.call("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        shot = await cdp.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": VIEWPORT["width"], "height": size["height"], "scale": 1},
        )
        report = PageReport(state=state)
        report.screenshot = out
        out.write_bytes(base64.b64decode(shot["data"]))
        if want_rows:
            # Hover over the TTFT chart: the tooltip must show values, without errors.
            box = json.loads(
                await cdp.evaluate(
                    "JSON.stringify(document.querySelector('#chart-ttft svg')"
                    ".getBoundingClientRect())"
                )
            )
            x, y = box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.5
            await cdp.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
            await asyncio.sleep(0.2)
            report.tooltip = await cdp.evaluate(
                "document.getElementById('tooltip').hidden ? ''"
                " : document.getElementById('tooltip').innerText"
            )
            # Auto-refresh: the status line's time moves on within one period (5 s).
            before = state["status"]
            until = time.monotonic() + 8
            while time.monotonic() < until and not report.refreshed:
                await asyncio.sleep(0.5)
                now = await cdp.evaluate("document.getElementById('status').innerText")
                report.refreshed = "updated" in now and now != before
            # The model filter: choosing one leaves only its rows, and lands in the URL.
            model = state["models"][-1]
            await cdp.evaluate(
                f"const m = document.getElementById('model'); m.value = {json.dumps(model)};"
                " m.dispatchEvent(new Event('change', {bubbles: true}))"
            )
            shown: list[str] = []
            until = time.monotonic() + 10
            while time.monotonic() < until and set(shown) != {model}:
                await asyncio.sleep(0.2)
                shown = await cdp.evaluate(
                    "[...document.querySelectorAll('#requests td.model')].map(c => c.innerText)"
                )
            report.filtered_models = set(shown)
            report.location = await cdp.evaluate("location.search")
        report.problems = cdp.problems()
        await cdp.close()
        return report


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[str]:
    """A headless Chromium; yields the websocket URL of its first page."""
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    binary = chromium()  # before the log is opened: a missing browser leaves no open file
    log = open(tmp_path / "chromium.log", "w")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (active.exists() and active.read_text().count("\n") >= 1):
            assert proc.poll() is None, (tmp_path / "chromium.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "Chromium did not open its DevTools port"
            time.sleep(0.1)
        port = int(active.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        page = next(t for t in targets if t["type"] == "page")
        yield str(page["webSocketDebuggerUrl"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def fill(store: Store, codec: AvroCodec, requests: list[dict[str, Any]]) -> None:
    """Through the real path: encoded records on the bus, the Indexer into the store."""
    broker = InMemoryBroker()
    broker.ensure_topics()
    publish_llm(broker, codec, requests)
    indexer = index_all(broker, store, codec, "web-test")
    assert (indexer.indexed, indexer.dead_letters) == (len(requests), 0)


def look(store: Store, browser: str, tmp_path: Path, name: str, want_rows: bool) -> PageReport:
    http = HttpApi(store, port=0).start()
    try:
        out = tmp_path / f"{name}.png"
        report = asyncio.run(_inspect(browser, f"{http.url}/", out, want_rows))
    finally:
        http.stop()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(out, SCREENSHOTS / out.name)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    return report


def check_full_page(report: PageReport, requests: list[dict[str, Any]]) -> None:
    assert report.problems == []
    state = report.state
    assert state["rows"] == min(200, len(requests))
    assert state["charts"] == 4
    assert state["estimated"] > 0 and state["failed"] > 0
    assert state["cards"] == 3
    assert sorted(state["models"]) == sorted({r["model"] for r in requests})
    assert state["banner"] == ""
    assert "ms" in report.tooltip and "p99" in report.tooltip
    assert report.refreshed, "the page did not refresh itself within 8 s"
    model = sorted({r["model"] for r in requests})[-1]
    assert report.filtered_models == {model}
    assert report.location == f"?model={model}"


def test_the_page_on_duckdb(browser: str, tmp_path: Path, codec: AvroCodec) -> None:
    requests = realistic_requests(time.time_ns(), 300, span_s=600)
    store = DuckDBStore()
    try:
        fill(store, codec, requests)
        report = look(store, browser, tmp_path, "llm-page-duckdb", want_rows=True)
    finally:
        store.close()
    check_full_page(report, requests)


def test_the_empty_page_says_what_to_do(browser: str, tmp_path: Path) -> None:
    store = DuckDBStore()
    try:
        for spec in INDEX_SPECS:
            store.ensure_index(spec)
        report = look(store, browser, tmp_path, "llm-page-empty", want_rows=False)
    finally:
        store.close()
    assert report.problems == []
    assert report.state["empty"]
    assert "zerotrace run -- your-server" in report.state["emptyText"]


def test_the_page_on_opensearch(
    browser: str, tmp_path: Path, codec: AvroCodec, opensearch_url: str
) -> None:
    from opensearchpy import OpenSearch

    from zerotrace.store_opensearch import OpenSearchStore

    prefix = f"zerotrace-web{uuid.uuid4().hex[:8]}-"
    requests = realistic_requests(time.time_ns(), 300, span_s=600, seed=11)
    store = OpenSearchStore(opensearch_url, prefix=prefix)
    client = OpenSearch(hosts=[opensearch_url], max_retries=0, timeout=30)
    try:
        fill(store, codec, requests)
        report = look(store, browser, tmp_path, "llm-page-opensearch", want_rows=True)
    finally:
        store.close()
        client.indices.delete(index=prefix + "*", params={"expand_wildcards": "all"})
        templates = client.indices.get_index_template(name=prefix + "*", ignore=404)
        for template in templates.get("index_templates", []):
            client.indices.delete_index_template(name=template["name"])
        client.close()
    check_full_page(report, requests)
