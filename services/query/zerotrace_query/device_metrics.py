"""GPU and RDMA device metrics in Prometheus form, appended to what the HTTP API's GET /metrics
answers (pure over the store port, time given).

Each device's newest window (device_search.latest_windows) among those that started in the
last RECENT_NS: a device silent for longer is left out, as dcgm-exporter leaves out a GPU it no
longer sees, so its series go stale in Prometheus instead of repeating an old value.

GPUs, as dcgm-exporter names them (zerotrace.gpu_fields.DCGM_FIELDS), so dashboards built for
it (Grafana's NVIDIA DCGM Exporter dashboard) read them unchanged: the same metric names, the
same labels (`gpu`, `UUID`, `modelName`, `Hostname`; not dcgm-exporter's `device`, `pci_bus_id`,
`DCGM_FI_DRIVER_VERSION` or its Kubernetes pod labels), the same types and DCGM's units:
`DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-...",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"}`.
Windows keep zerotrace's units; the export divides where DCGM's unit differs
(export_divisor in the field table): the framebuffer (FB_FREE, FB_USED, FB_RESERVED, FB_TOTAL)
from bytes to MiB, PCIe (PCIE_TX_THROUGHPUT, PCIE_RX_THROUGHPUT) from bytes to KB (1024), so a
value may have a fraction where DCGM's is whole. Not unchanged: the two NVLink counters kept
under DCGM_FI_PROF_NVLINK_TX_BYTES and _RX_BYTES are cumulative KiB where DCGM's fields are a
rate in bytes/s, so they are exported under zerotrace's names (`zerotrace_gpu_nvlink_tx_kib_total`,
`zerotrace_gpu_nvlink_rx_kib_total`) and a panel on DCGM's names finds no series for them.
A gauge is the window's last value; a counter (energy, PCIe bytes, ECC totals, NVLink) the last
cumulative value, typed `counter` as dcgm-exporter types them (DCGM names carry no `_total`,
zerotrace's own do). A field the device does not support, or had no value in the window, is
left out; a family with no device is left out whole.

RDMA, per port counter set (source SYSFS) and per process queue pair counter set
(RDMA_STATISTIC, with `pid`, `process_name` and, when the kernel gave it, `counter_id`: the
counter set, so two sets of one pid stay two series): `zerotrace_rdma_<counter>_total` (counter,
the last cumulative value) and `zerotrace_rdma_<counter>_per_second` (gauge, the collector's
last rate), labelled `Hostname`, `device`, `port` and `source`; counter names are the
collector's normalised ones (tx_bytes, rx_errors, cnp_sent, ...). RoCE flows seen in packets
are not exported: a flow per queue pair is too many short-lived series for Prometheus.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerotrace.errors import ConfigError
from zerotrace.gpu_fields import DCGM_FIELDS
from zerotrace.store import Query, Store
from zerotrace_query.device_search import (
    KIND_GPU,
    KIND_RDMA,
    LIMITS,
    DeviceFilter,
    latest_windows,
)
from zerotrace_query.documents import DEVICE_WINDOWS
from zerotrace_query.llm_stats import NS_PER_S
from zerotrace_query.prometheus_text import SampleFamily, render_samples, sanitize

# Twice profiler-agg's longest close delay (a 5 s window, closed up to a minute late when no
# later sample comes), with room for a scrape interval: older than this, a device is gone.
RECENT_NS = 5 * 60 * NS_PER_S
RDMA_EXPORTED_SOURCES = ("SYSFS", "RDMA_STATISTIC")
RDMA_PREFIX = "zerotrace_rdma_"
Labels = tuple[tuple[str, str], ...]


def gpu_labels(doc: Mapping[str, Any]) -> Labels:
    """dcgm-exporter's labels, in its order."""
    index = doc.get("device_index")
    return (
        ("gpu", "" if index is None else str(index)),
        ("UUID", str(doc.get("device") or "")),
        ("modelName", str(doc.get("model") or "")),
        ("Hostname", str(doc.get("node_id") or "")),
    )


