"""The device answers (zerotrace_query/device_search.py) on DuckDB filled with the fleet of
tests/unit/device_data.py: the devices seen with their newest window (one found by its own
query, having gone silent), windows oldest first and cut to the newest, XID events newest
first, and the parameters refused with one line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.device_data import (
    FLOW,
    GIB,
    NS,
    T0,
    WINDOW_NS,
    filled_store,
    gpu_a0,
    gpu_b0,
    rdma_sysfs,
    window,
)
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.device_search import (
    DeviceFilter,
    answer,
    device_events,
    device_list,
    device_windows,
    parse_device_query,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def store() -> Iterator[DuckDBStore]:
    db = filled_store()
    yield db
    db.close()


def ids(devices: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(d["node_id"], d["device"], d["device_index"], d["source"]) for d in devices]


def test_the_gpus_with_their_newest_window_and_counts(store: DuckDBStore) -> None:
    body = device_list(store, DeviceFilter("gpu").check())
    assert (body["count"], body["total"], body["truncated"]) == (3, 3, False)
    assert ids(body["devices"]) == [
        ("node-a", "GPU-aaaa", 0, "gpu"),
        ("node-a", "GPU-bbbb", 1, "gpu"),
        ("node-b", "GPU-cccc", 0, "gpu"),
    ]
    a0, a1, b0 = body["devices"]
    assert (a0["windows"], a0["event_count"]) == (4, 1)
    assert a0["last_window_start_ns"] == T0 + 3 * WINDOW_NS
    assert a0["last_window_end_ns"] == T0 + 4 * WINDOW_NS
    assert a0["metrics"] == {
        "fb_total_bytes": 80 * GIB,
        "fb_used_bytes": 4 * GIB,
        "gpu_util_pct": 45.0,
        "power_w": 310.25,
        "sm_clock_mhz": 1980,
        "temperature_c": 64.0,
    }
    assert a0["counters"] == {"pcie_tx_bytes": 2**40 + 4, "total_energy_consumption_mj": 1_010_500}
    assert (a0["vendor"], a0["model"], a0["driver_version"]) == (
        "nvidia",
        "NVIDIA H100 80GB HBM3",
        "550.54.15",
    )
    assert a0["unsupported"] == ["enc_util_pct"]
    assert a0["clocks_event_reason_names"] == ["SwPowerCap"]
    assert a0["processes"] == gpu_a0(3)["processes"]
    # Silent since T0: not among the newest windows, found by its own query.
    assert (a1["windows"], a1["event_count"], a1["last_window_start_ns"]) == (1, 2, T0)
    assert a1["metrics"] == {"fb_total_bytes": 80 * GIB, "fb_used_bytes": 0, "gpu_util_pct": 0.0}
    assert (b0["vendor"], b0["windows"], b0["event_count"]) == ("amd", 4, 0)
    assert b0["counters"] == {"ecc_dbe_vol_total": 6}
    assert b0["unsupported"] == gpu_b0(0)["unsupported"]


def test_the_list_filters_by_node_and_range(store: DuckDBStore) -> None:
    body = device_list(store, DeviceFilter("gpu", node="node-b").check())
    assert ids(body["devices"]) == [("node-b", "GPU-cccc", 0, "gpu")]
    later = DeviceFilter("gpu", start_ns_from=T0 + WINDOW_NS, start_ns_to=T0 + 3 * WINDOW_NS)
    body = device_list(store, later.check())
    assert [(d["device"], d["windows"], d["last_window_start_ns"]) for d in body["devices"]] == [
        ("GPU-aaaa", 2, T0 + 2 * WINDOW_NS),
        ("GPU-cccc", 2, T0 + 2 * WINDOW_NS),
    ]
    assert [d["event_count"] for d in body["devices"]] == [1, 0]


def test_a_list_cut_by_its_limit_says_so(store: DuckDBStore) -> None:
    body = device_list(store, DeviceFilter("gpu", limit=2).check())
    assert (body["count"], body["total"], body["truncated"]) == (2, 3, True)
    assert body["warning"] == "3 series matched; only the first 2 are listed: filter by node"
    assert [d["device"] for d in body["devices"]] == ["GPU-aaaa", "GPU-bbbb"]


def test_the_rdma_series_ports_counter_sets_and_flows(store: DuckDBStore) -> None:
    body = device_list(store, DeviceFilter("rdma").check())
    assert ids(body["devices"]) == [
        ("node-a", "", 0, "PACKETS"),
        ("node-a", "mlx5_0", 1, "RDMA_STATISTIC"),
        ("node-a", "mlx5_0", 1, "SYSFS"),
    ]
    flow, statistic, port = body["devices"]
    assert (flow["flow"], flow["windows"], flow["counters"]) == (
        FLOW,
        2,
        {"bytes": 2 * 10**9, "packets": 500_000},
    )
    assert (statistic["pid"], statistic["process_name"]) == (4242, "python")
    assert statistic["counters"] == {"rx_write_requests": 201}
    assert port["metrics"] == {"rx_bytes": 1e9, "tx_bytes": 2.5e9 + 2}
    assert port["counters"] == {"rx_errors": 2, "tx_bytes": 10**12 + 3 * 10**10}
    assert "processes" not in port
    only = device_list(store, DeviceFilter("rdma", source="SYSFS").check())
    assert ids(only["devices"]) == [("node-a", "mlx5_0", 1, "SYSFS")]


def test_a_devices_windows_oldest_first(store: DuckDBStore) -> None:
    body = device_windows(store, DeviceFilter("gpu", device="GPU-aaaa").check())
    assert (body["count"], body["total"], body["truncated"]) == (4, 4, False)
    assert body["windows"] == [gpu_a0(i) for i in range(4)]
    assert body["unsupported"] == ["enc_util_pct"]


def test_windows_cut_to_the_newest_say_so(store: DuckDBStore) -> None:
    body = device_windows(store, DeviceFilter("gpu", device="GPU-aaaa", limit=3).check())
    assert [w["window_start_ns"] for w in body["windows"]] == [
        T0 + WINDOW_NS,
        T0 + 2 * WINDOW_NS,
        T0 + 3 * WINDOW_NS,
    ]
    assert (body["count"], body["total"], body["truncated"]) == (3, 4, True)
    assert body["warning"] == (
        "4 windows matched; only the newest 3 are here: narrow the time range or the filters"
    )


def test_rdma_windows_of_one_port_and_range(store: DuckDBStore) -> None:
    flt = DeviceFilter(
        "rdma",
        node="node-a",
        device="mlx5_0",
        port=1,
        source="SYSFS",
        start_ns_from=T0 + WINDOW_NS,
        start_ns_to=T0 + 10 * WINDOW_NS,
    )
    body = device_windows(store, flt.check())
    assert body["windows"] == [rdma_sysfs(1), rdma_sysfs(2)]
    flows = device_windows(store, DeviceFilter("rdma", flow=FLOW).check())
    assert [w["window_start_ns"] for w in flows["windows"]] == [T0, T0 + WINDOW_NS]


def test_events_newest_first_with_their_device(store: DuckDBStore) -> None:
    body = device_events(store, DeviceFilter("gpu").check())
    assert [(e["ts_ns"], e["code"], e["device"], e["device_index"]) for e in body["events"]] == [
        (T0 + 2 * WINDOW_NS + 2 * NS, 79, "GPU-aaaa", 0),
        (T0 + 3 * NS, 63, "GPU-bbbb", 1),
        (T0 + 1 * NS, 48, "GPU-bbbb", 1),
    ]
    assert body["events"][0] == {
        "ts_ns": T0 + 2 * WINDOW_NS + 2 * NS,
        "kind": "xid",
        "code": 79,
        "node_id": "node-a",
        "device": "GPU-aaaa",
        "device_index": 0,
        "model": "NVIDIA H100 80GB HBM3",
        "window_id": gpu_a0(2)["window_id"],
    }
    assert (body["count"], body["total"], body["truncated"]) == (3, 3, False)
    cut = device_events(store, DeviceFilter("gpu", limit=2).check())
    assert [e["code"] for e in cut["events"]] == [79, 63]
    assert (cut["count"], cut["total"], cut["truncated"]) == (2, 3, True)
    assert cut["warning"] == (
        "3 events in this range; only the newest 2 are here: narrow the time range or the filters"
    )
    one = device_events(store, DeviceFilter("gpu", start_ns_from=T0 + WINDOW_NS).check())
    assert [e["code"] for e in one["events"]] == [79]


def test_events_total_counts_the_windows_not_read() -> None:
    # limit=1 reads one window (GPU-aaaa's, one XID); GPU-bbbb's two XIDs are in another.
    db = filled_store()
    try:
        body = device_events(db, DeviceFilter("gpu", limit=1).check())
    finally:
        db.close()
    assert [e["code"] for e in body["events"]] == [79]
    assert (body["count"], body["total"], body["truncated"]) == (1, 3, True)


def test_parse_device_query() -> None:
    flt = parse_device_query("node=n&device=mlx5_0&port=1&source=SYSFS&from=5&to=9", "rdma")
    assert flt == DeviceFilter("rdma", "n", "mlx5_0", 1, "SYSFS", start_ns_from=5, start_ns_to=9)
    assert parse_device_query("", "gpu") == DeviceFilter("gpu")
    assert parse_device_query("pid=7&counter_id=0", "rdma") == DeviceFilter(
        "rdma", pid=7, counter_id=0
    )
    assert parse_device_query("pid=7", "rdma").counter_id is None


@pytest.mark.parametrize(
    ("path", "query", "error"),
    [
        (
            "/api/v1/gpu/devices",
            "port=1",
            "unknown query parameter 'port'; known: device, from, limit, node, to",
        ),
        ("/api/v1/gpu/windows", "from=x", "query parameter 'from' must be an integer"),
        ("/api/v1/gpu/windows", "from=9&to=5", "'to' must be after 'from'"),
        ("/api/v1/gpu/windows", "limit=10001", "'limit' must be between 1 and 10000"),
        ("/api/v1/gpu/events", "limit=1001", "'limit' must be between 1 and 1000"),
        (
            "/api/v1/rdma/ports",
            "source=NIC",
            "'source' must be one of SYSFS, RDMA_STATISTIC, PACKETS",
        ),
        (
            "/api/v1/rdma/windows",
            "port=-1",
            "'limit', 'port', 'pid' and 'counter_id' must not be negative",
        ),
        (
            "/api/v1/rdma/windows",
            "counter_id=-2",
            "'limit', 'port', 'pid' and 'counter_id' must not be negative",
        ),
        (
            "/api/v1/gpu/windows",
            "counter_id=1",
            "unknown query parameter 'counter_id'; known: device, from, limit, node, to",
        ),
        ("/api/v1/rdma/windows", "a", "malformed query string 'a'"),
    ],
)
def test_bad_parameters_are_one_line(store: DuckDBStore, path: str, query: str, error: str) -> None:
    assert answer(store, path, query) == (400, {"error": error})


def test_a_store_without_the_index_answers_503() -> None:
    empty = DuckDBStore()
    try:
        status, body = answer(empty, "/api/v1/gpu/devices", "")
    finally:
        empty.close()
    assert status == 503
    assert set(body) == {"error"}


def counter_set(i: int, pid: int | None, counter_id: int | None) -> dict[str, object]:
    """Window i of a queue pair counter set of mlx5_0 port 1 on node-a."""
    return window(
        "rdma",
        "node-a",
        "mlx5_0",
        1,
        "RDMA_STATISTIC",
        T0 + i * WINDOW_NS,
        {},
        {"rx_write_requests": (0, 100 * (counter_id or 0) + i)},
        pid=pid,
        counter_id=counter_id,
    )


def test_two_counter_sets_of_one_pid_are_two_series() -> None:
    docs = [counter_set(i, 4242, c) for i in range(2) for c in (3, 4)]
    docs.append(counter_set(0, None, 9))  # the kernel's own set: no pid
    db = filled_store(docs)
    try:
        body = device_list(db, DeviceFilter("rdma").check())
        windows = device_windows(db, DeviceFilter("rdma", pid=4242, counter_id=4).check())
    finally:
        db.close()
    assert [(d["pid"], d["counter_id"], d["windows"], d["counters"]) for d in body["devices"]] == [
        (None, 9, 1, {"rx_write_requests": 900}),
        (4242, 3, 2, {"rx_write_requests": 301}),
        (4242, 4, 2, {"rx_write_requests": 401}),
    ]
    assert windows["windows"] == [counter_set(0, 4242, 4), counter_set(1, 4242, 4)]


def test_a_silent_series_without_a_pid_is_not_answered_with_another_pids_window() -> None:
    # The kernel's set (no pid) reported once at T0; pid 4242's set four times since. The
    # newest-windows page (twice the series: four windows) holds only pid 4242's, and the
    # silent set's own search cannot say "no pid": its newest window is pid 4242's.
    docs = [counter_set(0, None, None), *(counter_set(i, 4242, None) for i in range(1, 5))]
    db = filled_store(docs)
    try:
        body = device_list(db, DeviceFilter("rdma", source="RDMA_STATISTIC").check())
    finally:
        db.close()
    got = [(d["pid"], d["windows"], d["last_window_start_ns"]) for d in body["devices"]]
    assert got == [(None, 1, T0), (4242, 4, T0 + 4 * WINDOW_NS)]
