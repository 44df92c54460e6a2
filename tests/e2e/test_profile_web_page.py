"""The flame graph page in a real browser, from real indexed data: realistic ProfileWindow
records go the real way (Avro on the in-process bus -> Indexer -> the real OpenSearch node),
the query service's HTTP API serves /flamegraph, and headless Chromium (over the DevTools
protocol, as in test_web_page.py) loads it, hovers, zooms, searches, opens the diff view of
two time ranges and another profile type, takes screenshots, and reports no console error.
Needs Debian's Chromium: `apt-get install -y chromium`."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.e2e.test_web_page import SCREENSHOTS, VIEWPORT, Cdp, browser  # noqa: F401
from tests.unit.profile_data import PY_HANDLE, PY_HOT, WINDOW_NS, index_profiles, realistic_windows
from zerotrace.codec import AvroCodec
from zerotrace.store_opensearch import OpenSearchStore
from zerotrace_query.http_api import HttpApi

COUNT = 12  # windows per process and type; the diff compares the first 6 with the last 6
FRAMES_JS = """JSON.stringify({
  frames: [...document.querySelectorAll('#flame .frame')].map(f => f.innerText).filter(Boolean),
  count: document.querySelectorAll('#flame .frame').length,
  status: document.getElementById('status').innerText,
  banner: (b => b.hidden ? '' : b.innerText)(document.getElementById('banner')),
  services: [...document.querySelectorAll('#service option')].map(o => o.value).filter(Boolean),
  threads: [...document.querySelectorAll('#thread option')].map(o => o.value).filter(Boolean),
  crumbs: document.getElementById('crumbs').innerText,
  top: [...document.querySelectorAll('#top tbody td.frame-name')].map(td => td.innerText),
})"""


def windows_with_a_regression(t0: int) -> list[dict[str, Any]]:
    """Realistic windows where hot_loop burns three times the CPU in the second half."""
    windows = realistic_windows(t0, COUNT)
    for window in windows:
        late = window["window_start_ns"] >= t0 + (COUNT // 2) * WINDOW_NS
        if late and window["profile_type"] == "ON_CPU":
            window["stacks"] = {
                k: v * 3 if k.endswith(PY_HOT) else v for k, v in window["stacks"].items()
            }
    return windows


async def _eval(cdp: Cdp, expression: str) -> Any:
    """The expression's value; a JavaScript exception fails the test with its text."""
    reply = await cdp.call("Runtime.evaluate", expression=expression, returnByValue=True)
    details = reply.get("exceptionDetails")
    assert details is None, details.get("exception", {}).get("description", details)
    return reply["result"].get("value")


async def _state(cdp: Cdp) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(await _eval(cdp, FRAMES_JS) or "{}")
    return state


async def _open(cdp: Cdp, url: str, before: str = "") -> dict[str, Any]:
    await cdp.call("Page.navigate", url=url)
    deadline = time.monotonic() + 30
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        state = await _state(cdp)
        if state.get("count", 0) > 0 and "updated" in state.get("status", ""):
            return state
    raise AssertionError(f"{url} did not draw a flame graph in 30 s: {state}")


async def _shot(cdp: Cdp, out: Path) -> None:
    await cdp.screenshot(out)
    assert out.stat().st_size > 20_000  # a drawn flame graph, not a blank page


async def _hover(cdp: Cdp, name: str, click: bool = True) -> str:
    """Move the mouse over the first frame named `name` (and click it: zoom); the tooltip."""
    box = json.loads(
        await _eval(
            cdp,
            "JSON.stringify([...document.querySelectorAll('#flame .frame')]"
            f".find(f => f.__node.name === {json.dumps(name)}).getBoundingClientRect())",
        )
    )
    x, y = box["x"] + min(box["width"] / 2, 40), box["y"] + box["height"] / 2
    await cdp.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
    await asyncio.sleep(0.2)
    text: str = await _eval(
        cdp, "(t => t.hidden ? '' : t.innerText)(document.getElementById('tooltip'))"
    )
    if not click:
        return text
    await cdp.call(
        "Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button="left", clickCount=1
    )
    await cdp.call(
        "Input.dispatchMouseEvent", type="mouseReleased", x=x, y=y, button="left", clickCount=1
    )
    await asyncio.sleep(0.2)
    return text


