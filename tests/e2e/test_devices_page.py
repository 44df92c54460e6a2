"""The devices page in a real browser: a minute of raw GPU samples (two H100s on one node, an
A10 on another that has no memory temperature and raises XID 79) and RDMA records (one mlx5
port's sysfs counters and rates, one RoCE flow seen in packets) go the real way: the
collector's GpuDeviceMetrics record, Avro, profiler-agg's ProfileStep (process, flush), its
derived.device messages on the in-process bus, the Indexer, DuckDB; the query service's HTTP
API serves /devices, and headless Chromium (over the DevTools protocol, as in
test_web_page.py) opens it for that minute. It must list every GPU with its last values, draw
the picked GPU's charts with one point per window at the window's last value, mark the XID
at its time and name the unsupported metric once the A10 is picked, list its processes, show
the RDMA port with its charts and the flow, and set the chip models side by side, with no
console error. Screenshots go to the test's tmp dir and .zerotrace/screenshots/. Needs
Debian's Chromium."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.e2e.test_web_page import VIEWPORT, Cdp, browser
from tests.unit.test_llm_query_documents import index_all
from zerotrace import names
from zerotrace.bus import Message
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.gpu_fields import DCGM_FIELDS
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_collector.gpu_devices import DeviceEvent, DeviceInfo, ProcessGpuUse, SampleBuilder
from zerotrace_collector.gpu_metrics_record import ProcessNames, device_metrics_record
from zerotrace_profiler_agg.profile_step import ProfileStep
from zerotrace_query.documents import INDEX_SPECS
from zerotrace_query.http_api import HttpApi

__all__ = ["browser"]  # the fixture, used by name below
S = 1_000_000_000
MS = 1_000_000
T0 = 1_767_225_600 * S  # 2026-01-01 00:00 UTC, a multiple of the 5 s window
SECONDS = 60
WINDOWS = SECONDS // 5
GIB = 1 << 30
H100 = "NVIDIA H100 80GB HBM3"
A10 = "NVIDIA A10"
# (node, index, uuid, model): the page lists them by node, then UUID.
GPUS = (
    ("gpu-node-1", 0, "GPU-11111111-aaaa-4000-8000-000000000000", H100),
    ("gpu-node-1", 1, "GPU-22222222-bbbb-4000-8000-000000000000", H100),
    ("gpu-node-2", 0, "GPU-33333333-cccc-4000-8000-000000000000", A10),
)
XID_AT = T0 + 23 * S + 250 * MS  # on the A10, in its fifth window
FLOW = {"src_addr": "10.0.0.1", "dst_addr": "10.0.0.2", "dest_qp": 17, "src_qp": 9}
FLOW_LABEL = "10.0.0.1>10.0.0.2 qp 17"


def util(g: int, k: int) -> float:
    """GPU g's utilisation at second k: a ramp, a flat 70 %, a saw."""
    return [20.0 + k, 70.0, 10.0 + 3 * (k % 10)][g]


def power(g: int, k: int) -> float:
    return [350.0 + 2 * k, 420.5, 120.25][g]


