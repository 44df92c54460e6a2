"""RDMA counters and a CLI-read GPU through the embedded path: `zerotrace run --rdma
--gpu-metrics --gpu-vendor amd`, the port counters read from a recorded sysfs tree (the hidden
--rdma-sysfs) that the test moves one second on mid-run, the GPU from a fake `amd-smi` on PATH
printing the recorded ROCm 6.4 outputs. The records on the in-process bus are read back from the
run's local raw log (what `zerotrace replay --local` reads): raw.rdma with the tree's exact
counters, and a rate that is exactly the counters' difference over its interval; raw.gpumetrics
with amd-smi's exact values. The one-line notes of both feeds are on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.llm_fixtures import free_port
from tests.ebpf_required import require_ebpf
from tests.unit.rdma_trees import write_tree
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.raw_log import RawLogPeriod
from zerotrace_cli.embedded_node import raw_log_folder

require_ebpf()  # `zerotrace run` always captures TCP (here only port 1: nothing)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
MIB = 1 << 20
AMD_SMI = """#!/bin/sh
case "$1" in
  static|list|metric|process) exec cat "{folder}/$1.json" ;;
esac
exit 2
"""


def test_zerotrace_run_logs_exact_rdma_counters_and_amd_smi_metrics(
    codec: AvroCodec, tmp_path: Path
) -> None:
    tree = tmp_path / "infiniband"
    write_tree(tree, 0)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    amd_smi = bin_dir / "amd-smi"
    amd_smi.write_text(AMD_SMI.format(folder=FIXTURES / "amd_smi" / "rocm-6.4"))
    amd_smi.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["ZEROTRACE_HOME"] = str(tmp_path)
    env["ZEROTRACE_NODE_ID"] = "rdma-node"
    command = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--no-tls"]
    command += ["--port", "1", "--rdma", "--rdma-interval", "0.25", "--rdma-sysfs", str(tree)]
    command += ["--gpu-metrics", "--gpu-vendor", "amd", "--gpu-interval", "0.5"]
    command += ["--duration", "4", "--quiet", "--store", str(tmp_path / "e.duckdb")]
    command += ["--http-port", str(free_port()), "--grpc-port", str(free_port())]
    run = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert run.stderr is not None
    err: list[str] = []
    for line in run.stderr:  # attached once the feeds have said what they found
        err.append(line)
        if "RDMA counters:" in line:
            break
    time.sleep(1.0)  # a few samples of second 0, then the tree moves one second on
    write_tree(tree, 1)
    try:
        out, rest = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
    stderr = "".join(err) + rest
    assert run.returncode == 0, stderr[-2000:]
    assert "zerotrace: RDMA counters: mlx5_0 port 1, rxe0 port 1, every 0.25 s\n" in stderr
    assert (
        f"zerotrace: GPU metrics: AMD GPUs through {amd_smi}: 2 x AMD Instinct MI300X\n" in stderr
    )
    logged = [
        codec.decode(m.value)[1]
        for m in RawLogPeriod(raw_log_folder(tmp_path), 0, 1 << 62).messages()
        if m.topic in (names.RAW_RDMA.name, names.RAW_GPUMETRICS.name)
    ]
    ports = [d for d in logged if d.get("source") == "SYSFS"]
    assert {d["node_id"] for d in ports} == {"rdma-node"}
    mlx5 = [d for d in ports if d["device"] == "mlx5_0"]
    assert mlx5[0]["counters"]["tx_bytes"] == 4_000_000_000  # port_xmit_data: 4-byte units
    assert mlx5[0]["rates"] == {}  # a port's first reading has no rate
    assert mlx5[-1]["counters"]["tx_bytes"] == 5_000_000_000
    [moved] = [d for d in mlx5 if d["rates"].get("tx_bytes", 0) > 0]  # once: when it moved
    assert moved["rates"]["tx_bytes"] * moved["interval_ns"] / 1e9 == pytest.approx(1e9)
    rxe = [d for d in ports if d["device"] == "rxe0"]
    assert (rxe[0]["counters"]["tx_packets"], rxe[-1]["counters"]["tx_packets"]) == (5_000, 5_600)
    gpus = [d for d in logged if "device_uuid" in d]
    d0 = next(d for d in gpus if d["device_index"] == 0)
    assert (d0["vendor"], d0["model"], d0["power_w"]) == ("amd", "AMD Instinct MI300X", 734.0)
    assert (d0["fb_used_bytes"], d0["health"]) == (4976 * MIB, None)
    assert "rdma: lost 0, shed 0, samples " in out  # the run's per-feed summary
    assert "gpu-metrics: lost 0, shed 0, samples " in out
