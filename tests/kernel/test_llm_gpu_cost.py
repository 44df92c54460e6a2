"""Kernel test: GPU cost per LLM request from one real observation. A stand-in model server
(tests/harness/gpu_llm_server.py) on the stand-in CUDA runtime serves two overlapping
streaming requests of known token counts, launching kernels for every token, under
`zerotrace run --profile --gpu-metrics` with the stand-in NVML (tests/harness/nvml_standin)
reporting the server's pid at a scripted SM utilisation and used memory. The listing's
per-request GPU time, launches and memory are exactly llm_gpu_cost's definition applied to
the stored windows, the shares add up to what the windows held while the requests worked,
and that is the scripted utilisation times the windows' length.

The stand-in NVML reads its script once, when NVML opens (at the probes' attach), so the
server is started first, held (--wait), its pid scripted, then followed with --pid and let go.

Needs root, bcc, kernel headers (scripts/setup-ebpf.sh) and gcc.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.ebpf_required import require_ebpf

require_ebpf()

from tests.e2e.llm_fixtures import free_port  # noqa: E402
from tests.harness import gpu_llm_server  # noqa: E402
from tests.harness.fake_cuda.build import build_fake_cuda  # noqa: E402
from tests.harness.nvml_standin.build import SCRIPT_ENV, build_nvml_standin  # noqa: E402
from zerotrace import names  # noqa: E402
from zerotrace.store import Query  # noqa: E402
from zerotrace.store_duckdb import DuckDBStore  # noqa: E402
from zerotrace_query import llm_gpu_cost as cost  # noqa: E402
from zerotrace_query.documents import LLM_REQUESTS, PROFILES  # noqa: E402
from zerotrace_query.flame_graph import stack_items  # noqa: E402
from zerotrace_query.llm_search import LlmFilter, list_llm_requests  # noqa: E402

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "tests" / "harness" / "gpu_llm_server.py"
WINDOW_MS = 200  # several profile windows per request: the shares cross window edges
DEVICE_WINDOW_MS = 500  # and several device windows
GPU_INTERVAL_S = 0.1
SM_UTIL_PCT = 40  # what the stand-in NVML says the server's SM utilisation is
USED_BYTES = 3 << 30  # and the GPU memory it holds
OBSERVE_S = 6  # after zerotrace serves: the server's run (~2.5 s) with room to spare
MS = 1_000_000


def nvml_script(pid: int) -> str:
    return f"""\
