"""Device window documents as profiler-agg writes them (the contract in documents.DEVICE_WINDOWS
and /tmp/device-window-contract.md), for the query side's tests: a small fleet of GPUs and
RDMA series, built by hand so every expected answer can be counted from it.

- node-a GPU 0 (GPU-aaaa, H100): four windows, an XID 79 in the third, encoder unsupported;
- node-a GPU 1 (GPU-bbbb, H100): one window at T0, then silent (the device list must still
  find its newest window, which the newest-windows page does not hold), with two XIDs (48,
  63) in its one window;
- node-b GPU 0 (GPU-cccc, AMD MI300X): four windows, no XIDs, PCIe counters unsupported;
- node-a mlx5_0 port 1: three SYSFS windows, two RDMA_STATISTIC windows of pid 4242, and a
  RoCE flow seen in packets for two windows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from zerotrace import names
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import DEVICE_WINDOWS, document_for

NS = 1_000_000_000
WINDOW_NS = 5 * NS
T0 = 1_700_000_000_000_000_000  # a multiple of the 5 s window
FLOW = "10.0.0.1>10.0.0.2 qp 17"


def stats(values: Sequence[float]) -> dict[str, Any]:
    return {
        "min": min(values),
        "max": max(values),
        "mean": math.fsum(values) / len(values),
        "last": values[-1],
        "samples": len(values),
    }


def counter(first: int, last: int) -> dict[str, int]:
    return {"first": first, "last": last, "increase": last - first}


def window(
    kind: str,
    node: str,
    device: str,
    index: int,
    source: str,
    start_ns: int,
    metrics: Mapping[str, Sequence[float]],
    counters: Mapping[str, tuple[int, int]],
    **extra: Any,
) -> dict[str, Any]:
    flow = extra.pop("flow", "")
    pid = extra.pop("pid", None)
    counter_id = extra.pop("counter_id", None)
    samples = max((len(v) for v in metrics.values()), default=1)
    events = extra.pop("events", [])
    doc: dict[str, Any] = {
        "window_id": (
            f"{kind}:{node}:{device}:{index}:{source}:{flow or pid or ''}:{counter_id or ''}:"
            f"{start_ns}"
        ),
        "kind": kind,
        "node_id": node,
        "vendor": extra.pop("vendor", ""),
        "model": extra.pop("model", ""),
        "device": device,
        "device_index": index,
        "source": source,
        "flow": flow,
        "pid": pid,
        "counter_id": counter_id,
        "process_name": extra.pop("process_name", None),
        "window_start_ns": start_ns,
        "window_end_ns": start_ns + WINDOW_NS,
        "samples": samples,
        "event_count": len(events),
        "metrics": {name: stats(values) for name, values in metrics.items()},
        "counters": {name: counter(*pair) for name, pair in counters.items()},
        "events": events,
        "unsupported": extra.pop("unsupported", []),
        "failed": extra.pop("failed", []),
        "processes": extra.pop("processes", []),
        "driver_version": extra.pop("driver_version", None),
        "clocks_event_reason_names": extra.pop("clocks_event_reason_names", []),
        "interval_ns": extra.pop("interval_ns", None),
    }
    assert not extra, extra
    return doc


H100 = "NVIDIA H100 80GB HBM3"
MI300 = "AMD Instinct MI300X"
GIB = 1 << 30


def gpu_a0(i: int) -> dict[str, Any]:
    """node-a GPU 0's window i (0..3): utilisation 10i+10 then 10i+15, memory growing."""
    start = T0 + i * WINDOW_NS
    return window(
        "gpu",
        "node-a",
        "GPU-aaaa",
        0,
        "gpu",
        start,
        {
            "gpu_util_pct": [10.0 * i + 10, 10.0 * i + 15],
            "fb_used_bytes": [i * GIB, (i + 1) * GIB],
            "fb_total_bytes": [80 * GIB, 80 * GIB],
            "power_w": [300.5, 310.25],
            "temperature_c": [60.0, 61.0 + i],
            "sm_clock_mhz": [1980, 1980],
        },
        {
            "total_energy_consumption_mj": (1_000_000 + i * 3000, 1_000_000 + i * 3000 + 1500),
            "pcie_tx_bytes": (2**40 + i, 2**40 + i + 1),
        },
        vendor="nvidia",
        model=H100,
        driver_version="550.54.15",
        unsupported=["enc_util_pct"],
        events=[{"kind": "xid", "code": 79, "ts_ns": start + 2 * NS}] if i == 2 else [],
        processes=[
            {
                "pid": 4242,
                "process_name": "python",
                "service": "trainer",
                "container_id": None,
                "max_used_memory_bytes": (i + 1) * GIB,
                "last_used_memory_bytes": (i + 1) * GIB,
                "mean_sm_util_pct": 50.0,
            }
        ],
        clocks_event_reason_names=["SwPowerCap"] if i == 3 else [],
    )


