"""The device lines of `zerotrace run --gpu-metrics --rdma`'s summary (zerotrace_cli/
device_view.py), end to end: the GPUs from the NVML stand-in (tests/harness/nvml_standin, as
tests/e2e/test_gpu_metrics_embedded.py runs it), the RDMA ports from a recorded sysfs tree
(tests/unit/rdma_trees.py) that the test moves one second on mid-run, as
tests/e2e/test_rdma_embedded.py does. Each GPU line has the stand-in's exact values and its
one XID; each port line the error counters the tree moved by exactly their difference, and
the throughput of the port's latest window as stored."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.llm_fixtures import free_port
from tests.ebpf_required import require_ebpf
from tests.integration.test_nvml_standin import INTERVAL_S, standin_env
from tests.unit.rdma_trees import write_tree
from zerotrace import names
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_cli.device_view import throughput

require_ebpf()  # `zerotrace run` always captures TCP (here only port 1: nothing)

ROOT = Path(__file__).resolve().parents[2]

# The stand-in's script: H100 37 % busy, 5362475008 of 85899345920 bytes, 312456 mW, 41 C,
# XID 79 once; the A10's power read fails (a dash) and it has no XID events (no XID part).
H100_LINE = (
    "  gpu 0 NVIDIA H100 80GB HBM3: util 37%, memory 5.0/80.0 GiB, power 312.5 W, 41 C, XIDs 79x1"
)
A10_LINE = "  gpu 1 NVIDIA A10: util 3%, memory 3.9/22.5 GiB, power - W, 30 C"
# rdma_trees' second 0 -> 1: each error counter's difference; a step down (local_ack_timeouts
# 5 -> 1, a reset; rx_out_of_sequence's 32-bit wrap to 200) counts the new value, as the
# device windows count it.
MLX5_MOVED = (
    "cnp_handled +4, cnp_sent +50, local_ack_timeouts +1, rx_duplicate_requests +2, "
    "rx_ecn_marked_packets +60, rx_errors +2, rx_nak_seq_errors +3, rx_out_of_sequence +200"
)
RXE_LINE = (
    "  rdma rxe0 port 1: rx -, tx -; moved: requester_retries +3, rx_duplicate_requests +1, "
    "rx_nak_seq_errors +2, rx_out_of_sequence +3"
)


def test_the_run_summary_has_a_line_per_gpu_and_per_rdma_port(tmp_path: Path) -> None:
    tree = tmp_path / "infiniband"
    write_tree(tree, 0)
    env = standin_env(tmp_path)
    env["ZEROTRACE_HOME"] = str(tmp_path)
    env["ZEROTRACE_NODE_ID"] = "dev-node"
    store_path = tmp_path / "e.duckdb"
    command = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--no-tls"]
    command += ["--port", "1", "--gpu-metrics", "--gpu-interval", str(INTERVAL_S)]
    command += ["--rdma", "--rdma-interval", "0.25", "--rdma-sysfs", str(tree)]
    command += ["--duration", "4", "--quiet", "--store", str(store_path)]
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
    time.sleep(1.0)  # a few readings of second 0, then the tree moves one second on
    write_tree(tree, 1)
    try:
        out, rest = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, ("".join(err) + rest)[-2000:]

    store = DuckDBStore(str(store_path))
    try:
        docs = store.search(names.INDEX_DEVICES, Query(limit=1000))
    finally:
        store.close()
    mlx5 = max(
        (d for d in docs if d["source"] == "SYSFS" and d["device"] == "mlx5_0"),
        key=lambda d: d["window_start_ns"],
    )
    rx, tx = (throughput(mlx5["metrics"][n]["mean"]) for n in ("rx_bytes", "tx_bytes"))
    lines = out.splitlines()
    shown = [line for line in lines if line.startswith(("  gpu ", "  rdma "))]
    assert shown == [
        H100_LINE,
        A10_LINE,
        f"  rdma mlx5_0 port 1: rx {rx}, tx {tx}; moved: {MLX5_MOVED}",
        RXE_LINE,
    ], out
