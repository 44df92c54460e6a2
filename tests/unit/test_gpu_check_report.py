"""The GPU device check's report (bench/gpu_check_report.py) from inline records."""

from __future__ import annotations

from typing import Any

from bench.gpu_check_report import Phase, build_report, cost_report, render_text
from zerotrace.gpu_fields import METRIC_FIELDS
from zerotrace_profiler_agg.device_windows import DeviceWindows

S = 1_000_000_000
GPM = ("sm_active_ratio", "sm_occupancy_ratio")


def datum(ts_ns: int, **values: Any) -> dict[str, Any]:
    d: dict[str, Any] = {name: None for name in METRIC_FIELDS}
    d.update(
        node_id="n", ts_ns=ts_ns, vendor="nvidia", device_index=0, device_uuid="GPU-0",
        model="NVIDIA H100", driver_version="580.1", unsupported=["memory_temp_c"], failed=[],
        warming_up=[], xid_events=[], processes=[], utilization_pct=-1.0,
        memory_used_bytes=-1, memory_total_bytes=-1,
    )  # fmt: skip
    d.update(values)
    return d


def proc(pid: int, memory: int, sm: float) -> dict[str, Any]:
    return {"pid": pid, "process_name": "python3", "used_memory_bytes": memory, "sm_util_pct": sm}


RECORDS = [
    datum(1 * S, gpu_util_pct=0.0, mig_mode=False, warming_up=list(GPM), xid_errors=0),
    datum(2 * S, gpu_util_pct=100.0, mig_mode=False, sm_active_ratio=0.5,
          sm_occupancy_ratio=0.25, processes=[proc(42, 1500, 90.0)], xid_errors=0),
    datum(3 * S, gpu_util_pct=100.0, mig_mode=False, sm_active_ratio=1.0,
          sm_occupancy_ratio=0.5, processes=[proc(42, 1600, 100.0)], xid_errors=0),
    datum(4 * S, gpu_util_pct=50.0, mig_mode=False, sm_active_ratio=0.75,
          sm_occupancy_ratio=0.25, processes=[proc(42, 1600, 100.0)], xid_errors=0),
]  # fmt: skip


def windows() -> list[dict[str, Any]]:
    fold = DeviceWindows(10 * S, 0)
    for d in RECORDS:
        fold.add_gpu(d)
    return fold.flush()


def test_device_fields_processes_and_phase() -> None:
    phase = Phase(
        "driver",
        ready={"pid": 42, "allocated_bytes": 1000, "ts_ns": 1 * S + 1},
        done={"ts_ns": 4 * S - 1},
    )
    skipped = Phase("torch", skipped="PyTorch is not installed for this Python")
    report = build_report(RECORDS, windows(), [phase, skipped], cost_report([10.0, 30.0], [20, 40]))
    [dev] = report["devices"]
    assert (dev["model"], dev["driver"], dev["gpm"], dev["mig_mode"]) == (
        "NVIDIA H100", "580.1", "yes", [False]
    )  # fmt: skip
    rows = {r["field"]: r for r in dev["fields"]}
    assert rows["gpu_util_pct"] == {
        "dcgm": "DCGM_FI_DEV_GPU_UTIL", "field": "gpu_util_pct", "min": 0.0, "max": 100.0,
        "samples": 4,
    }  # fmt: skip
    assert rows["memory_temp_c"] == {
        "dcgm": "DCGM_FI_DEV_MEMORY_TEMP", "field": "memory_temp_c", "unsupported": 4
    }  # fmt: skip
    assert rows["sm_active_ratio"]["warming_up"] == 1
    assert rows["mig_mode"]["values"] == [False]
    assert dev["processes"] == [
        {"pid": 42, "name": "python3", "samples": 3, "max_memory_bytes": 1600,
         "sm_util_pct": {"mean": 290 / 3, "min": 90.0, "max": 100.0, "samples": 3}}
    ]  # fmt: skip
    driver, torch = report["phases"]
    assert torch == {"engine": "torch", "skipped": "PyTorch is not installed for this Python"}
    [inside] = driver["devices"]
    # Samples at 2 s and 3 s are inside; GPM leaves out the first (it covers time before).
    assert (inside["samples"], inside["pid_samples"]) == (2, 2)
    assert (inside["max_memory_bytes"], inside["memory_over_allocated_bytes"]) == (1600, 600)
    assert inside["gpm"] == {
        "sm_active_ratio": {"mean": 1.0, "min": 1.0, "max": 1.0, "samples": 1},
        "sm_occupancy_ratio": {"mean": 0.5, "min": 0.5, "max": 0.5, "samples": 1},
    }
    assert report["fold"] == {
        "windows": 1, "samples_folded": 4, "records": 4, "disagreements": []
    }  # fmt: skip
    assert report["cost"]["cpu_us_per_gpu_sample"] == {
        "mean": 20.0, "min": 10.0, "max": 30.0, "samples": 2
    }  # fmt: skip
    assert report["findings"] == []
    text = render_text(report)
    assert "workload torch: skipped: PyTorch is not installed for this Python" in text
    assert text.endswith("FINDING: none: as expected\n")


def test_findings_name_xids_failed_reads_a_missing_pid_and_a_fold_mismatch() -> None:
    no_gpm = ["memory_temp_c", *GPM, *(n for n in METRIC_FIELDS if n.startswith("pipe_"))]
    no_gpm += ["gr_engine_active_ratio", "dram_active_ratio"]
    records = [
        datum(1 * S, xid_events=[{"xid": 79, "ts_ns": 5}], failed=["power_w"], unsupported=no_gpm),
        datum(2 * S, gpu_util_pct=2.0, unsupported=no_gpm),
    ]
    phase = Phase("driver", ready={"pid": 7, "allocated_bytes": 10, "ts_ns": 0})
    report = build_report(records, windows()[:0], [phase], cost_report([], []))
    assert report["cost"] == {"samples": 0}
    assert report["devices"][0]["gpm"] == "no"
    assert report["findings"] == [
        "GPU 0: XID 79 at 5",
        "GPU 0: reads failed: power_w",
        "driver workload (pid 7) did not finish",
        "driver workload pid 7 not in NVML's process lists",
        "GPU 0: 2 records, 0 folded",
    ]


def test_no_device() -> None:
    report = build_report([], [], [], {"samples": 0})
    assert report["findings"] == ["NVML gave no device"]
