"""The service map page in a real browser: the realistic topology (tests/unit/
service_map_data.py) goes the real way (Avro on the in-process bus -> Indexer -> DuckDB), the
query service's HTTP API serves /services, and headless Chromium (over the DevTools protocol,
as in test_web_page.py) opens it for the topology's minute: it must draw every service and
peer once, every edge with its rate, error share and p99 and the colour of its error rate,
nodes that do not overlap, a tooltip on hover, the protocol filter, and the empty state for a
range with nothing, with no console error. Screenshots go to the test's tmp dir and
.zerotrace/screenshots/. Needs Debian's Chromium."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.e2e.test_web_page import VIEWPORT, Cdp, browser
from tests.unit.service_map_data import EXPECTED, RANGE_NS, T0, index_topology, topology
from tests.unit.test_span_search import span_codec
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import INDEX_SPECS
from zerotrace_query.http_api import HttpApi

__all__ = ["browser"]  # the fixture, used by name below
STATE_JS = """JSON.stringify({
  nodes: [...document.querySelectorAll('#map g.node')].map(g => ({id: g.dataset.id,
    type: g.dataset.type, box: (r => [r.x, r.y, r.width, r.height])(g.getBoundingClientRect())})),
  edges: [...document.querySelectorAll('#map g.edge')].map(g => ({client: g.dataset.client,
    server: g.dataset.server, protocol: g.dataset.protocol, count: +g.dataset.count,
    errors: +g.dataset.errors, health: g.dataset.health,
    drawn: g.querySelector('path.edge-line').getTotalLength() > 10})),
  labels: [...document.querySelectorAll('#map g.edge-label')].map(g => ({
    key: g.dataset.client + ' -> ' + g.dataset.server + ' ' + g.dataset.protocol,
    text: g.dataset.text, boxed: !!g.querySelector('rect')})),
  rows: [...document.querySelectorAll('#edges tbody tr')].map(r => ({
    key: r.dataset.client + ' -> ' + r.dataset.server + ' ' + r.dataset.protocol,
    count: +r.querySelector('td.count').innerText, spark: !!r.querySelector('polyline')})),
  protocols: [...document.querySelectorAll('#protocol option')].map(o => o.value).filter(Boolean),
  status: document.getElementById('status').innerText,
  banner: (b => b.hidden ? '' : b.innerText)(document.getElementById('banner')),
  empty: !document.getElementById('empty').hidden,
  search: location.search,
})"""


def health(errors: int, count: int) -> str:
    """The page's colour classes: below 1 % ok, below 5 % warn, else bad."""
    share = errors / count
    return "ok" if share < 0.01 else "warn" if share < 0.05 else "bad"


