"""The spans page in a real browser: span records of seven protocols go the real way (Avro on
the in-process bus -> Indexer -> DuckDB), the query service's HTTP API serves /spans behind a
bearer token, and headless Chromium (over the DevTools protocol, as in test_web_page.py) opens
it once with ?token=, then runs on its session cookie: it must draw one latency histogram per
protocol whose bars add up to that protocol's spans, list the spans, and narrow both when the
protocol, status and duration filters change, with no console error. Screenshots go to the
test's tmp dir and .zerotrace/screenshots/. Needs Debian's Chromium."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.e2e.test_web_page import SCREENSHOTS, VIEWPORT, Cdp, browser
from tests.unit.test_span_search import fill_spans, matching, protocol_spans, span_codec
from zerotrace import names
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.http_api import HttpApi
from zerotrace_query.span_search import SpanFilter
from zerotrace_query.span_stats import protocol_of

__all__ = ["browser"]  # the fixture, used by name below
TOKEN = "spans-page-token-0123456789"
MS = 1_000_000
STATE_JS = """JSON.stringify({
  rows: document.querySelectorAll('#spans tbody tr').length,
  protocols: [...document.querySelectorAll('#spans td.protocol')].map(c => c.innerText),
  statuses: [...document.querySelectorAll('#spans td .pill')].map(c => c.innerText),
  durations: [...document.querySelectorAll('#spans td.duration')].map(c => +c.dataset.ns),
  charts: Object.fromEntries([...document.querySelectorAll('#histograms .chart.hist')].map(c =>
    [c.dataset.protocol, {count: +c.dataset.count, errors: +c.dataset.errors,
      bars: [...c.querySelectorAll('rect.bar')].reduce((n, b) => n + +b.dataset.count, 0)}])),
  options: [...document.querySelectorAll('#protocol option')].map(o => o.value).filter(Boolean),
  count: document.getElementById('span-count').innerText,
  status: document.getElementById('status').innerText,
  banner: (b => b.hidden ? '' : b.innerText)(document.getElementById('banner')),
  empty: !document.getElementById('empty').hidden,
  search: location.search,
})"""


async def _set(cdp: Cdp, element: str, value: str) -> None:
    await cdp.evaluate(
        f"(e => {{ e.value = {json.dumps(value)};"
        " e.dispatchEvent(new Event('change', {bubbles: true})); })"
        f"(document.getElementById({json.dumps(element)}))"
    )


def _expect(spans: list[dict[str, Any]], flt: SpanFilter) -> dict[str, Any]:
    """Rows (newest 200) and per-protocol counts and errors the page must show."""
    found = matching(spans, flt)
    counts = Counter(protocol_of(s["kind"]) for s in found)
    errors = Counter(protocol_of(s["kind"]) for s in found if s["status"] == "ERROR")
    return {
        "rows": min(200, len(found)),
        "charts": {p: {"count": n, "errors": errors[p], "bars": n} for p, n in counts.items()},
    }


async def _drive(ws_url: str, url: str, spans: list[dict[str, Any]], out: Path) -> list[Any]:
    """Each step's state, then the console problems."""
    steps: list[Any] = []
    async with connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        for domain in ("Runtime", "Log", "Page"):
            await cdp.call(f"{domain}.enable")
        await cdp.call(
            "Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT
        )
        await cdp.call("Page.navigate", url=f"{url}/spans?token={TOKEN}")
        everything = _expect(spans, SpanFilter())
        steps.append(
            await cdp.wait_for(
                STATE_JS, lambda s: s["charts"] == everything["charts"], "every protocol"
            )
        )
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

        dns = names.PROTOCOL_DNS
        await _set(cdp, "protocol", dns)
        only_dns = _expect(spans, SpanFilter(protocol=dns))
        steps.append(
            await cdp.wait_for(STATE_JS, lambda s: s["charts"] == only_dns["charts"], "dns only")
        )
        await _set(cdp, "status-filter", "ERROR")
        dns_errors = _expect(spans, SpanFilter(protocol=dns, status="ERROR"))
        steps.append(
            await cdp.wait_for(
                STATE_JS, lambda s: s["charts"] == dns_errors["charts"], "dns errors"
            )
        )
        await _set(cdp, "status-filter", "")
        await _set(cdp, "min-ms", "0.5")
        slow_dns = _expect(spans, SpanFilter(protocol=dns, min_duration_ns=MS // 2))
        steps.append(
            await cdp.wait_for(STATE_JS, lambda s: s["charts"] == slow_dns["charts"], "slow dns")
        )
        await _set(cdp, "protocol", "")
        await _set(cdp, "min-ms", "")
        await _set(cdp, "max-ms", "1")
        fast = _expect(spans, SpanFilter(max_duration_ns=MS))
        steps.append(
            await cdp.wait_for(STATE_JS, lambda s: s["charts"] == fast["charts"], "fast spans")
        )
        steps.append(cdp.problems())
        await cdp.close()
    return steps


def test_the_spans_page_filters_and_draws_histograms(browser: str, tmp_path: Path) -> None:
    spans = protocol_spans(time.time_ns(), 160, seed=31, span_s=240)
    store = DuckDBStore()
    http = None
    try:
        fill_spans(store, span_codec(), spans)
        http = HttpApi(store, port=0, token=TOKEN).start()
        out = tmp_path / "spans-page.png"
        first, dns, dns_errors, slow_dns, fast, problems = asyncio.run(
            _drive(browser, http.url, spans, out)
        )
    finally:
        if http is not None:
            http.stop()
        store.close()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(out, SCREENSHOTS / out.name)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    assert problems == []

    # Everything: seven protocols, each chart's bars add up to its spans; 160 rows.
    assert len(first["charts"]) == 7 and sum(c["count"] for c in first["charts"].values()) == 160
    assert first["rows"] == 160 and first["count"] == "160"
    assert set(first["protocols"]) == set(first["charts"]) == set(first["options"])
    assert first["banner"] == "" and not first["empty"] and first["search"] == ""

    # The protocol filter: only DNS rows and one DNS chart; then its errors; then slow ones.
    expected_dns = matching(spans, SpanFilter(protocol=names.PROTOCOL_DNS))
    assert dns["rows"] == len(expected_dns) > 0 and set(dns["protocols"]) == {"dns"}
    expected_errors = matching(spans, SpanFilter(protocol=names.PROTOCOL_DNS, status="ERROR"))
    assert dns_errors["rows"] == len(expected_errors) > 0
    assert set(dns_errors["statuses"]) == {"ERROR"}
    assert dns_errors["charts"]["dns"]["errors"] == len(expected_errors)
    expected_slow = matching(spans, SpanFilter(protocol="dns", min_duration_ns=MS // 2))
    assert 0 < slow_dns["rows"] == len(expected_slow) < len(expected_dns)
    assert min(slow_dns["durations"]) >= MS // 2
    assert slow_dns["search"] == "?protocol=dns&min_ms=0.5"

    # A max duration across protocols.
    expected_fast = matching(spans, SpanFilter(max_duration_ns=MS))
    assert fast["rows"] == len(expected_fast) and max(fast["durations"]) < MS
    assert fast["search"] == "?max_ms=1"


async def _empty(ws_url: str, url: str) -> tuple[dict[str, Any], list[str]]:
    async with connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        for domain in ("Runtime", "Log", "Page"):
            await cdp.call(f"{domain}.enable")
        await cdp.call("Page.navigate", url=f"{url}/spans")
        state = await cdp.wait_for(STATE_JS, lambda s: s["empty"], "the empty state")
        text = await cdp.evaluate("document.getElementById('empty').innerText")
        problems = cdp.problems()
        await cdp.close()
        return {**state, "text": text}, problems


def test_the_empty_page_says_what_to_do(browser: str) -> None:
    store = DuckDBStore()
    http = None
    try:
        fill_spans(store, span_codec(), [])
        http = HttpApi(store, port=0).start()
        state, problems = asyncio.run(_empty(browser, http.url))
    finally:
        if http is not None:
            http.stop()
        store.close()
    assert problems == []
    assert state["rows"] == 0 and state["charts"] == {} and state["banner"] == ""
    assert "zerotrace run -- your-server" in state["text"]
