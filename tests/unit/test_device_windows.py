"""Device windows (profiler-agg's device_windows.py): raw GPU samples and RDMA counter records
folded per device and window, exact values, closing, late samples, holds; and every window
through the real Avro codec."""

from __future__ import annotations

import math
from typing import Any

import pytest

from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.device_kinds import HEALTH_ORDER, health_rank
from zerotrace.errors import PoisonInput
from zerotrace.gpu_fields import DCGM_FIELDS
from zerotrace_profiler_agg.device_windows import (
    MAX_CLOSED_MARKS,
    DeviceWindows,
    flow_label,
    rdma_vendor,
)

pytestmark = pytest.mark.unit

S = 1_000_000_000
W = 5 * S  # the default window
T0 = 1_700_000_000 * S  # a multiple of W
UUID = "GPU-5a1c0e2d-0000-4000-8000-000000000000"


def gpu(ts: int, **over: Any) -> dict[str, Any]:
    """A full raw.gpumetrics datum: every DCGM field null unless given."""
    datum: dict[str, Any] = {
        "event_id": f"n/gpu/0/{ts}",
        "node_id": "n",
        "ts_ns": ts,
        "vendor": "nvidia",
        "device_index": 0,
        "device_uuid": UUID,
        "model": "NVIDIA H100 80GB HBM3",
        "utilization_pct": -1.0,
        "memory_used_bytes": -1,
        "memory_total_bytes": -1,
        "driver_version": "550.54.15",
        "trigger": "interval",
        **{f.field: None for f in DCGM_FIELDS},
        "clocks_event_reason_names": [],
        "unsupported": [],
        "failed": [],
        "xid_events": [],
        "processes": [],
    }
    return datum | over


def rdma(ts: int, counters: dict[str, int], rates: dict[str, float], **over: Any) -> dict[str, Any]:
    datum: dict[str, Any] = {
        "event_id": f"n/rdma/mlx5_0/1/{ts}",
        "node_id": "n",
        "ts_ns": ts,
        "device": "mlx5_0",
        "port": 1,
        "counters": counters,
        "source": "SYSFS",
        "interval_ns": S if rates else 0,
        "rates": rates,
        "pid": None,
        "process_name": None,
        "qpns": [],
        "flow": None,
    }
    return datum | over


def use(pid: int, used: int | None, sm: float | None, **over: Any) -> dict[str, Any]:
    datum = {
        "pid": pid,
        "process_name": "python3",
        "service": None,
        "container_id": None,
        "used_memory_bytes": used,
        "sm_util_pct": sm,
        "mem_util_pct": None,
        "enc_util_pct": None,
        "dec_util_pct": None,
    }
    return datum | over


def fold() -> DeviceWindows:
    return DeviceWindows(W, 2 * S)


def test_gauges_are_exact_min_max_last_and_an_fsum_mean() -> None:
    f = fold()
    powers = [312.456, 0.1, 0.2, 312.457]
    for i, p in enumerate(powers):
        assert f.add_gpu(gpu(T0 + i * S, power_w=p, gpu_util_pct=float(30 + i))) == []
    [w] = f.flush()
    assert w["metrics"]["power_w"] == {
        "min": 0.1,
        "max": 312.457,
        "mean": math.fsum(powers) / 4,
        "last": 312.457,
        "samples": 4,
    }
    assert w["metrics"]["gpu_util_pct"]["mean"] == 31.5
    assert w["samples"] == 4 and w["event_count"] == 0
    assert (w["first_sample_ns"], w["last_sample_ns"]) == (T0, T0 + 3 * S)
    assert w["window_id"] == f"gpu:n:{UUID}:0:gpu::{T0}"
    assert {k: w[k] for k in ("kind", "vendor", "model", "device", "device_index", "source")} == {
        "kind": "gpu",
        "vendor": "nvidia",
        "model": "NVIDIA H100 80GB HBM3",
        "device": UUID,
        "device_index": 0,
        "source": "gpu",
    }
    assert (w["window_start_ns"], w["window_end_ns"]) == (T0, T0 + W)
    assert (w["flow"], w["pid"], w["process_name"], w["interval_ns"]) == ("", None, None, None)
    assert w["driver_version"] == "550.54.15"
    assert (w["health"], w["health_worst"]) == (None, None)  # NVML gives no verdict


