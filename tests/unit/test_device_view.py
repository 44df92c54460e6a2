"""What `zerotrace run --gpu-metrics` / `--rdma` shows of its devices
(zerotrace_cli/device_view.py): a GPU line from its latest window with the run's XIDs and
health, an RDMA line per port with its throughput and the error counters that moved over the
run (steps between windows and resets counted), gaps as '-', nothing without device windows;
and the same lines in run_view's summary and live view."""

from __future__ import annotations

from typing import Any

import pytest

from zerotrace import names
from zerotrace_cli.device_view import DevicesSeen, throughput
from zerotrace_cli.run_view import Summary, draw_live

pytestmark = pytest.mark.unit

S = 1_000_000_000
T0 = 1_700_000_000 * S
H100 = "GPU-5a1c0e2d-0000-4000-8000-000000000000"


def gauge(last: float, mean: float | None = None) -> dict[str, float]:
    m = last if mean is None else mean
    return {"min": m, "max": last, "mean": m, "last": last, "samples": 2}


def gpu_window(start: int, index: int = 0, **over: Any) -> dict[str, Any]:
    w: dict[str, Any] = {
        "window_id": f"gpu:n:{H100}:{index}:gpu::{start}",
        "kind": "gpu",
        "node_id": "n",
        "vendor": "nvidia",
        "model": "NVIDIA H100 80GB HBM3",
        "device": f"{H100}-{index}",
        "device_index": index,
        "source": "gpu",
        "window_start_ns": start,
        "metrics": {
            "gpu_util_pct": gauge(37.0, 20.0),
            "utilization_pct": gauge(37.0),
            "fb_used_bytes": gauge(5362475008.0),
            "fb_total_bytes": gauge(85899345920.0),
            "power_w": gauge(312.456),
            "temperature_c": gauge(41.0),
        },
        "counters": {},
        "events": [],
        "unsupported": [],
        "failed": [],
        "health": None,
        "health_worst": None,
    }
    return w | over


def port_window(
    start: int, counters: dict[str, tuple[int, int, int]], **over: Any
) -> dict[str, Any]:
    w: dict[str, Any] = {
        "kind": "rdma",
        "node_id": "n",
        "device": "mlx5_0",
        "device_index": 1,
        "source": "SYSFS",
        "window_start_ns": start,
        "metrics": {"rx_bytes": gauge(2e7, 12.5e6), "tx_bytes": gauge(1.0, 3e6)},
        "counters": {
            name: {"first": f, "last": la, "increase": i} for name, (f, la, i) in counters.items()
        },
    }
    return w | over


def lines_of(*windows: dict[str, Any]) -> list[str]:
    seen = DevicesSeen()
    for w in windows:
        seen.add(w)
    return seen.lines()


def test_a_gpu_line_is_its_latest_window_with_the_runs_xids() -> None:
    first = gpu_window(T0, events=[{"kind": "xid", "code": 79, "ts_ns": T0 + 1}])
    latest = gpu_window(T0 + 5 * S)
    latest["metrics"] = latest["metrics"] | {"gpu_util_pct": gauge(99.5), "power_w": gauge(70)}
    latest["events"] = [
        {"kind": "xid", "code": 79, "ts_ns": T0 + 6 * S},
        {"kind": "xid", "code": 13, "ts_ns": T0 + 7 * S},
    ]
    assert lines_of(first, latest) == [
        "gpu 0 NVIDIA H100 80GB HBM3: util 99.5%, memory 5.0/80.0 GiB, power 70.0 W, 41 C, "
        "XIDs 79x2 13x1"
    ]
    # An older window after it (any order across devices) changes nothing.
    assert lines_of(first, latest, gpu_window(T0)) == lines_of(first, latest)


def test_gaps_are_dashes_and_a_gpu_without_xid_events_says_none_or_nothing() -> None:
    w = gpu_window(T0, index=1, model="NVIDIA A10")
    w["metrics"] = {"utilization_pct": gauge(3.0), "memory_total_bytes": gauge(24146608128.0)}
    assert lines_of(w) == [
        "gpu 1 NVIDIA A10: util 3%, memory -/22.5 GiB, power - W, - C, XIDs none"
    ]
    ascend = gpu_window(T0, model="Ascend 910B", unsupported=["xid_errors"], metrics={})
    assert lines_of(ascend) == ["gpu 0 Ascend 910B: util -, memory -/- GiB, power - W, - C"]


