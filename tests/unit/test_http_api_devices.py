"""The GPU and RDMA routes of the HTTP API over the fleet of tests/unit/device_data.py: each
answers what device_search answers for the same filters, bad parameters get 400 and one line
of JSON, and the 404 names the routes."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.device_data import FLOW, T0, WINDOW_NS, filled_store, gpu_a0, rdma_sysfs, window
from zerotrace_query.chip_compare import ModelsFilter, chip_comparison
from zerotrace_query.device_search import DeviceFilter, device_list
from zerotrace_query.http_api import HttpApi

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    store = filled_store()
    http = HttpApi(store, port=0).start()
    try:
        yield http.url
    finally:
        http.stop()
        store.close()


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            assert r.headers["Content-Type"] == "application/json"
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_gpu_devices(api: str) -> None:
    status, body = get(f"{api}/api/v1/gpu/devices")
    assert status == 200
    store = filled_store()
    try:
        assert body == device_list(store, DeviceFilter("gpu").check())
    finally:
        store.close()
    assert [d["device"] for d in body["devices"]] == ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]


def test_gpu_windows_of_one_device_and_range(api: str) -> None:
    status, body = get(
        f"{api}/api/v1/gpu/windows?device=GPU-aaaa&from={T0 + WINDOW_NS}&to={T0 + 3 * WINDOW_NS}"
    )
    assert status == 200
    assert body["windows"] == [gpu_a0(1), gpu_a0(2)]
    assert (body["count"], body["total"], body["truncated"]) == (2, 2, False)


def test_gpu_events(api: str) -> None:
    status, body = get(f"{api}/api/v1/gpu/events?node=node-a&limit=5")
    assert status == 200
    assert [(e["device"], e["code"]) for e in body["events"]] == [
        ("GPU-aaaa", 79),
        ("GPU-bbbb", 63),
        ("GPU-bbbb", 48),
    ]


def test_rdma_ports_and_windows(api: str) -> None:
    status, body = get(f"{api}/api/v1/rdma/ports?source=SYSFS")
    assert status == 200
    assert [(d["device"], d["device_index"], d["windows"]) for d in body["devices"]] == [
        ("mlx5_0", 1, 3)
    ]
    status, body = get(f"{api}/api/v1/rdma/windows?node=node-a&device=mlx5_0&port=1&source=SYSFS")
    assert status == 200
    assert body["windows"] == [rdma_sysfs(i) for i in range(3)]
    flow = urllib.parse.quote(FLOW)
    status, body = get(f"{api}/api/v1/rdma/windows?flow={flow}")
    assert [w["flow"] for w in body["windows"]] == [FLOW, FLOW]


def test_rdma_windows_of_one_counter_set() -> None:
    sets = [
        window(
            "rdma",
            "node-a",
            "mlx5_0",
            1,
            "RDMA_STATISTIC",
            T0 + i * WINDOW_NS,
            {},
            {"rx_write_requests": (0, 10 * counter_id + i)},
            pid=4242,
            counter_id=counter_id,
        )
        for i in range(2)
        for counter_id in (3, 4)
    ]
    store = filled_store(sets)
    http = HttpApi(store, port=0).start()
    try:
        status, body = get(f"{http.url}/api/v1/rdma/windows?pid=4242&counter_id=4")
        _, ports = get(f"{http.url}/api/v1/rdma/ports?source=RDMA_STATISTIC")
    finally:
        http.stop()
        store.close()
    assert status == 200
    assert body["windows"] == [sets[1], sets[3]]
    assert [(d["pid"], d["counter_id"], d["windows"]) for d in ports["devices"]] == [
        (4242, 3, 2),
        (4242, 4, 2),
    ]


def test_gpu_models_compares_the_chip_models_of_a_period(api: str) -> None:
    status, body = get(f"{api}/api/v1/gpu/models?from={T0 + WINDOW_NS}&to={T0 + 3 * WINDOW_NS}")
    assert status == 200
    store = filled_store()
    try:
        flt = ModelsFilter(start_ns_from=T0 + WINDOW_NS, start_ns_to=T0 + 3 * WINDOW_NS)
        assert body == chip_comparison(store, flt)
    finally:
        store.close()
    assert [(m["vendor"], m["devices"], m["windows"]) for m in body["models"]] == [
        ("amd", 1, 2),
        ("nvidia", 1, 2),
    ]


@pytest.mark.parametrize(
    ("path", "error"),
    [
        (
            "/api/v1/gpu/windows?port=1",
            "unknown query parameter 'port'; known: device, from, limit, node, to",
        ),
        ("/api/v1/rdma/windows?pid=x", "query parameter 'pid' must be an integer"),
        ("/api/v1/rdma/windows?counter_id=x", "query parameter 'counter_id' must be an integer"),
        ("/api/v1/gpu/events?limit=5000", "'limit' must be between 1 and 1000"),
        ("/api/v1/gpu/models?to=x", "query parameter 'to' must be an integer"),
    ],
)
def test_a_bad_parameter_is_400_and_one_line(api: str, path: str, error: str) -> None:
    assert get(api + path) == (400, {"error": error})


def test_the_404_names_the_device_routes(api: str) -> None:
    status, body = get(f"{api}/api/v1/gpu")
    assert status == 404
    for route in (
        "/api/v1/gpu/devices",
        "/api/v1/gpu/windows",
        "/api/v1/gpu/events",
        "/api/v1/gpu/models",
    ):
        assert route in body["error"]
    assert "/api/v1/rdma/ports" in body["error"] and "/api/v1/rdma/windows" in body["error"]