def test_every_dcgm_gauge_is_a_metric_every_counter_a_counter_and_booleans_are_0_or_1() -> None:
    values = {d.field: (True if d.avro == "boolean" else 7) for d in DCGM_FIELDS}
    f = fold()
    f.add_gpu(gpu(T0, **values, utilization_pct=37.0, memory_used_bytes=5, memory_total_bytes=9))
    [w] = f.flush()
    gauges = {d.field for d in DCGM_FIELDS if not d.counter}
    legacy = {"utilization_pct", "memory_used_bytes", "memory_total_bytes"}
    assert set(w["metrics"]) == gauges | legacy
    assert set(w["counters"]) == {d.field for d in DCGM_FIELDS if d.counter}
    assert w["metrics"]["row_remap_failure"]["last"] == 1.0
    assert w["metrics"]["fb_used_bytes"]["last"] == 7.0
    assert w["metrics"]["memory_total_bytes"]["last"] == 9.0
    assert w["counters"]["pcie_tx_bytes"] == {"first": 7, "last": 7, "increase": 0}


def test_the_first_versions_minus_one_is_no_value() -> None:
    f = fold()
    f.add_gpu(gpu(T0, utilization_pct=-1.0, memory_used_bytes=-1, memory_total_bytes=100))
    [w] = f.flush()
    assert set(w["metrics"]) == {"memory_total_bytes"}