def gpu_a1() -> dict[str, Any]:
    return window(
        "gpu",
        "node-a",
        "GPU-bbbb",
        1,
        "gpu",
        T0,
        {"gpu_util_pct": [0.0], "fb_used_bytes": [0], "fb_total_bytes": [80 * GIB]},
        {},
        vendor="nvidia",
        model=H100,
        events=[
            {"kind": "xid", "code": 48, "ts_ns": T0 + 1 * NS},
            {"kind": "xid", "code": 63, "ts_ns": T0 + 3 * NS},
        ],
    )


def gpu_b0(i: int) -> dict[str, Any]:
    return window(
        "gpu",
        "node-b",
        "GPU-cccc",
        0,
        "gpu",
        T0 + i * WINDOW_NS,
        {"gpu_util_pct": [99.0], "power_w": [700.0 - i], "row_remap_failure": [0]},
        {"ecc_dbe_vol_total": (3, 3 + i)},
        vendor="amd",
        model=MI300,
        unsupported=["pcie_tx_bytes", "pcie_rx_bytes", "enc_util_pct"],
    )


def rdma_sysfs(i: int) -> dict[str, Any]:
    return window(
        "rdma",
        "node-a",
        "mlx5_0",
        1,
        "SYSFS",
        T0 + i * WINDOW_NS,
        {"tx_bytes": [1.5e9, 2.5e9 + i], "rx_bytes": [1e9]},
        {"tx_bytes": (10**12 + i * 10**10, 10**12 + (i + 1) * 10**10), "rx_errors": (0, i)},
        vendor="mlx5",
        interval_ns=NS,
    )


def rdma_statistic(i: int) -> dict[str, Any]:
    return window(
        "rdma",
        "node-a",
        "mlx5_0",
        1,
        "RDMA_STATISTIC",
        T0 + i * WINDOW_NS,
        {"rx_write_requests": [12.5]},
        {"rx_write_requests": (100 + i, 200 + i)},
        vendor="mlx5",
        pid=4242,
        process_name="python",
    )


def rdma_flow(i: int) -> dict[str, Any]:
    return window(
        "rdma",
        "node-a",
        "",
        0,
        "PACKETS",
        T0 + i * WINDOW_NS,
        {"bytes": [4e8]},
        {"bytes": (0, 2 * 10**9), "packets": (0, 500_000)},
        flow=FLOW,
    )


def fleet() -> list[dict[str, Any]]:
    return [
        *(gpu_a0(i) for i in range(4)),
        gpu_a1(),
        *(gpu_b0(i) for i in range(4)),
        *(rdma_sysfs(i) for i in range(3)),
        *(rdma_statistic(i) for i in range(2)),
        *(rdma_flow(i) for i in range(2)),
    ]


def filled_store(docs: Sequence[Mapping[str, Any]] | None = None) -> DuckDBStore:
    """A DuckDB store with these windows (the fleet by default) indexed the way the indexer
    indexes a derived.device record (documents.document_for)."""
    store = DuckDBStore()
    store.ensure_index(DEVICE_WINDOWS)
    batch = []
    for datum in fleet() if docs is None else docs:
        index, doc_id, doc = document_for(names.DERIVED_DEVICE.record, datum)
        assert index == names.INDEX_DEVICES
        batch.append((doc_id, doc))
    assert store.bulk_upsert(names.INDEX_DEVICES, batch).ok
    store.refresh(names.INDEX_DEVICES)
    return store
