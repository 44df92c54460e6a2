"""The vertical slice, embedded: `zerotrace run -- COMMAND` (one process, in-process bus,
DuckDB) sees the command's opens as spans, serves them over HTTP and gRPC, and keeps them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

from tests.ebpf_required import require_ebpf
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.grpc_api import list_spans

require_ebpf()

REPO = Path(__file__).resolve().parents[2]
CALLS = 23

WORKLOAD = textwrap.dedent(
    """
    import os, sys, time
    path, release, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for _ in range(n):
        os.close(os.open(path, os.O_RDONLY))
    while not os.path.exists(release):  # stay alive while the test asks the APIs
        time.sleep(0.05)
    """
)


def spans_for(url: str, target: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{url}/api/v1/spans?kind=file.open&limit=1000") as response:
        spans = json.load(response)["spans"]
    return [s for s in spans if s["attributes"].get("file.path") == target]


def test_run_observes_a_command_end_to_end(tmp_path: Path) -> None:
    target, release, store_file = tmp_path / "known", tmp_path / "release", tmp_path / "zt.duckdb"
    target.write_text("x")
    http_port, grpc_port = 18931, 18932
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zerotrace_cli",
            "run",
            "--store",
            str(store_file),
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            "--",
            sys.executable,
            "-c",
            WORKLOAD,
            str(target),
            str(release),
            str(CALLS),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "ZEROTRACE_HOME": str(tmp_path / "home")},
    )
    url = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.monotonic() + 60
        found: list[dict[str, object]] = []
        while time.monotonic() < deadline and len(found) < CALLS:
            time.sleep(0.3)
            assert run.poll() is None, run.communicate()
            try:
                found = spans_for(url, str(target))
            except OSError:
                continue  # the API is not up yet
        assert len(found) == CALLS
        via_grpc = [
            s
            for s in list_spans(f"127.0.0.1:{grpc_port}", kind="file.open", limit=1000)
            if s.attributes["file.path"] == str(target)
        ]
        assert sorted(s.span_id for s in via_grpc) == sorted(str(s["span_id"]) for s in found)
        assert len({s["pid"] for s in found}) == 1
    finally:
        release.write_text("done")
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert out.count(f"open {target} -> fd") == CALLS  # a line per derived record
    assert "summary:" in out

    store = DuckDBStore(str(store_file))  # the results outlive the run
    try:
        kept = [
            d
            for d in store.search("spans", Query(limit=10_000))
            if d["attributes"].get("file.path") == str(target)
        ]
    finally:
        store.close()
    assert len(kept) == CALLS
