"""The traces page in a real browser: the gateway topology of test_trace_search.py (a gateway's
server span, its Redis, PostgreSQL and upstream client calls, the upstream's server span linked
by TCP sequence number; and an unrelated failing billing trace) goes the real way (Avro on the
in-process bus -> Indexer -> DuckDB), the query service's HTTP API serves /traces behind a
bearer token, and headless Chromium (over the DevTools protocol, as in test_web_page.py) opens
it with ?token=, lists the traces, is clicked on one, and must draw its waterfall: one row per
span in tree order, indented by depth, bars where the spans are in time, each bar split into
its parts with a legend, the attributes in the hover text and the detail panel. The error
filter narrows the list; a span's link on the spans page opens its whole trace. No console
error anywhere. Screenshots go to the test's tmp dir and .zerotrace/screenshots/. Needs
Debian's Chromium."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.e2e.test_web_page import SCREENSHOTS, VIEWPORT, Cdp, browser
from tests.unit.test_span_search import span_codec
from tests.unit.test_trace_search import fill_trace, topology
from zerotrace import names
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.http_api import HttpApi

__all__ = ["browser"]  # the fixture, used by name below
TOKEN = "traces-page-token-0123456789"
S = 1_000_000_000
LIST_JS = """JSON.stringify({
  rows: [...document.querySelectorAll('#traces tr.trace-row')].map(r => r.dataset.traceId),
  selected: [...document.querySelectorAll('#traces tr.trace-row.selected')]
    .map(r => r.dataset.traceId),
  status: document.getElementById('status').innerText,
  banner: (b => b.hidden ? '' : b.innerText)(document.getElementById('banner')),
  search: location.search,
})"""
TRACE_JS = """JSON.stringify({
  shown: !document.getElementById('trace-view').hidden,
  title: document.getElementById('trace-title').innerText,
  rows: [...document.querySelectorAll('#waterfall .wf-row[data-span-id]')].map(r => {
    const bar = r.querySelector('.wf-bar').getBoundingClientRect();
    const setup = [...r.querySelectorAll('.wf-setup')].map(p => p.getBoundingClientRect());
    return {
      id: r.dataset.spanId, depth: +r.dataset.depth,
      indent: parseFloat(r.querySelector('.wf-label').style.paddingLeft),
      label: r.querySelector('.wf-label').innerText,
      parts: [...r.querySelectorAll('.wf-part')].map(p => p.dataset.part),
      setup: [...r.querySelectorAll('.wf-setup')].map(p => p.dataset.part),
      left: bar.left, right: bar.right, width: bar.width,
      setupLeft: setup.length ? Math.min(...setup.map(b => b.left)) : null,
      setupRight: setup.length ? Math.max(...setup.map(b => b.right)) : null,
      error: r.querySelector('.wf-bar').classList.contains('err'),
      title: r.title,
    };
  }),
  legend: [...document.querySelectorAll('#legend .item[data-part]')].map(i => i.dataset.part),
  detail: (d => d.hidden ? '' : d.innerText)(document.getElementById('span-detail')),
  search: location.search,
})"""


async def _poll(cdp: Cdp, script: str, done: Callable[[Any], bool], what: str) -> Any:
    state: Any = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = json.loads(await cdp.evaluate(script) or "{}")
        if done(state):
            return state
        await asyncio.sleep(0.2)
    raise AssertionError(f"the page did not show {what} in 30 s: {state}")


async def _click(cdp: Cdp, selector: str) -> None:
    """A real mouse click in the middle of the element."""
    box = json.loads(
        await cdp.evaluate(
            f"(e => {{ e.scrollIntoView({{block: 'center'}});"
            " return JSON.stringify(e.getBoundingClientRect()); })"
            f"(document.querySelector({json.dumps(selector)}))"
        )
    )
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    await cdp.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
    for kind in ("mousePressed", "mouseReleased"):
        await cdp.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)


async def _screenshot(cdp: Cdp, out: Path) -> None:
    await asyncio.sleep(0.3)  # let layout settle before the picture
    metrics = await cdp.call("Page.getLayoutMetrics")
    shot = await cdp.call(
        "Page.captureScreenshot",
        format="png",
        captureBeyondViewport=True,
        clip={
            "x": 0,
            "y": 0,
            "width": VIEWPORT["width"],
            "height": metrics["cssContentSize"]["height"],
            "scale": 1,
        },
    )
    out.write_bytes(base64.b64decode(shot["data"]))


async def _drive(
    ws_url: str, url: str, ids: dict[str, Any], out: Path, spans_out: Path
) -> dict[str, Any]:
    """Each step's state, then the console problems."""
    steps: dict[str, Any] = {}
    async with connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        for domain in ("Runtime", "Log", "Page"):
            await cdp.call(f"{domain}.enable")
        await cdp.call(
            "Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT
        )
        await cdp.call("Page.navigate", url=f"{url}/traces?token={TOKEN}")
        steps["list"] = await _poll(
            cdp,
            LIST_JS,
            lambda s: "updated" in s.get("status", "") and len(s["rows"]) == 4,
            "four traces",
        )
        first = ids["gateway"][0]
        await _click(cdp, f'#traces tr.trace-row[data-trace-id="{first}"]')
        steps["trace"] = await _poll(
            cdp, TRACE_JS, lambda s: s.get("shown") and len(s["rows"]) == 5, "the waterfall"
        )
        steps["selected"] = json.loads(await cdp.evaluate(LIST_JS))["selected"]
        upstream = ids["upstream_client"]
        await _click(cdp, f'#waterfall .wf-row[data-span-id="{upstream}"] .wf-label')
        steps["detail"] = await _poll(
            cdp, TRACE_JS, lambda s: names.ATTR_GEN_AI_REQUEST_MODEL in s["detail"], "details"
        )
        await _screenshot(cdp, out)

        # The error filter: only the traces with a failed span.
        await cdp.evaluate(
            "(e => { e.value = 'true'; e.dispatchEvent(new Event('change', {bubbles: true})); })"
            "(document.getElementById('error'))"
        )
        steps["errors"] = await _poll(
            cdp,
            LIST_JS,
            lambda s: "error=true" in s["search"] and len(s["rows"]) == 2,
            "failed traces",
        )

        # The spans page links each span to its trace: the upstream server's span opens the
        # gateway's whole trace.
        await cdp.call("Page.navigate", url=f"{url}/spans")
        server = ids["upstream_server"]
        link = f'#spans a.trace-link[href="/traces?trace={server}"]'
        await _poll(
            cdp,
            f"JSON.stringify(!!document.querySelector({json.dumps(link)}))",
            bool,
            "the span's trace link",
        )
        await _click(cdp, link)
        steps["linked"] = await _poll(
            cdp, TRACE_JS, lambda s: s.get("shown") and len(s["rows"]) == 5, "the linked trace"
        )
        await _screenshot(cdp, spans_out)
        steps["problems"] = cdp.problems()
        await cdp.close()
    return steps