async def _inspect(ws_url: str, base: str, tmp: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    async with connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        for domain in ("Runtime", "Log", "Page"):
            await cdp.call(f"{domain}.enable")
        await cdp.call(
            "Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT
        )
        await cdp.call("Page.navigate", url=f"{base}/services?from={T0}&to={T0 + RANGE_NS}")
        found["map"] = await cdp.wait_for(
            STATE_JS,
            lambda s: len(s["edges"]) == len(EXPECTED) and all(x["boxed"] for x in s["labels"]),
            "the whole map",
        )
        box = json.loads(
            await cdp.evaluate(
                "JSON.stringify([...document.querySelectorAll('#map g.edge-label')].find(g =>"
                " g.dataset.server === 'llama_cpp.server').getBoundingClientRect())"
            )
        )
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        await cdp.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        await asyncio.sleep(0.2)
        found["tooltip"] = await cdp.evaluate(
            "(t => t.hidden ? '' : t.innerText)(document.getElementById('tooltip'))"
        )
        await cdp.call("Input.dispatchMouseEvent", type="mouseMoved", x=2, y=2)
        await cdp.screenshot(tmp / "service-map.png")
        await cdp.evaluate(
            "(e => { e.value = 'redis'; e.dispatchEvent(new Event('change', {bubbles: true})); })"
            "(document.getElementById('protocol'))"
        )
        found["redis"] = await cdp.wait_for(
            STATE_JS, lambda s: {e["protocol"] for e in s["edges"]} == {"redis"}, "the Redis edges"
        )
        await cdp.screenshot(tmp / "service-map-redis.png")
        await cdp.call("Page.navigate", url=f"{base}/services?range=5m")
        found["empty"] = await cdp.wait_for(STATE_JS, lambda s: s["empty"], "the empty state")
        found["problems"] = cdp.problems()
        await cdp.close()
    return found


def test_the_service_map_page(browser: str, tmp_path: Path) -> None:
    store = DuckDBStore()
    try:
        for spec in INDEX_SPECS:
            store.ensure_index(spec)
        index_topology(store, span_codec(), *topology())
        http = HttpApi(store, port=0).start()
        try:
            found = asyncio.run(_inspect(browser, http.url, tmp_path))
        finally:
            http.stop()
    finally:
        store.close()

    assert found["problems"] == []
    state = found["map"]
    assert state["banner"] == ""
    assert state["search"] == f"?from={T0}&to={T0 + RANGE_NS}"
    names = {x.client for x in EXPECTED} | {x.server for x in EXPECTED}
    assert sorted(n["id"] for n in state["nodes"]) == sorted(names)
    kinds = {n["id"]: n["type"] for n in state["nodes"]}
    assert kinds["redis 127.0.0.1:6379"] == "peer" and kinds["(unobserved clients)"] == "unobserved"
    # Nodes do not overlap.
    boxes = [n["box"] for n in state["nodes"]]
    for i, (x1, y1, w1, h1) in enumerate(boxes):
        for x2, y2, w2, h2 in boxes[i + 1 :]:
            assert x1 + w1 <= x2 or x2 + w2 <= x1 or y1 + h1 <= y2 or y2 + h2 <= y1
    edges = {(e["client"], e["server"], e["protocol"]): e for e in state["edges"]}
    for x in EXPECTED:
        edge = edges[(x.client, x.server, x.protocol)]
        count, errors = len(x.calls.durations_ns), len(x.calls.errors)
        assert (edge["count"], edge["errors"], edge["drawn"]) == (count, errors, True)
        assert edge["health"] == health(errors, count), x
    labels = {label["key"]: label["text"] for label in state["labels"]}
    # 200 calls in 60 s, 4 failed, p99 2.9 ms (worked out in service_map_data).
    assert labels["gateway -> redis 127.0.0.1:6379 redis"] == (
        "redis · 3.3/s · 2.0 % err · p99 2.90 ms"
    )
    assert labels["gateway -> llama_cpp.server http"] == "http · 40.0/min · 5.0 % err · p99 2.96 s"
    assert labels["gateway -> dns 127.0.0.53:53 dns"] == "dns · 12.0/min · 0 % err · p99 299 µs"
    rows = {row["key"]: row for row in state["rows"]}
    assert {k: r["count"] for k, r in rows.items()} == {
        f"{x.client} -> {x.server} {x.protocol}": len(x.calls.durations_ns) for x in EXPECTED
    }
    assert all(r["spark"] for r in rows.values())
    assert sorted(state["protocols"]) == ["dns", "http", "postgresql", "redis"]
    assert "gateway → llama_cpp.server (http)" in found["tooltip"]
    assert "p95 2.80 s" in found["tooltip"] and "server found by link" in found["tooltip"]
    redis = found["redis"]
    assert sorted(n["id"] for n in redis["nodes"]) == [
        "gateway",
        "redis 127.0.0.1:6379",
        "redis-server",
        "worker",
    ]
    assert redis["search"].endswith("&protocol=redis")
    assert found["empty"]["empty"] and found["empty"]["edges"] == []
    for name in ("service-map.png", "service-map-redis.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