driver 550.54.15
device 0
name NVIDIA H100 80GB HBM3
uuid GPU-5a1c0e2d-0000-4000-8000-0000000000c0
utilization {SM_UTIL_PCT} 10
process {pid} {USED_BYTES}
process_util {pid} {SM_UTIL_PCT} 10 0 0
"""


@dataclass
class Observed:
    store: DuckDBStore
    pid: int


def _wait_for_line(path: Path, text: str, zerotrace: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while text not in path.read_text():
        assert zerotrace.poll() is None, path.read_text()[-3000:]
        assert time.monotonic() < deadline, path.read_text()[-3000:]
        time.sleep(0.1)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    folder = tmp_path_factory.mktemp("llm_gpu_cost")
    libs = build_fake_cuda(folder / "cuda")
    nvml = build_nvml_standin(folder / "nvml")
    port, store_file = free_port(), folder / "zt.duckdb"
    server = subprocess.Popen(
        [sys.executable, str(SERVER), str(libs.runtime.parent), str(port), "--wait"],
        stdin=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert server.stdin is not None
    script = folder / "nvml-script.txt"
    script.write_text(nvml_script(server.pid))
    command = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--no-tls"]
    command += ["--profile", "--no-off-cpu", "--port", str(port), "--pid", str(server.pid)]
    command += ["--gpu-metrics", "--gpu-interval", str(GPU_INTERVAL_S)]
    command += ["--duration", str(OBSERVE_S), "--quiet", "--store", str(store_file)]
    command += ["--http-port", str(free_port()), "--grpc-port", str(free_port())]
    library_path = f"{nvml.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    said = folder / "zerotrace.stderr"
    with said.open("w") as err:
        zerotrace = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=REPO,
            env={
                **os.environ,
                "ZEROTRACE_HOME": str(folder / "home"),
                "ZEROTRACE_PROFILE_WINDOW_MS": str(WINDOW_MS),
                "ZEROTRACE_PROFILE_DEVICE_WINDOW_MS": str(DEVICE_WINDOW_MS),
                "LD_LIBRARY_PATH": library_path,
                SCRIPT_ENV: str(script),
            },
        )
    try:
        _wait_for_line(said, "web page", zerotrace)  # attached, following the pid, serving
        server.stdin.write("go\n")
        server.stdin.close()
        assert server.wait(timeout=60) == 0
        out, _ = zerotrace.communicate(timeout=120)
    finally:
        for proc in (server, zerotrace):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert zerotrace.returncode == 0, out[-3000:] + said.read_text()[-3000:]
    assert "GPU metrics: " in said.read_text() and "NVML" in said.read_text()
    store = DuckDBStore(str(store_file))
    yield Observed(store, server.pid)
    store.close()


def _device_intervals(store: DuckDBStore, pid: int) -> tuple[list[Any], list[Any]]:
    """(SM time, memory held) intervals of the pid from the stored GPU device windows."""
    windows = store.search(names.INDEX_DEVICES, Query(equals={"kind": "gpu"}, limit=10_000))
    time_, held = [], []
    for w in windows:
        start, end = int(w["window_start_ns"]), int(w["window_end_ns"])
        assert end - start == DEVICE_WINDOW_MS * MS
        [use] = [p for p in w["processes"] if int(p["pid"]) == pid]
        assert use["mean_sm_util_pct"] == SM_UTIL_PCT
        assert use["last_used_memory_bytes"] == USED_BYTES
        time_.append(cost.utilisation_interval(start, end, use["mean_sm_util_pct"]))
        held.append(cost.memory_interval(start, end, use["last_used_memory_bytes"]))
    return time_, held


def test_each_request_s_share_is_the_definition_applied_to_the_stored_windows(
    observed: Observed,
) -> None:
    store, pid = observed.store, observed.pid
    answer = list_llm_requests(store, LlmFilter(observation_point="SERVER"))
    served = sorted(answer["requests"], key=lambda r: int(r["start_ns"]))
    counts = [(r["input_tokens"], r["output_tokens"]) for r in served]
    assert counts == [*gpu_llm_server.REQUESTS], served
    a, b = served
    assert int(b["start_ns"]) < int(a["end_ns"])  # they overlap
    assert int(a["pid"]) == int(b["pid"]) == pid
    assert a["gpu_cost_method"] == (
        "tokens-processed/v1 time=nvml_sm_util launches=GPU_LAUNCH memory=nvml_used_memory"
    )
    assert not a.get("gpu_cost_partial") and not b.get("gpu_cost_partial")

    # The definition, applied here to what the store holds: every window of the pid, every
    # request it served.
    everyone = store.search(
        LLM_REQUESTS.name,
        Query(equals={"pid": pid, "observation_point": "SERVER"}, limit=10_000),
    )
    assert len(everyone) == 2
    work = [cost.work_of(d, str(d["_id"])) for d in everyone]
    got: dict[Any, dict[str, Any]] = {str(r["_id"]): r for r in served}

    launch_windows = store.search(
        PROFILES.name, Query(equals={"pid": pid, "profile_type": "GPU_LAUNCH"}, limit=10_000)
    )
    launch_intervals = [
        cost.Interval(
            int(w["window_start_ns"]),
            int(w["window_end_ns"]),
            Fraction(sum(n for _, n in stack_items(w))),
        )
        for w in launch_windows
    ]
    launches = sum(i.amount for i in launch_intervals)
    per_token = gpu_llm_server.LAUNCHES_PER_TOKEN
    assert launches == per_token * sum(t for _, t in gpu_llm_server.REQUESTS)
    time_intervals, held_intervals = _device_intervals(store, pid)

    measures = (
        ("gpu_launches", launch_intervals, float),
        ("gpu_time_ns", time_intervals, round),
        ("gpu_memory_byte_s", held_intervals, lambda s: float(cost.byte_seconds(s))),
    )
    for field, intervals, shown in measures:
        want = cost.apportion(intervals, work)
        for key, share in want.shares.items():
            assert share is not None, field
            assert got[key][field] == shown(share), field
        # What was drawn while a request worked went to the requests, and no more.
        assert want.attributed + want.unattributed == sum(i.amount for i in intervals)
        shares = [s for s in want.shares.values() if s is not None]
        assert sum(shares) == want.attributed, field
        print(f"{field}: shares {[shown(s) for s in shares]}, idle {shown(want.unattributed)}")

    # And that total is the scripted utilisation (memory) over the device windows in which a
    # request worked: SM % x window length, bytes x window length.
    busy = [
        i
        for i in time_intervals
        if any(cost.work_in(s, i.start_ns, i.end_ns) for r in work for s in r.segments)
    ]
    assert len(busy) >= 2  # the requests cross a device window's edge
    width = DEVICE_WINDOW_MS * MS
    time_total = cost.apportion(time_intervals, work).attributed
    assert time_total == Fraction(SM_UTIL_PCT, 100) * width * len(busy)
    assert abs(a["gpu_time_ns"] + b["gpu_time_ns"] - time_total) <= 1  # each rounded to the ns
    held_total = cost.byte_seconds(cost.apportion(held_intervals, work).attributed)
    assert held_total == Fraction(USED_BYTES * width * len(busy), cost.NS_PER_S)
    assert a["gpu_memory_byte_s"] + b["gpu_memory_byte_s"] == pytest.approx(float(held_total))
