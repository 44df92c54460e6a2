"""The GPU device check (bench/gpu_device_check.py) against the NVML stand-in
(tests/harness/nvml_standin, the scripted H100 and A10 of tests/integration/test_nvml_standin.py)
as libnvidia-ml.so.1: its report names the scripted devices and values, the A10's gaps, the
scripted XID, the scripted process, and says why the workload did not run (no libcuda here).
No eBPF: part 4 (`zerotrace run --profile`) is left out by its flag."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.integration.test_nvml_standin import H100_METRICS, standin_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_check_reports_the_scripted_devices(tmp_path: Path) -> None:
    env = standin_env(tmp_path)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bench.gpu_device_check", "--out", str(out)]
    command += ["--idle-s", "1", "--phase-s", "1", "--interval", "0.25", "--engines", "driver"]
    command += ["--no-zerotrace-run", "--limit-s", "60"]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "records.jsonl", "report.json", "report.txt", "windows.json", "workloads.log"
    ]  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.txt").read_text() == done.stdout
    h100, a10 = report["devices"]
    assert (h100["model"], h100["driver"], h100["gpm"], h100["mig_mode"]) == (
        H100_METRICS["model"], "550.54.15", "yes", [False]
    )  # fmt: skip
    assert (a10["model"], a10["gpm"], a10["mig_mode"]) == ("NVIDIA A10", "no", "unsupported")
    fields = {row["field"]: row for row in h100["fields"]}
    n = h100["samples"]
    assert fields["gpu_util_pct"] == {
        "dcgm": "DCGM_FI_DEV_GPU_UTIL", "field": "gpu_util_pct", "min": 37.0, "max": 37.0,
        "samples": n,
    }  # fmt: skip
    assert fields["fb_used_bytes"]["min"] == fields["fb_used_bytes"]["max"] == 5362475008
    assert (
        fields["sm_active_ratio"]["min"] == 0.625 and fields["sm_active_ratio"]["warming_up"] == 1
    )
    a10_fields = {row["field"]: row for row in a10["fields"]}
    assert a10_fields["power_w"] == {
        "dcgm": "DCGM_FI_DEV_POWER_USAGE", "field": "power_w", "failed": a10["samples"]
    }  # fmt: skip
    assert a10_fields["memory_temp_c"]["unsupported"] == a10["samples"]
    assert [e["xid"] for e in h100["xid_events"]] == [79] and h100["last_xid_errors"] == 79
    [process] = h100["processes"]
    assert (process["pid"], process["max_memory_bytes"]) == (os.getpid(), 1 << 30)
    assert process["sm_util_pct"]["mean"] == 55.0 and process["samples"] == n
    [phase] = report["phases"]
    if ctypes.util.find_library("cuda") is None:
        assert phase["skipped"].startswith("libcuda.so.1 not found")
        assert "workload driver: skipped: libcuda.so.1 not found" in done.stdout
    records = (out / "records.jsonl").read_text().splitlines()
    assert report["fold"] == {
        "windows": len(json.loads((out / "windows.json").read_text())),
        "samples_folded": len(records),
        "records": len(records),
        "disagreements": [],
    }
    assert report["cost"]["samples"] == len(records) == n + a10["samples"]
    assert report["findings"][0].startswith("GPU 0: XID 79 at ")
    assert report["findings"][1:] == ["GPU 1: reads failed: power_w"]
    assert any(s["what"].startswith("zerotrace run") for s in report["skipped"])
