"""GPU and RDMA device metrics on /metrics (zerotrace_query/device_metrics.py) over the fleet
of tests/unit/device_data.py: dcgm-exporter's names and labels with each GPU's last value,
counters typed counter, unsupported and absent fields left out, RDMA port and counter-set
counters and rates, flows not exported, silent devices dropped, valid text for Prometheus's
parser, and GET /metrics serving them after the other families."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.device_data import NS, T0, WINDOW_NS, filled_store, gpu_a0, window
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.device_metrics import RECENT_NS, exposition
from zerotrace_query.documents import INDEX_SPECS
from zerotrace_query.http_api import HttpApi
from zerotrace_query.prometheus_text import CONTENT_TYPE

pytestmark = pytest.mark.unit
NOW = T0 + 4 * WINDOW_NS + 10 * NS
H100 = 'gpu="0",UUID="GPU-aaaa",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"'
H100_1 = 'gpu="1",UUID="GPU-bbbb",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"'
MI300 = 'gpu="0",UUID="GPU-cccc",modelName="AMD Instinct MI300X",Hostname="node-b"'
PORT = 'Hostname="node-a",device="mlx5_0",port="1",source="SYSFS"'
QPS = (
    'Hostname="node-a",device="mlx5_0",port="1",source="RDMA_STATISTIC",pid="4242",'
    'process_name="python"'
)
EXPECTED = [
    "# HELP DCGM_FI_DEV_SM_CLOCK SM clock, MHz.",
    "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
    f"DCGM_FI_DEV_SM_CLOCK{{{H100}}} 1980",
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature, C.",
    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
    f"DCGM_FI_DEV_GPU_TEMP{{{H100}}} 64.0",
    "# HELP DCGM_FI_DEV_POWER_USAGE Power draw, W.",
    "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
    f"DCGM_FI_DEV_POWER_USAGE{{{H100}}} 310.25",
    f"DCGM_FI_DEV_POWER_USAGE{{{MI300}}} 697.0",
    "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Energy since the driver loaded, mJ (counter).",
    "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
    f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{H100}}} 1010500",
    "# HELP DCGM_FI_DEV_PCIE_TX_THROUGHPUT Bytes sent over PCIe (counter; may wrap; DCGM's unit"
    " is KB: /metrics divides by 1024).",
    "# TYPE DCGM_FI_DEV_PCIE_TX_THROUGHPUT counter",
    f"DCGM_FI_DEV_PCIE_TX_THROUGHPUT{{{H100}}} 1.0737418240039062e+09",  # (2**40 + 4) / 1024
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilisation, %.",
    "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    f"DCGM_FI_DEV_GPU_UTIL{{{H100}}} 45.0",
    f"DCGM_FI_DEV_GPU_UTIL{{{H100_1}}} 0.0",
    f"DCGM_FI_DEV_GPU_UTIL{{{MI300}}} 99.0",
    "# HELP DCGM_FI_DEV_FB_USED Framebuffer used, bytes (DCGM's unit is MiB: /metrics divides"
    " by 2**20).",
    "# TYPE DCGM_FI_DEV_FB_USED gauge",
    f"DCGM_FI_DEV_FB_USED{{{H100}}} 4096",  # 4 GiB in MiB
    f"DCGM_FI_DEV_FB_USED{{{H100_1}}} 0",
    "# HELP DCGM_FI_DEV_FB_TOTAL Framebuffer in all, bytes (DCGM's unit is MiB: /metrics divides"
    " by 2**20).",
    "# TYPE DCGM_FI_DEV_FB_TOTAL gauge",
    f"DCGM_FI_DEV_FB_TOTAL{{{H100}}} 81920",
    f"DCGM_FI_DEV_FB_TOTAL{{{H100_1}}} 81920",
    "# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Double-bit ECC errors since the driver loaded (counter).",
    "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter",
    f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{MI300}}} 6",
    "# HELP DCGM_FI_DEV_ROW_REMAP_FAILURE A row remapping failed.",
    "# TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge",
    f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{MI300}}} 0",
    "# HELP zerotrace_rdma_rx_bytes_per_second RDMA counter rx_bytes, increase per second.",
    "# TYPE zerotrace_rdma_rx_bytes_per_second gauge",
    f"zerotrace_rdma_rx_bytes_per_second{{{PORT}}} 1e+09",
    "# HELP zerotrace_rdma_rx_errors_total RDMA counter rx_errors, cumulative.",
    "# TYPE zerotrace_rdma_rx_errors_total counter",
    f"zerotrace_rdma_rx_errors_total{{{PORT}}} 2",
    "# HELP zerotrace_rdma_rx_write_requests_total RDMA counter rx_write_requests, cumulative.",
    "# TYPE zerotrace_rdma_rx_write_requests_total counter",
    f"zerotrace_rdma_rx_write_requests_total{{{QPS}}} 201",
    "# HELP zerotrace_rdma_rx_write_requests_per_second RDMA counter rx_write_requests,"
    " increase per second.",
    "# TYPE zerotrace_rdma_rx_write_requests_per_second gauge",
    f"zerotrace_rdma_rx_write_requests_per_second{{{QPS}}} 12.5",
    "# HELP zerotrace_rdma_tx_bytes_total RDMA counter tx_bytes, cumulative.",
    "# TYPE zerotrace_rdma_tx_bytes_total counter",
    f"zerotrace_rdma_tx_bytes_total{{{PORT}}} 1030000000000",
    "# HELP zerotrace_rdma_tx_bytes_per_second RDMA counter tx_bytes, increase per second.",
    "# TYPE zerotrace_rdma_tx_bytes_per_second gauge",
    f"zerotrace_rdma_tx_bytes_per_second{{{PORT}}} 2.500000002e+09",
]


@pytest.fixture(scope="module")
def store() -> Iterator[DuckDBStore]:
    db = filled_store()
    yield db
    db.close()


def test_the_exposition_line_by_line(store: DuckDBStore) -> None:
    assert exposition(store, NOW).splitlines() == EXPECTED


def test_prometheus_reads_every_family_once(store: DuckDBStore) -> None:
    families = list(text_string_to_metric_families(exposition(store, NOW)))
    names = [f.name for f in families]
    assert len(names) == len(set(names)) == 16
    util = next(f for f in families if f.name == "DCGM_FI_DEV_GPU_UTIL")
    assert util.type == "gauge"
    assert [(s.labels["UUID"], s.value) for s in util.samples] == [
        ("GPU-aaaa", 45.0),
        ("GPU-bbbb", 0.0),
        ("GPU-cccc", 99.0),
    ]


def test_a_device_silent_longer_than_recent_is_left_out(store: DuckDBStore) -> None:
    # GPU-bbbb's only window starts at T0; the others' newest at T0 + 15 s.
    text = exposition(store, T0 + RECENT_NS + 1)
    assert "GPU-bbbb" not in text
    assert f"DCGM_FI_DEV_GPU_UTIL{{{H100}}} 45.0" in text.splitlines()
    assert exposition(store, T0 + 3 * WINDOW_NS + RECENT_NS + 1) == ""


def test_unsupported_fields_are_left_out_even_with_a_value() -> None:
    window = gpu_a0(0)
    window["unsupported"] = ["gpu_util_pct", "pcie_tx_bytes"]
    db = filled_store([window])
    try:
        text = exposition(db, T0)
    finally:
        db.close()
    assert "DCGM_FI_DEV_GPU_UTIL" not in text
    assert "DCGM_FI_DEV_PCIE_TX_THROUGHPUT" not in text
    assert f"DCGM_FI_DEV_POWER_USAGE{{{H100}}} 300.5" not in text  # the last, not the first
    assert f"DCGM_FI_DEV_POWER_USAGE{{{H100}}} 310.25" in text.splitlines()


def exposition_of(*windows: dict[str, object]) -> list[str]:
    db = filled_store(list(windows))
    try:
        return exposition(db, T0).splitlines()
    finally:
        db.close()


def test_framebuffer_and_pcie_are_exported_in_dcgms_units() -> None:
    # Windows keep bytes; DCGM's FB fields are MiB and its PCIe ones KB (1024 bytes).
    gpu = gpu_a0(0)
    gpu["metrics"]["fb_used_bytes"]["last"] = 1536 * 2**20 + 2**19  # 1536.5 MiB
    gpu["counters"]["pcie_tx_bytes"]["last"] = 10 * 1024 + 512  # 10.5 KB
    gpu["counters"]["pcie_rx_bytes"] = {"first": 0, "last": 3 * 1024, "increase": 3 * 1024}
    lines = exposition_of(gpu)
    assert f"DCGM_FI_DEV_FB_USED{{{H100}}} 1536.5" in lines
    assert f"DCGM_FI_DEV_FB_TOTAL{{{H100}}} 81920" in lines  # 80 GiB, whole MiB print whole
    assert f"DCGM_FI_DEV_PCIE_TX_THROUGHPUT{{{H100}}} 10.5" in lines
    assert f"DCGM_FI_DEV_PCIE_RX_THROUGHPUT{{{H100}}} 3" in lines
    assert f"DCGM_FI_DEV_POWER_USAGE{{{H100}}} 310.25" in lines  # W in both: unchanged
    assert f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{H100}}} 1001500" in lines  # mJ in both
    parsed = {
        (f.name, f.type): [s.value for s in f.samples]
        for f in text_string_to_metric_families("\n".join(lines) + "\n")
    }
    assert parsed[("DCGM_FI_DEV_FB_USED", "gauge")] == [1536.5]
    assert parsed[("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter")] == [10.5]


def test_nvlink_kib_counters_are_not_exported_under_dcgms_rate_names() -> None:
    gpu = gpu_a0(0)
    gpu["counters"]["nvlink_tx_kib"] = {"first": 10, "last": 50, "increase": 40}
    gpu["counters"]["nvlink_rx_kib"] = {"first": 20, "last": 70, "increase": 50}
    lines = exposition_of(gpu)
    assert "# TYPE zerotrace_gpu_nvlink_tx_kib_total counter" in lines
    assert f"zerotrace_gpu_nvlink_tx_kib_total{{{H100}}} 50" in lines
    assert f"zerotrace_gpu_nvlink_rx_kib_total{{{H100}}} 70" in lines
    assert not [line for line in lines if "DCGM_FI_PROF_NVLINK" in line]


def test_counter_sets_are_told_apart_by_their_counter_id() -> None:
    def counter_set(pid: int | None, counter_id: int, last: int) -> dict[str, object]:
        return window(
            "rdma",
            "node-a",
            "mlx5_0",
            1,
            "RDMA_STATISTIC",
            T0,
            {},
            {"rx_write_requests": (0, last)},
            pid=pid,
            counter_id=counter_id,
        )

    lines = exposition_of(
        counter_set(4242, 3, 10), counter_set(4242, 4, 20), counter_set(None, 7, 5)
    )
    series = 'Hostname="node-a",device="mlx5_0",port="1",source="RDMA_STATISTIC"'
    assert [line for line in lines if line.startswith("zerotrace_rdma_")] == [
        f'zerotrace_rdma_rx_write_requests_total{{{series},counter_id="7"}} 5',
        f'zerotrace_rdma_rx_write_requests_total{{{series},pid="4242",counter_id="3"}} 10',
        f'zerotrace_rdma_rx_write_requests_total{{{series},pid="4242",counter_id="4"}} 20',
    ]


def test_a_store_without_the_device_index_adds_nothing() -> None:
    db = DuckDBStore()
    try:
        assert exposition(db, NOW) == ""
    finally:
        db.close()


def test_get_metrics_serves_the_device_families_last() -> None:
    # A window of now, so the route's own clock finds it recent.
    start = time.time_ns() // WINDOW_NS * WINDOW_NS
    window = gpu_a0(0)
    window.update(window_id="now", window_start_ns=start, window_end_ns=start + WINDOW_NS)
    db = filled_store([window])
    for spec in INDEX_SPECS:
        db.ensure_index(spec)
    http = HttpApi(db, port=0).start()
    try:
        with urllib.request.urlopen(http.url + "/metrics") as response:
            assert response.headers["Content-Type"] == CONTENT_TYPE
            text = response.read().decode()
    finally:
        http.stop()
        db.close()
    lines = text.splitlines()
    assert f"DCGM_FI_DEV_GPU_UTIL{{{H100}}} 15.0" in lines
    assert lines.index("# TYPE DCGM_FI_DEV_SM_CLOCK gauge") > lines.index(
        "# TYPE traces_service_graph_request_total counter"
    )