def gpu_datum(g: int, k: int) -> dict[str, Any]:
    """GPU g's sample at second k, as the collector records it."""
    node, index, uuid, model = GPUS[g]
    ts = T0 + k * S + 250 * MS
    b = SampleBuilder(DeviceInfo(index, uuid, model), ts)
    total = 80 * GIB if model == H100 else 24 * GIB
    used = (10 + k // 6) * GIB if g == 0 else total // 2
    values: dict[str, int | float | bool] = {
        "gpu_util_pct": util(g, k),
        "power_w": power(g, k),
        "temperature_c": 55.0 + g + k % 3,
        "memory_temp_c": 60 + g,
        "sm_clock_mhz": 1980 if model == H100 else 1695,
        "mem_clock_mhz": 2619 if model == H100 else 6251,
        "fb_used_bytes": used,
        "fb_total_bytes": total,
        "fb_free_bytes": total - used,
        "total_energy_consumption_mj": 10**9 + k * round(power(g, k) * 1000),
        "pcie_replay_counter": 0,
    }
    for f in DCGM_FIELDS:  # every other field the H100 gives, at a plain value
        if f.field not in values:
            values[f.field] = False if f.avro == "boolean" else 0 if f.avro == "long" else 0.0
    if model == A10:
        del values["memory_temp_c"]  # NOT_SUPPORTED on the A10 (as the NVML stand-in's)
        values["xid_errors"] = 79 if ts >= XID_AT else 0
    for name, value in values.items():
        b.put(name, value)
    names_of: dict[int, ProcessNames] = {}
    if g == 0:
        peak = 2 * GIB if k % 5 == 2 else 0  # mid-window: the max differs from the last
        b.processes = (ProcessGpuUse(4242, 30 * GIB + peak, 55.0),)
        names_of = {4242: ProcessNames("python3", "vllm", "3f2a9c1d7e6b5a4c")}
    xids = [DeviceEvent(index, 79, XID_AT)] if model == A10 and k == 23 else []
    return device_metrics_record(
        b.build(),
        node,
        "nvidia",
        driver_version="550.54.15",
        xid_events=xids,
        process_names=names_of,
    )


def port_datum(k: int) -> dict[str, Any]:
    """mlx5_0 port 1 at second k: 1.25 GB/s out, 0.5 GB/s in, a packet out of sequence every
    ten seconds."""
    ts = T0 + k * S + 500 * MS
    counters = {
        "tx_bytes": 10**12 + k * 1_250_000_000,
        "rx_bytes": 5 * 10**11 + k * 500_000_000,
        "tx_packets": 10**9 + k * 300_000,
        "rx_packets": 10**9 + k * 120_000,
        "out_of_sequence": k // 10,
        "local_ack_timeout_err": 0,
    }
    rates = {
        "tx_bytes": 1.25e9,
        "rx_bytes": 5e8,
        "tx_packets": 3e5,
        "rx_packets": 1.2e5,
        "out_of_sequence": 0.1,
        "local_ack_timeout_err": 0.0,
    }
    return rdma_datum(f"gpu-node-1/rdma/mlx5_0/1/{ts}", ts, "mlx5_0", 1, counters, "SYSFS", rates)


def flow_datum(k: int) -> dict[str, Any]:
    """The RoCE flow's figures at second k (every 10 s), as packets/roce_flows counts them."""
    ts = T0 + k * S
    counters = {"packets": 40_000 * k, "bytes": 40_000 * k * 4158, "lost": k // 20, "naks": 0}
    rates = {"packets": 40_000.0, "bytes": 40_000.0 * 4158, "lost": 0.05, "naks": 0.0}
    datum = rdma_datum(f"gpu-node-1/roce/{k}", ts, "", 0, counters, "PACKETS", rates)
    return {**datum, "flow": {**FLOW, "transport": "RC"}}


def rdma_datum(
    event_id: str,
    ts: int,
    device: str,
    port: int,
    counters: dict[str, int],
    source: str,
    rates: dict[str, float],
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "node_id": "gpu-node-1",
        "ts_ns": ts,
        "device": device,
        "port": port,
        "counters": counters,
        "source": source,
        "interval_ns": S,
        "rates": rates,
        "pid": None,
        "process_name": None,
        "qpns": [],
        "flow": None,
    }


def raw_records() -> list[tuple[str, int, dict[str, Any]]]:
    """(topic, ts, datum) of the minute, in time order (as the collector sends them)."""
    out = [(names.RAW_GPUMETRICS.name, gpu_datum(g, k)) for k in range(SECONDS) for g in range(3)]
    out += [(names.RAW_RDMA.name, port_datum(k)) for k in range(SECONDS)]
    out += [(names.RAW_RDMA.name, flow_datum(k)) for k in range(10, SECONDS, 10)]
    return sorted(((t, d["ts_ns"], d) for t, d in out), key=lambda r: r[1])


def fill(store: DuckDBStore, codec: AvroCodec) -> int:
    """The raw records through profiler-agg's step and the indexer; returns the windows."""
    step = ProfileStep(codec)
    outputs = []
    records = {names.RAW_GPUMETRICS.name: names.RAW_GPUMETRICS, names.RAW_RDMA.name: names.RAW_RDMA}
    for offset, (topic, ts, datum) in enumerate(raw_records()):
        value = codec.encode(records[topic].record, datum)
        message = Message(topic, 0, offset, datum["node_id"].encode(), value, ts // MS)
        outputs += step.process(message)
    outputs += step.flush(T0 + 2 * SECONDS * S)
    assert step.counters()["dead_letters"] == 0
    broker = InMemoryBroker()
    broker.ensure_topics()
    producer = broker.producer()
    for out in outputs:
        producer.produce(out.topic, out.key, out.value)
    indexer = index_all(broker, store, codec, "devices-page")
    assert (indexer.indexed, indexer.dead_letters) == (len(outputs), 0)
    return len(outputs)


STATE_JS = """JSON.stringify({
  gpus: [...document.querySelectorAll('#gpus tbody tr')].map(r =>
    [...r.cells].map(c => c.innerText)),
  picked: (r => r ? r.cells[3].innerText : '')(document.querySelector('#gpus tr.picked')),
  title: document.getElementById('gpu-title').innerText,
  charts: [...document.querySelectorAll('#gpu-charts figure')].map(f => ({
    caption: f.querySelector('figcaption').innerText,
    lines: [...f.querySelectorAll('path.line')].map(p => [p.dataset.label,
      p.dataset.values.split(',').map(Number)]),
    marks: [...f.querySelectorAll('line.event')].map(l => +l.dataset.ts),
    labels: [...f.querySelectorAll('text.event-label')].map(t => t.textContent),
    nodata: !!f.querySelector('.nodata')})),
  gaps: (g => g.hidden ? '' : g.innerText)(document.getElementById('gpu-gaps')),
  processes: [...document.querySelectorAll('#processes tbody tr')].map(r =>
    [...r.cells].map(c => c.innerText)),
  events: [...document.querySelectorAll('#events tbody tr')].map(r =>
    [...r.cells].map(c => c.innerText)),
  ports: [...document.querySelectorAll('#ports tbody tr')].map(r =>
    [...r.cells].map(c => c.innerText)),
  portTitle: document.getElementById('port-title').innerText,
  portCharts: [...document.querySelectorAll('#port-charts figure')].map(f => ({
    caption: f.querySelector('figcaption').innerText,
    lines: [...f.querySelectorAll('path.line')].map(p => [p.dataset.label,
      p.dataset.values.split(',').map(Number)])})),
  flows: [...document.querySelectorAll('#flows tbody tr')].map(r =>
    [...r.cells].map(c => c.innerText)),
  chipHead: [...document.querySelectorAll('#chips thead th')].map(c => c.innerText),
  chips: Object.fromEntries([...document.querySelectorAll('#chips tbody tr')].map(r =>
    [r.dataset.metric, [...r.querySelectorAll('td')].map(c => c.innerText)])),
  status: document.getElementById('status').innerText,
  banner: (b => b.hidden ? '' : b.innerText)(document.getElementById('banner')),
  empty: !document.getElementById('empty').hidden,
  search: location.search,
})"""


async def _inspect(ws_url: str, base: str, tmp: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    async with connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        for domain in ("Runtime", "Log", "Page"):
            await cdp.call(f"{domain}.enable")
        await cdp.call(
            "Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT
        )
        await cdp.call("Page.navigate", url=f"{base}/devices?from={T0}&to={T0 + SECONDS * S}")
        found["first"] = await cdp.wait_for(
            STATE_JS,
            lambda s: len(s["gpus"]) == 3 and len(s["charts"]) == 4 and len(s["flows"]) == 1,
            "the GPUs, the first one's charts and the RDMA flow",
        )
        await cdp.screenshot(tmp / "devices-page.png")
        await cdp.evaluate(
            "[...document.querySelectorAll('#gpus tbody tr')]"
            f".find(r => r.cells[3].innerText === {json.dumps(GPUS[2][2])}).click()"
        )
        found["a10"] = await cdp.wait_for(
            STATE_JS, lambda s: s["picked"] == GPUS[2][2] and "A10" in s["title"], "the A10 picked"
        )
        await cdp.screenshot(tmp / "devices-page-a10.png")
        found["problems"] = cdp.problems()
        await cdp.close()
    return found


def last_per_window(value: Callable[[int], float]) -> list[float]:
    """A GPU's value at the last sample of each 5 s window (what the page draws)."""
    return [value(5 * w + 4) for w in range(WINDOWS)]


def test_the_devices_page(browser: str, tmp_path: Path, codec: AvroCodec) -> None:
    store = DuckDBStore()
    try:
        for spec in INDEX_SPECS:
            store.ensure_index(spec)
        windows = fill(store, codec)
        # Three GPUs and one port for 12 windows each, the flow in the five windows it reported.
        assert windows == 4 * WINDOWS + 5
        stored = store.search(names.INDEX_DEVICES, Query(limit=1000))
        http = HttpApi(store, port=0).start()
        try:
            found = asyncio.run(_inspect(browser, http.url, tmp_path))
        finally:
            http.stop()
    finally:
        store.close()

    assert found["problems"] == []
    first = found["first"]
    assert first["banner"] == "" and not first["empty"]
    assert first["search"] == f"?from={T0}&to={T0 + SECONDS * S}"
    # Each GPU listed with its newest window's last values (second 59).
    assert [row[:4] for row in first["gpus"]] == [
        [node, str(index), model, uuid] for node, index, uuid, model in GPUS
    ]
    assert [row[4:9] for row in first["gpus"]] == [
        ["79.0 %", "19.0 / 80.0 GiB", "468 W", "57.0 °C", "0"],
        ["70.0 %", "40.0 / 80.0 GiB", "421 W", "58.0 °C", "0"],
        ["37.0 %", "12.0 / 24.0 GiB", "120 W", "59.0 °C", "1"],
    ]
    # The first GPU is picked: one point per window at the window's last sample.
    assert first["picked"] == GPUS[0][2]
    charts = {c["caption"]: c for c in first["charts"]}
    assert list(charts) == ["Utilisation%", "MemoryGiB", "PowerW", "Temperature°C"]
    lines = dict(charts["Utilisation%"]["lines"])
    assert lines["GPU"] == last_per_window(lambda k: util(0, k))
    assert lines["memory copy"] == [0.0] * WINDOWS
    assert dict(charts["PowerW"]["lines"])["draw"] == last_per_window(lambda k: power(0, k))
    assert dict(charts["MemoryGiB"]["lines"])["used"] == [
        10.0 + (5 * w + 4) // 6 for w in range(12)
    ]
    assert first["gaps"] == "" and all(not c["marks"] for c in first["charts"])
    assert first["processes"] == [
        ["4242", "python3", "vllm", "3f2a9c1d7e6b", "30.0 GiB", "32.0 GiB", "55.0 %"]
    ]
    assert [row[2:] for row in first["events"]] == [["0", A10, "79"]]
    # The RDMA port, its charts (bytes/s as Gbit/s) and the flow.
    assert [row[:6] for row in first["ports"]] == [
        ["gpu-node-1", "mlx5_0", "1", "1.25 GB/s", "500 MB/s", "out_of_sequence 5"]
    ]
    assert first["portTitle"] == "mlx5_0 port 1 on gpu-node-1"
    port = {c["caption"]: dict(c["lines"]) for c in first["portCharts"]}
    assert port["ThroughputGbit/s"] == {"sent": [10.0] * WINDOWS, "received": [4.0] * WINDOWS}
    # One more every ten seconds, i.e. between the last sample of a window and the first of the
    # next: the page counts the step across the boundary.
    assert port["Error countersper window"]["out_of_sequence"] == [0, 0] + [1, 0] * 5
    assert first["flows"] == [
        [
            "gpu-node-1",
            "PACKETS",
            FLOW_LABEL,
            "—",
            "bytes 1.66e+8 /s, lost 0.05 /s, naks 0.00 /s, packets 4.00e+4 /s",
            "bytes 8316000000, lost 2, naks 0, packets 2000000",
        ]
    ]
    # The chip models side by side over the minute.
    assert first["chipHead"] == ["Metric", A10, H100]
    chips = first["chips"]
    assert chips["devices"] == ["1", "2"] and chips["windows"] == ["12 (60)", "24 (120)"]
    # H100s: utilisation 20..79 (mean 49.5) and 70 flat: mean 59.75.
    assert chips["gpu_util_pct"] == ["23.5 (10.0–37.0)", "59.8 (20.0–79.0)"]
    assert chips["memory_used_pct"][0] == "50.0 (50.0–50.0)"
    assert chips["xids"] == ["1 (79×1)", "0"]
    # Energy over the minute, kJ: 59 steps of 120.25 J; of 468 J and of 420.5 J.
    assert chips["total_energy_consumption_mj"] == ["7.09", "52.4"]
    assert chips["not_given"] == ["memory_temp_c", "—"]
    assert chips["memory_temp_c"] == ["—", "60.5 (60.0–61.0)"]

    # The A10 picked: its XID marked at its time on every chart, its gap named.
    a10 = found["a10"]
    assert a10["title"] == f"GPU 0 on gpu-node-2 · {A10}"
    assert a10["gaps"] == "Not given by this device (gaps, not zeros): memory_temp_c"
    for chart in a10["charts"]:
        assert chart["marks"] == [XID_AT / MS] and chart["labels"] == ["XID 79"], chart
    temps = dict(next(c for c in a10["charts"] if c["caption"] == "Temperature°C")["lines"])
    assert "memory" not in temps and len(temps["GPU"]) == WINDOWS
    assert a10["processes"] == [["No processes"]]
    a10_windows = [d for d in stored if d["device"] == GPUS[2][2]]
    assert sorted(d["event_count"] for d in a10_windows) == [0] * (WINDOWS - 1) + [1]
    for name in ("devices-page.png", "devices-page-a10.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