def rdma_labels(doc: Mapping[str, Any]) -> Labels:
    pid = doc.get("pid")
    index = doc.get("device_index")
    counter_id = doc.get("counter_id")  # an empty label is left out: SYSFS ports have none
    return (
        ("Hostname", str(doc.get("node_id") or "")),
        ("device", str(doc.get("device") or "")),
        ("port", "" if index is None else str(index)),
        ("source", str(doc.get("source") or "")),
        ("pid", "" if pid is None else str(pid)),
        ("process_name", str(doc.get("process_name") or "")),
        ("counter_id", "" if counter_id is None else str(counter_id)),
    )


def _last(doc: Mapping[str, Any], part: str, name: str) -> int | float | None:
    found = (doc.get(part) or {}).get(name)
    return None if found is None else found.get("last")


def exported(value: int | float, divisor: int) -> int | float:
    """A value in DCGM's unit (zerotrace's divided by `divisor`): an int that divides evenly
    stays an int, printed whole as DCGM's are; any other quotient is a float."""
    if isinstance(value, int) and value % divisor == 0:
        return value // divisor
    return value / divisor


def gpu_families(windows: list[dict[str, Any]]) -> list[SampleFamily]:
    """One family per DCGM field some GPU has a value for, in DCGM_FIELDS' order, in DCGM's
    unit and under its Prometheus name (DCGM's, unless its meaning differs)."""
    families = []
    for field in DCGM_FIELDS:
        part = "counters" if field.counter else "metrics"
        samples = []
        for doc in windows:
            value = _last(doc, part, field.field)
            if value is not None and field.field not in (doc.get("unsupported") or ()):
                samples.append((gpu_labels(doc), exported(value, field.export_divisor)))
        if samples:
            kind = "counter" if field.counter else "gauge"
            families.append(SampleFamily(field.prometheus_name, field.doc, kind, tuple(samples)))
    return families


def rdma_families(windows: list[dict[str, Any]]) -> list[SampleFamily]:
    """Per counter name (sorted): its `_total` counter family, then its `_per_second` gauge."""
    names = sorted(
        {n for doc in windows for p in ("counters", "metrics") for n in doc.get(p) or {}}
    )
    families = []
    for name in names:
        base = RDMA_PREFIX + sanitize(name).removesuffix("_total")
        for part, suffix, kind, help_text in (
            ("counters", "_total", "counter", f"RDMA counter {name}, cumulative."),
            ("metrics", "_per_second", "gauge", f"RDMA counter {name}, increase per second."),
        ):
            samples = [
                (rdma_labels(doc), value)
                for doc in windows
                if (value := _last(doc, part, name)) is not None
            ]
            if samples:
                families.append(SampleFamily(base + suffix, help_text, kind, tuple(samples)))
    return families


def collect(store: Store, now_ns: int) -> list[SampleFamily] | None:
    """The device families; None when the store has no device index."""
    try:
        store.count(DEVICE_WINDOWS.name, Query(limit=0))
    except ConfigError:  # a valid query fails only on a missing index
        return None
    since = max(now_ns - RECENT_NS, 0)
    limit = LIMITS["list"][1]
    gpus, _ = latest_windows(store, DeviceFilter(KIND_GPU, start_ns_from=since), limit)
    rdma = [
        doc
        for source in RDMA_EXPORTED_SOURCES
        for doc, _, _ in latest_windows(
            store, DeviceFilter(KIND_RDMA, source=source, start_ns_from=since), limit
        )[0]
    ]
    return gpu_families([doc for doc, _, _ in gpus]) + rdma_families(rdma)


def exposition(store: Store, now_ns: int) -> str:
    """The device families' text ("" without a device index), to follow the others on
    /metrics."""
    found = collect(store, now_ns)
    return "" if found is None else render_samples(found)