async def _inspect(ws_url: str, base: str, t0: int, tmp: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    async with connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        for domain in ("Runtime", "Log", "Page"):
            await cdp.call(f"{domain}.enable")
        await cdp.call(
            "Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT
        )
        found["flame"] = await _open(cdp, f"{base}/flamegraph?service=inference")
        found["tooltip"] = await _hover(cdp, PY_HANDLE)  # and click: zoom into it
        found["zoomed"] = await _state(cdp)
        found["zoom_width"] = await _eval(
            cdp,
            "[...document.querySelectorAll('#flame .frame')].find(f => "
            f"f.__node.name === {json.dumps(PY_HANDLE)} && !f.classList.contains('ancestor'))"
            ".getBoundingClientRect().width / document.getElementById('flame').clientWidth",
        )
        await _eval(
            cdp,
            "const s = document.getElementById('search'); s.value = 'hot_loop';"
            " s.dispatchEvent(new Event('input'))",
        )
        await asyncio.sleep(0.2)
        found["matches"] = await _eval(
            cdp, "document.querySelectorAll('#flame .frame.match').length"
        )
        found["search_info"] = await _eval(cdp, "document.getElementById('search-info').innerText")
        await _shot(cdp, tmp / "profile-flamegraph.png")
        half = t0 + (COUNT // 2) * WINDOW_NS
        diff_url = (
            f"{base}/flamegraph?mode=diff&service=inference&from={half}&to={t0 + COUNT * WINDOW_NS}"
            f"&base_from={t0}&base_to={half}"
        )
        found["diff"] = await _open(cdp, diff_url)
        found["diff_tooltip"] = await _hover(cdp, PY_HOT, click=False)
        found["diff_location"] = await _eval(cdp, "location.search")
        await _shot(cdp, tmp / "profile-diff.png")
        found["inuse"] = await _open(cdp, f"{base}/flamegraph?type=GPU_MEM_INUSE&service=inference")
        found["inuse_tooltip"] = await _hover(cdp, "cuda:cudaMalloc")
        await cdp.call("Page.navigate", url=f"{base}/flamegraph?service=nobody")
        found["empty"] = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not found["empty"]:
            await asyncio.sleep(0.2)
            found["empty"] = await _eval(
                cdp,
                "(e => e.hidden ? '' : e.innerText)(document.getElementById('empty'))",
            )
        found["problems"] = cdp.problems()
        await cdp.close()
    return found


def test_flame_graph_and_diff_from_opensearch(
    browser: str,  # noqa: F811
    tmp_path: Path,
    codec: AvroCodec,
    opensearch_url: str,
) -> None:
    from opensearchpy import OpenSearch

    prefix = f"zerotrace-webprof{uuid.uuid4().hex[:8]}-"
    t0 = time.time_ns() - COUNT * WINDOW_NS - 5 * 10**9
    windows = windows_with_a_regression(t0)
    store = OpenSearchStore(opensearch_url, prefix=prefix)
    client = OpenSearch(hosts=[opensearch_url], max_retries=0, timeout=30)
    try:
        assert index_profiles(store, codec, windows, "web-profiles") == len(windows)
        http = HttpApi(store, port=0).start()
        try:
            found = asyncio.run(_inspect(browser, http.url, t0, tmp_path))
        finally:
            http.stop()
    finally:
        store.close()
        client.indices.delete(index=prefix + "*", params={"expand_wildcards": "all"})
        templates = client.indices.get_index_template(name=prefix + "*", ignore=404)
        for template in templates.get("index_templates", []):
            client.indices.delete_index_template(name=template["name"])
        client.close()

    assert found["problems"] == []
    flame = found["flame"]
    assert PY_HOT in flame["frames"] and PY_HANDLE in flame["frames"]
    assert flame["services"] == ["inference", "trainer"]
    assert flame["threads"] == ["101", "102", "103"]
    assert flame["banner"] == ""
    assert flame["top"][0] == PY_HOT  # the most self time
    assert "samples" in found["tooltip"] and "self:" in found["tooltip"]
    assert "of all" in found["tooltip"]
    assert f"zoomed into {PY_HANDLE}" in found["zoomed"]["crumbs"]
    assert abs(found["zoom_width"] - 1) < 0.01
    assert found["matches"] > 0 and "%" in found["search_info"]
    assert "change: +" in found["diff_tooltip"] and "base period" in found["diff_tooltip"]
    assert "mode=diff" in found["diff_location"] and "base_from=" in found["diff_location"]
    assert "base period" in found["diff"]["crumbs"]
    assert "MiB" in found["inuse_tooltip"]
    # The latest snapshot only: 512 MiB of weights + 16 MiB x 12 windows of activations.
    assert "704.0 MiB in all" in found["inuse"]["crumbs"]
    assert "No profiles in this range" in found["empty"]
