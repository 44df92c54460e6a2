"""Kernel test: GPU cost per LLM request from one real observation. A stand-in model server
(tests/harness/gpu_llm_server.py) on the stand-in CUDA runtime serves two overlapping
streaming requests of known token counts, launching kernels for every token, under
`zerotrace run --profile`; the listing's per-request GPU cost is exactly llm_gpu_cost's
definition applied to the stored windows, and the shares add up to what the windows held.

Needs root, bcc, kernel headers (scripts/setup-ebpf.sh) and gcc.
"""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.ebpf_required import require_ebpf

require_ebpf()

from tests.e2e.llm_fixtures import free_port  # noqa: E402
from tests.harness import gpu_llm_server  # noqa: E402
from tests.harness.fake_cuda.build import build_fake_cuda  # noqa: E402
from zerotrace.store import Query  # noqa: E402
from zerotrace.store_duckdb import DuckDBStore  # noqa: E402
from zerotrace_query import llm_gpu_cost as cost  # noqa: E402
from zerotrace_query.documents import LLM_REQUESTS, PROFILES  # noqa: E402
from zerotrace_query.flame_graph import stack_items  # noqa: E402
from zerotrace_query.llm_search import LlmFilter, list_llm_requests  # noqa: E402

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "tests" / "harness" / "gpu_llm_server.py"
WINDOW_MS = 200  # several windows per request: the shares cross window edges


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("llm_gpu_cost")
    libs = build_fake_cuda(folder / "cuda")
    port, store_file = free_port(), folder / "zt.duckdb"
    command = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--no-tls"]
    command += ["--profile", "--no-off-cpu", "--port", str(port), "--quiet"]
    command += ["--store", str(store_file), "--http-port", str(free_port())]
    command += ["--grpc-port", str(free_port()), "--", sys.executable, str(SERVER)]
    command += [str(libs.runtime.parent), str(port)]
    run = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={
            **os.environ,
            "ZEROTRACE_HOME": str(folder / "home"),
            "ZEROTRACE_PROFILE_WINDOW_MS": str(WINDOW_MS),
        },
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    store = DuckDBStore(str(store_file))
    yield store
    store.close()


def test_each_request_s_share_is_the_definition_applied_to_the_stored_windows(
    observed: DuckDBStore,
) -> None:
    answer = list_llm_requests(observed, LlmFilter(observation_point="SERVER"))
    served = sorted(answer["requests"], key=lambda r: int(r["start_ns"]))
    counts = [(r["input_tokens"], r["output_tokens"]) for r in served]
    assert counts == [*gpu_llm_server.REQUESTS], served
    a, b = served
    assert int(b["start_ns"]) < int(a["end_ns"])  # they overlap
    pid = int(a["pid"])
    assert int(b["pid"]) == pid

    # The definition, applied here to what the store holds: every launch window of the pid,
    # every request it served.
    windows = observed.search(
        PROFILES.name, Query(equals={"pid": pid, "profile_type": "GPU_LAUNCH"}, limit=10_000)
    )
    everyone = observed.search(
        LLM_REQUESTS.name,
        Query(equals={"pid": pid, "observation_point": "SERVER"}, limit=10_000),
    )
    assert len(everyone) == 2
    intervals = [
        cost.Interval(
            int(w["window_start_ns"]),
            int(w["window_end_ns"]),
            Fraction(sum(n for _, n in stack_items(w))),
        )
        for w in windows
    ]
    launches = sum(i.amount for i in intervals)
    per_token = gpu_llm_server.LAUNCHES_PER_TOKEN
    assert launches == per_token * sum(t for _, t in gpu_llm_server.REQUESTS)
    work = [cost.work_of(d, str(d["_id"])) for d in everyone]
    want = cost.apportion(intervals, work)
    got: dict[Any, dict[str, Any]] = {str(r["_id"]): r for r in served}
    for key, share in want.shares.items():
        assert share is not None
        assert got[key]["gpu_launches"] == float(share)
    assert "launches=GPU_LAUNCH" in str(a["gpu_cost_method"])
    # Nothing measures kernel time with the stand-in runtime (no GPU_TIME, no NVML): unknown.
    assert a["gpu_time_ns"] is None and b["gpu_time_ns"] is None
    # Every launch made while a request was in flight went to the requests, and no more.
    assert want.attributed + want.unattributed == launches
    shares = [s for s in want.shares.values() if s is not None]
    assert sum(shares) == want.attributed
    print(f"launches {launches}: shares {[float(s) for s in shares]}, idle {want.unattributed}")