def test_counter_increase_sums_steps_and_a_step_down_counts_the_new_value() -> None:
    f = fold()
    for i, energy in enumerate([1000, 1500, 1500, 40, 100]):  # reset after the third
        f.add_gpu(gpu(T0 + i * S // 2, total_energy_consumption_mj=energy))
    [w] = f.flush()
    assert w["counters"]["total_energy_consumption_mj"] == {
        "first": 1000,
        "last": 100,
        "increase": 500 + 0 + 40 + 60,
    }


def test_a_later_sample_closes_the_window_and_opens_the_next() -> None:
    f = fold()
    assert f.add_gpu(gpu(T0 + 4 * S, pcie_tx_bytes=10)) == []
    [closed] = f.add_gpu(gpu(T0 + W, pcie_tx_bytes=30))
    assert closed["window_start_ns"] == T0 and closed["samples"] == 1
    assert closed["counters"]["pcie_tx_bytes"] == {"first": 10, "last": 10, "increase": 0}
    [later] = f.flush()
    assert later["window_start_ns"] == T0 + W
    assert later["counters"]["pcie_tx_bytes"] == {"first": 30, "last": 30, "increase": 0}


def test_tick_closes_a_window_grace_past_its_end_and_flush_the_rest() -> None:
    f = fold()
    f.add_gpu(gpu(T0 + S))
    f.add_gpu(gpu(T0 + S, device_index=1, device_uuid="GPU-B"))
    assert f.tick(T0 + W + 2 * S - 1) == []
    closed = f.tick(T0 + W + 2 * S)
    assert [w["device"] for w in closed] == [UUID, "GPU-B"]  # sorted by window, then id
    assert f.tick(T0 + 100 * S) == [] and f.flush() == []
    assert f.counters()["device_open_windows"] == 0


def test_a_sample_for_a_closed_window_is_late_counted_not_a_second_window() -> None:
    f = fold()
    f.add_gpu(gpu(T0 + S, power_w=1.0))
    [_closed] = f.tick(T0 + 10 * S)
    assert f.add_gpu(gpu(T0 + 2 * S, power_w=2.0)) == []  # the collector was behind
    f.add_gpu(gpu(T0 + W + S, power_w=3.0))
    assert f.add_gpu(gpu(T0 + 4 * S, power_w=4.0)) == []  # before the open window
    [w] = f.flush()
    assert w["window_start_ns"] == T0 + W and w["metrics"]["power_w"]["samples"] == 1
    assert f.counters()["device_late_samples"] == 2
    assert f.counters()["device_gpu_samples"] == 4


def test_xid_events_are_kept_once_in_time_order() -> None:
    f = fold()
    f.add_gpu(gpu(T0 + S, xid_events=[{"xid": 79, "ts_ns": T0 + 900}], xid_errors=79))
    f.add_gpu(gpu(T0 + 2 * S, xid_events=[{"xid": 79, "ts_ns": T0 + 900}], xid_errors=79))
    f.add_gpu(gpu(T0 + 3 * S, xid_events=[{"xid": 13, "ts_ns": T0 + 500}]))
    [w] = f.flush()
    assert w["events"] == [
        {"kind": "xid", "code": 13, "ts_ns": T0 + 500},
        {"kind": "xid", "code": 79, "ts_ns": T0 + 900},
    ]
    assert w["event_count"] == 2
    assert w["metrics"]["xid_errors"]["last"] == 79.0


def test_a_not_supported_metric_is_named_and_has_no_value() -> None:
    f = fold()
    f.add_gpu(gpu(T0, unsupported=["memory_temp_c", "xid_errors"], failed=["power_w"]))
    f.add_gpu(gpu(T0 + S, unsupported=["memory_temp_c"], failed=[], temperature_c=30.0))
    [w] = f.flush()
    assert w["unsupported"] == ["memory_temp_c", "xid_errors"] and w["failed"] == ["power_w"]
    assert "memory_temp_c" not in w["metrics"] and "power_w" not in w["metrics"]
    assert w["metrics"]["temperature_c"]["samples"] == 1


def test_process_use_over_the_window() -> None:
    f = fold()
    f.add_gpu(gpu(T0, processes=[use(9, 1 << 30, 50.0), use(4, None, None)]))
    f.add_gpu(gpu(T0 + S, processes=[use(9, 1 << 29, 55.5, service="llm")]))
    f.add_gpu(gpu(T0 + 2 * S, processes=[use(9, None, None)]))
    [w] = f.flush()
    assert w["processes"] == [
        {
            "pid": 4,
            "process_name": "python3",
            "service": None,
            "container_id": None,
            "max_used_memory_bytes": None,
            "last_used_memory_bytes": None,
            "mean_sm_util_pct": None,
        },
        {
            "pid": 9,
            "process_name": "python3",
            "service": "llm",
            "container_id": None,
            "max_used_memory_bytes": 1 << 30,
            "last_used_memory_bytes": 1 << 29,
            "mean_sm_util_pct": math.fsum([50.0, 55.5]) / 2,
        },
    ]


def health_of(*verdicts: str | None) -> tuple[str | None, str | None]:
    """(health, health_worst) of one window of samples with these verdicts."""
    f = fold()
    for i, verdict in enumerate(verdicts):
        f.add_gpu(gpu(T0 + i * S, vendor="ascend", health=verdict))
    [w] = f.flush()
    return w["health"], w["health_worst"]


def test_health_is_the_last_verdict_and_the_worst_is_kept_when_not_ok() -> None:
    assert health_of("OK", "OK") == ("OK", None)
    assert health_of("OK", "Alarm", "Warning", "OK") == ("OK", "Alarm")
    assert health_of("Critical", "Alarm") == ("Alarm", "Critical")
    assert health_of("Warning", None) == ("Warning", "Warning")  # a sample without: kept
    assert health_of(None, None) == (None, None)


def test_health_order_ignores_case_and_an_unknown_verdict_ranks_after_critical() -> None:
    assert [health_rank(h) for h in ("OK", "warning", " ALARM", "Critical")] == [0, 1, 2, 3]
    assert health_rank("Unknown") == health_rank("Fatal") == len(HEALTH_ORDER) == 4
    assert health_of("Critical", "Unknown", "CRITICAL") == ("CRITICAL", "Unknown")
    assert health_of("Unknown", "Fatal") == ("Fatal", "Unknown")  # the first of equals
    assert health_of("warning", "Warning") == ("Warning", "warning")  # as given


def test_clock_reasons_are_the_last_samples() -> None:
    f = fold()
    f.add_gpu(gpu(T0, clocks_event_reason_names=["SwPowerCap"], clocks_event_reasons=4))
    f.add_gpu(gpu(T0 + S, clocks_event_reason_names=[], clocks_event_reasons=0))
    [w] = f.flush()
    assert w["clocks_event_reason_names"] == []
    assert w["metrics"]["clocks_event_reasons"] == {
        "min": 0.0,
        "max": 4.0,
        "mean": 2.0,
        "last": 0.0,
        "samples": 2,
    }


def test_rdma_port_rates_are_metrics_and_counters_counters() -> None:
    f = fold()
    f.add_rdma(rdma(T0, {"port_xmit_data": 4000, "out_of_sequence": 2}, {}))
    f.add_rdma(
        rdma(
            T0 + S,
            {"port_xmit_data": 6000, "out_of_sequence": 5},
            {"port_xmit_data": 2000.0, "out_of_sequence": 3.0},
        )
    )
    f.add_rdma(
        rdma(
            T0 + 2 * S,
            {"port_xmit_data": 6500, "out_of_sequence": 1},
            {"port_xmit_data": 500.0},
            interval_ns=S + 7,
        )
    )
    [w] = f.flush()
    assert w["window_id"] == f"rdma:n:mlx5_0:1:SYSFS::{T0}"
    assert (w["kind"], w["vendor"], w["model"], w["device"], w["device_index"]) == (
        "rdma",
        "mlx5",
        "",
        "mlx5_0",
        1,
    )
    assert w["metrics"] == {
        "out_of_sequence": {"min": 3.0, "max": 3.0, "mean": 3.0, "last": 3.0, "samples": 1},
        "port_xmit_data": {
            "min": 500.0,
            "max": 2000.0,
            "mean": 1250.0,
            "last": 500.0,
            "samples": 2,
        },
    }
    assert w["counters"] == {
        "out_of_sequence": {"first": 2, "last": 1, "increase": 3 + 1},
        "port_xmit_data": {"first": 4000, "last": 6500, "increase": 2500},
    }
    assert w["interval_ns"] == S + 7 and w["processes"] == [] and w["driver_version"] is None


def test_rdma_counter_sets_per_process_and_flows_are_windows_of_their_own() -> None:
    f = fold()
    f.add_rdma(rdma(T0, {"rx_write_requests": 1}, {}, source="RDMA_STATISTIC", pid=77))
    f.add_rdma(
        rdma(T0, {"rx_write_requests": 5}, {}, source="RDMA_STATISTIC", pid=78, process_name="ib")
    )
    flow = {"src_addr": "10.0.0.1", "dst_addr": "10.0.0.2", "dest_qp": 17, "src_qp": None}
    f.add_rdma(
        rdma(
            T0 + S,
            {"lost": 3},
            {"lost": 1.5},
            source="PACKETS",
            device="",
            port=0,
            flow=flow | {"transport": "RC"},
        )
    )
    windows = f.flush()
    assert [w["window_id"] for w in windows] == [
        f"rdma:n::0:PACKETS:10.0.0.1>10.0.0.2 qp 17:{T0}",
        f"rdma:n:mlx5_0:1:RDMA_STATISTIC:77:{T0}",
        f"rdma:n:mlx5_0:1:RDMA_STATISTIC:78:{T0}",
    ]
    packets, p77, p78 = windows
    assert (packets["flow"], packets["vendor"], packets["pid"]) == (
        "10.0.0.1>10.0.0.2 qp 17",
        "",
        None,
    )
    assert packets["metrics"]["lost"]["last"] == 1.5
    assert (p77["pid"], p77["process_name"], p78["pid"], p78["process_name"]) == (
        77,
        None,
        78,
        "ib",
    )


def test_two_counter_sets_of_one_process_on_one_port_are_two_windows() -> None:
    f = fold()
    for ts, a, b in ((T0, 100, 7), (T0 + S, 150, 9), (T0 + 2 * S, 170, 12)):
        for cntn, value in ((4, a), (5, b)):
            f.add_rdma(
                rdma(
                    ts,
                    {"rx_write_requests": value},
                    {},
                    source="RDMA_STATISTIC",
                    pid=77,
                    counter_id=cntn,
                )
            )
    first, second = f.flush()
    assert (first["window_id"], second["window_id"]) == (
        f"rdma:n:mlx5_0:1:RDMA_STATISTIC:77/cntn4:{T0}",
        f"rdma:n:mlx5_0:1:RDMA_STATISTIC:77/cntn5:{T0}",
    )
    assert (first["pid"], first["counter_id"], second["pid"], second["counter_id"]) == (
        77,
        4,
        77,
        5,
    )
    assert first["counters"] == {"rx_write_requests": {"first": 100, "last": 170, "increase": 70}}
    assert second["counters"] == {"rx_write_requests": {"first": 7, "last": 12, "increase": 5}}
    assert first["samples"] == second["samples"] == 3


def test_kernel_consumers_counter_sets_without_a_pid_are_apart_by_counter_id() -> None:
    f = fold()
    for ts, a, b in ((T0, 10, 1000), (T0 + S, 20, 1001)):
        for cntn, value in ((1, a), (2, b)):
            f.add_rdma(
                rdma(ts, {"tx_packets": value}, {}, source="RDMA_STATISTIC", counter_id=cntn)
            )
    windows = {w["counter_id"]: w for w in f.flush()}
    assert windows[1]["window_id"] == f"rdma:n:mlx5_0:1:RDMA_STATISTIC:/cntn1:{T0}"
    assert windows[1]["counters"]["tx_packets"]["increase"] == 10
    assert windows[2]["counters"]["tx_packets"]["increase"] == 1
    assert windows[1]["pid"] is windows[2]["pid"] is None


def test_rdma_vendor_and_flow_label() -> None:
    assert [rdma_vendor(d) for d in ("mlx5_0", "rxe0", "bnxt_re12", "hfi1_0", "")] == [
        "mlx5",
        "rxe",
        "bnxt_re",
        "hfi1",
        "",
    ]
    assert flow_label(None) == ""
    assert flow_label({"src_addr": "fe80::1", "dst_addr": "fe80::2", "dest_qp": 5}) == (
        "fe80::1>fe80::2 qp 5"
    )


def test_a_rate_that_is_not_finite_is_counted_not_kept() -> None:
    f = fold()
    f.add_rdma(rdma(T0, {"x": 1}, {"x": math.inf, "y": 2.0}))
    [w] = f.flush()
    assert set(w["metrics"]) == {"y"} and f.counters()["device_values_not_finite"] == 1


def test_held_keeps_the_first_offset_of_each_open_window() -> None:
    f = fold()
    gpu_topic, rdma_topic = (names.RAW_GPUMETRICS.name, 2), (names.RAW_RDMA.name, 0)
    f.holds.took((gpu_topic, 10))
    f.add_gpu(gpu(T0 + S))
    f.holds.took((gpu_topic, 11))
    f.add_gpu(gpu(T0 + 2 * S, device_index=1, device_uuid="GPU-B"))
    f.holds.took((rdma_topic, 5))
    f.add_rdma(rdma(T0, {"x": 1}, {}))
    f.holds.took((gpu_topic, 12))
    f.add_gpu(gpu(T0 + 3 * S))
    assert f.holds.held() == {gpu_topic: 10, rdma_topic: 5}
    f.holds.took((gpu_topic, 13))
    f.add_gpu(gpu(T0 + W))  # closes GPU 0's first window: GPU-B's holds now, then this one
    assert f.holds.held() == {gpu_topic: 11, rdma_topic: 5}
    f.holds.took(None)
    f.tick(T0 + W + 2 * S)  # GPU-B's and the port's
    assert f.holds.held() == {gpu_topic: 13}
    f.flush()
    assert f.holds.held() == {}


def test_bad_input_raises_before_changing_anything() -> None:
    f = fold()
    with pytest.raises(PoisonInput, match="before the epoch"):
        f.add_gpu(gpu(-5))
    with pytest.raises(PoisonInput, match="before the epoch"):
        f.add_rdma(rdma(-5, {}, {}))
    assert f.flush() == [] and f.counters()["device_gpu_samples"] == 0


def test_closed_marks_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("zerotrace_profiler_agg.device_windows.MAX_CLOSED_MARKS", 2)
    f = fold()
    for i in range(3):
        f.add_gpu(gpu(T0, device_index=i, device_uuid=f"GPU-{i}"))
    assert len(f.flush()) == 3
    assert f.counters()["device_marks_evicted"] == 1
    assert MAX_CLOSED_MARKS == 65_536


def test_windows_are_aligned_to_the_epoch() -> None:
    f = DeviceWindows(3 * S, 0)
    f.add_gpu(gpu(T0 + 7 * S + 5))
    [w] = f.flush()
    start = (T0 + 7 * S + 5) // (3 * S) * (3 * S)
    assert (w["window_start_ns"], w["window_end_ns"]) == (start, start + 3 * S)


def test_every_window_encodes_and_decodes_unchanged(codec: AvroCodec) -> None:
    f = fold()
    values = {d.field: (False if d.avro == "boolean" else 3) for d in DCGM_FIELDS}
    f.add_gpu(
        gpu(
            T0,
            **(values | {"power_w": 312.456}),
            xid_events=[{"xid": 79, "ts_ns": T0 - 5}],
            processes=[use(9, 1 << 30, 55.0)],
            unsupported=["memory_temp_c"],
            health="OK",
        )
    )
    f.add_gpu(gpu(T0 + S, health="Alarm"))
    f.add_rdma(
        rdma(
            T0,
            {"port_rcv_data": 4},
            {"port_rcv_data": 0.25},
            source="RDMA_STATISTIC",
            pid=3,
            counter_id=9,
        )
    )
    windows = f.flush()
    assert len(windows) == 2
    assert (windows[0]["health"], windows[0]["health_worst"]) == ("Alarm", "Alarm")
    record = names.DERIVED_DEVICE.record
    for w in windows:
        assert codec.decode(codec.encode(record, w)) == (record, w)


def test_constructor_refuses_a_window_of_no_width() -> None:
    with pytest.raises(ValueError, match="positive width"):
        DeviceWindows(0, 0)