def test_health_is_the_latest_verdict_with_the_runs_worst_when_not_ok() -> None:
    def w(start: int, health: str, worst: str | None) -> dict[str, Any]:
        return gpu_window(start, unsupported=["xid_errors"], health=health, health_worst=worst)

    def tail(*windows: dict[str, Any]) -> str:
        return lines_of(*windows)[0].split(", ")[-1]

    assert tail(w(T0, "OK", None)) == "health OK"
    assert (
        tail(w(T0, "Alarm", "Critical"), w(T0 + 5 * S, "OK", None)) == "health OK (worst Critical)"
    )
    assert tail(w(T0, "Warning", "Warning"), w(T0 + 5 * S, "Alarm", "Alarm")) == "health Alarm"
    assert tail(w(T0, "Fatal", "Fatal"), w(T0 + 5 * S, "OK", "Critical")) == (
        "health OK (worst Fatal)"  # an unknown verdict ranks after Critical
    )


def test_an_rdma_line_has_throughput_and_the_error_counters_that_moved_over_the_run() -> None:
    a = port_window(
        T0, {"tx_bytes": (0, 400, 400), "local_ack_timeouts": (5, 6, 1), "rx_errors": (2, 2, 0)}
    )
    # Between windows: local_ack_timeouts 6 -> 8 (+2, then +1 within); rx_errors was reset
    # (2 -> 0: counts 0) and moved +3 within; tx_bytes is traffic, never listed.
    b = port_window(
        T0 + 5 * S,
        {"tx_bytes": (500, 900, 400), "local_ack_timeouts": (8, 9, 1), "rx_errors": (0, 3, 3)},
    )
    assert lines_of(a, b) == [
        "rdma mlx5_0 port 1: rx 12.5 MB/s, tx 3.0 MB/s; moved: local_ack_timeouts +4, rx_errors +3"
    ]
    assert lines_of(b, a) == [  # a window older than the latest is not counted again
        "rdma mlx5_0 port 1: rx 12.5 MB/s, tx 3.0 MB/s; moved: local_ack_timeouts +1, rx_errors +3"
    ]
    quiet = port_window(T0, {"rx_errors": (2, 2, 0)}, metrics={})
    assert lines_of(quiet) == ["rdma mlx5_0 port 1: rx -, tx -; no error counter moved"]


def test_only_port_windows_are_lines_gpus_first() -> None:
    port = port_window(T0, {})
    flow = port_window(T0, {}, source="PACKETS", device="", flow="a>b qp 7")
    process = port_window(T0, {}, source="RDMA_STATISTIC", pid=9)
    gpus = [gpu_window(T0, index=1, unsupported=["xid_errors"]), gpu_window(T0, index=0)]
    lines = lines_of(port, flow, process, *gpus)
    assert [line.split(":")[0] for line in lines] == [
        "gpu 0 NVIDIA H100 80GB HBM3",
        "gpu 1 NVIDIA H100 80GB HBM3",
        "rdma mlx5_0 port 1",
    ]
    assert lines_of() == []


def test_throughput_units() -> None:
    assert [throughput(v) for v in (None, 0.0, 640.4, 999.9e3, 12.5e6, 3.2e9)] == [
        "-",
        "0 B/s",
        "640 B/s",
        "999.9 kB/s",
        "12.5 MB/s",
        "3.2 GB/s",
    ]


def test_the_summary_and_the_live_view_show_the_device_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    summary = Summary()
    summary.add(names.INDEX_DEVICES, gpu_window(T0))
    summary.add(names.INDEX_DEVICES, port_window(T0, {"cnp_sent": (1, 4, 3)}))
    gpu = "gpu 0 NVIDIA H100 80GB HBM3: util 37%, memory 5.0/80.0 GiB, power 312.5 W, 41 C, "
    gpu += "XIDs none"
    rdma = "rdma mlx5_0 port 1: rx 12.5 MB/s, tx 3.0 MB/s; moved: cnp_sent +3"
    assert summary.lines(0, {}, {}) == [
        "summary: 0 spans (none; 0 failed), 0 LLM requests, 0 dead letters",
        f"  {gpu}",
        f"  {rdma}",
    ]
    assert summary.spans == 0  # a device window is no span
    draw_live(summary, 3.0)
    out = capsys.readouterr().out
    assert out.startswith(
        f"\x1b[H\x1b[2Jzerotrace run  3s  0 spans  0 LLM requests\n\n{gpu}\n{rdma}\n\n"
    )
