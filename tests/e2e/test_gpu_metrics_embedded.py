"""GPU device metrics through the embedded path: `zerotrace run --gpu-metrics` with the NVML
stand-in (tests/harness/nvml_standin) as libnvidia-ml.so.1, found through LD_LIBRARY_PATH. The
records on the in-process bus are read back from the run's local raw log (what `zerotrace
replay --local` reads): the exact values of the scripted devices, the NOT_SUPPORTED gap, and
the scripted XID logged within a second of when it was due. Then the store: profiler-agg's
device windows in the run's DuckDB `devices` index, with the same exact values, every sample in
one, the XID once and the NOT_SUPPORTED gap marked. GPM on the H100 (DCGM's profiling fields):
warming up in its first sample, exact ratios after; none on the A10. The distributed path is
tests/integration/test_nvml_standin.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.llm_fixtures import free_port
from tests.ebpf_required import require_ebpf
from tests.harness.nvml_standin.build import LOG_ENV
from tests.integration.test_nvml_standin import (
    H100_METRICS,
    INTERVAL_S,
    RUN_S,
    check_device_windows,
    check_gpm_records,
    due_ns_of_the_xid,
    gpm_samples_logged,
    standin_env,
)
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.raw_log import RawLogPeriod
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_cli.embedded_node import raw_log_folder

require_ebpf()  # `zerotrace run` always captures TCP (here only port 1: nothing)

ROOT = Path(__file__).resolve().parents[2]


def test_zerotrace_run_logs_exact_gpu_metrics_and_the_xid(codec: AvroCodec, tmp_path: Path) -> None:
    env = standin_env(tmp_path)
    env["ZEROTRACE_HOME"] = str(tmp_path)
    env["ZEROTRACE_NODE_ID"] = "gpu-node"
    command = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--no-tls"]
    command += ["--port", "1", "--gpu-metrics", "--gpu-interval", str(INTERVAL_S)]
    command += ["--duration", str(RUN_S), "--quiet", "--store", str(tmp_path / "e.duckdb")]
    command += ["--http-port", str(free_port()), "--grpc-port", str(free_port())]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    logged = [
        (m.timestamp_ms, codec.decode(m.value)[1])
        for m in RawLogPeriod(raw_log_folder(tmp_path), 0, 1 << 62).messages()
        if m.topic == names.RAW_GPUMETRICS.name
    ]
    assert all(d["node_id"] == "gpu-node" for _t, d in logged)
    first = next(d for _t, d in logged if d["device_index"] == 0 and d["trigger"] == "interval")
    assert {k: first[k] for k in H100_METRICS} == H100_METRICS
    a10 = [d for _t, d in logged if d["device_index"] == 1]
    assert a10 and all(
        d["memory_temp_c"] is None and "memory_temp_c" in d["unsupported"] for d in a10
    )
    check_gpm_records([d for _t, d in logged if d["device_index"] == 0], a10)
    assert gpm_samples_logged(Path(env[LOG_ENV]).read_text()) == ["gpm_samples allocated 2 freed 2"]
    [(logged_ms, xid)] = [(t, d) for t, d in logged if d["trigger"] == "xid"]
    assert xid["xid_events"][0]["xid"] == 79 and xid["xid_errors"] == 79
    due_ns = due_ns_of_the_xid(Path(env[LOG_ENV]).read_text())
    assert 0 <= logged_ms - due_ns // 1_000_000 < 1000
    assert "gpu-metrics: lost 0, shed 0, samples" in done.stdout

    store = DuckDBStore(str(tmp_path / "e.duckdb"))
    try:
        docs = store.search(names.INDEX_DEVICES, Query(limit=1000))
    finally:
        store.close()
    windows = [{k: v for k, v in d.items() if k != "_id"} for d in docs]
    for index in (0, 1):  # every logged sample in a window of its device
        folded = sum(w["samples"] for w in windows if w["device_index"] == index)
        assert folded == len([d for _t, d in logged if d["device_index"] == index])
    check_device_windows(windows, "gpu-node", due_ns)