def test_the_traces_page_draws_a_waterfall(browser: str, tmp_path: Path) -> None:
    spans, edges = topology(time.time_ns() - 60 * S)
    gateway = [spans[i * 5 : i * 5 + 5] for i in range(3)]
    ids = {
        "gateway": [g[0]["trace_id"] for g in gateway],
        "upstream_client": gateway[0][3]["span_id"],
        "upstream_server": gateway[0][4]["span_id"],
    }
    store = DuckDBStore()
    http = None
    out = tmp_path / "traces-page.png"
    linked_out = tmp_path / "traces-page-linked.png"
    try:
        fill_trace(store, span_codec(), spans, edges)
        http = HttpApi(store, port=0, token=TOKEN).start()
        steps = asyncio.run(_drive(browser, http.url, ids, out, linked_out))
    finally:
        if http is not None:
            http.stop()
        store.close()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for shot in (out, linked_out):
        shutil.copy(shot, SCREENSHOTS / shot.name)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    assert steps["problems"] == []

    # The list: four traces, newest first (gateway at +2 s, billing at +1.5 s, then +1 s, +0 s).
    first = steps["list"]
    billing = spans[15]["trace_id"]
    assert first["rows"] == [ids["gateway"][2], billing, ids["gateway"][1], ids["gateway"][0]]
    assert first["banner"] == "" and first["search"] == ""
    assert steps["selected"] == [ids["gateway"][0]]

    # The waterfall: tree order, indented by depth, bars where the spans are in time.
    trace = steps["trace"]
    gw, redis, pg, up, upsrv = gateway[0]
    assert trace["title"] == f"Trace {ids['gateway'][0]}"
    assert trace["search"] == f"?trace={ids['gateway'][0]}"
    rows = trace["rows"]
    assert [(r["id"], r["depth"]) for r in rows] == [
        (gw["span_id"], 0),
        (redis["span_id"], 1),
        (pg["span_id"], 1),
        (up["span_id"], 1),
        (upsrv["span_id"], 2),
    ]
    assert [r["indent"] for r in rows] == [8, 24, 24, 24, 40]
    assert rows[0]["label"].startswith("gateway") and "POST /v1/chat" in rows[0]["label"]
    assert rows[4]["label"].startswith("llm-upstream")
    root, upstream, server = rows[0], rows[3], rows[4]
    assert [r["left"] for r in rows[1:4]] == sorted(r["left"] for r in rows[1:4])
    assert root["left"] < rows[1]["left"] and root["right"] >= upstream["right"]
    assert upstream["left"] < server["left"] and server["right"] < upstream["right"]
    # 48 ms across the track: the 310 µs Redis call is a sliver, the upstream call most of it.
    assert rows[1]["width"] < root["width"] / 50 < upstream["width"] / 30

    # The parts: set-up before the client's first byte, then send/server/transfer, disk stripes.
    assert root["parts"] == ["send", "server", "transfer"] and root["setup"] == []
    assert upstream["setup"] == ["dns", "connect", "tls"]
    assert upstream["parts"] == ["send", "server", "transfer"]
    assert upstream["setupRight"] is not None and upstream["setupLeft"] < upstream["left"]
    assert abs(upstream["setupRight"] - upstream["left"]) < 1.5
    assert server["parts"] == ["send", "server", "transfer", "file_read", "file_write"]
    assert rows[1]["parts"] == rows[2]["parts"] == []
    assert trace["legend"] == [
        "dns",
        "connect",
        "tls",
        "send",
        "server",
        "transfer",
        "file_read",
        "file_write",
    ]
    # Hover text and the detail panel hold the attributes.
    assert (
        f"{names.ATTR_TCP_REQUEST_SEQ} = {up['attributes'][names.ATTR_TCP_REQUEST_SEQ]}"
        in (upstream["title"])
    )
    assert "DNS: 1.20 ms" in upstream["title"] and "TLS handshake: 2.00 ms" in upstream["title"]
    assert "disk read (summed): 3.00 ms" in server["title"]
    detail = steps["detail"]["detail"]
    assert "llama-3.1-8b" in detail and up["span_id"] in detail

    # The error filter, and the spans page's link to the whole trace.
    assert steps["errors"]["rows"] == [billing, ids["gateway"][1]]
    linked = steps["linked"]
    assert linked["title"] == f"Trace {ids['gateway'][0]}"
    assert linked["search"] == f"?trace={ids['upstream_server']}"
    assert [r["id"] for r in linked["rows"]] == [r["id"] for r in rows]


async def _empty(ws_url: str, url: str) -> tuple[str, list[str]]:
    async with connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        for domain in ("Runtime", "Log", "Page"):
            await cdp.call(f"{domain}.enable")
        await cdp.call("Page.navigate", url=f"{url}/traces")
        text = await _poll(
            cdp,
            "JSON.stringify((e => e.hidden ? '' : e.innerText)(document.getElementById('empty')))",
            bool,
            "the empty state",
        )
        problems = cdp.problems()
        await cdp.close()
        return str(text), problems


def test_the_empty_page_says_what_to_do(browser: str) -> None:
    store = DuckDBStore()
    http = None
    try:
        fill_trace(store, span_codec(), [], [])
        http = HttpApi(store, port=0).start()
        text, problems = asyncio.run(_empty(browser, http.url))
    finally:
        if http is not None:
            http.stop()
        store.close()
    assert problems == []
    assert "No traces yet" in text and "zerotrace run -- your-server" in text
