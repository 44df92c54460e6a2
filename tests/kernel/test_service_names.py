"""Service names through the real collector: `zerotrace run -- RUNNER`, where RUNNER starts
`python3 -m http.server PORT` and makes a known number of GET requests to it. Every server
span is named by the module the server runs (not by its comm, `python3`), and with
ZEROTRACE_SERVICE_NAMES by the mapped name; the client's spans keep their own name."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.ebpf_required import require_ebpf
from tests.harness.services import REPO
from tests.harness.sql_servers import free_port
from zerotrace import names
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

require_ebpf()

REQUESTS = 7

# The client: starts the server, waits for its port (polled), makes REQUESTS GETs, and keeps
# the server running until zerotrace's API shows their server spans: a process is named when
# the collector reads its first events, and one already gone by then keeps its comm.
RUNNER = textwrap.dedent(
    """
    import json, socket, subprocess, sys, time, urllib.request
    port, n, api = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port),
                               "--bind", "127.0.0.1"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        for _ in range(n):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as response:
                response.read()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:  # the API comes up once the command runs
                with urllib.request.urlopen(f"{api}/api/v1/spans?kind=http.server") as r:
                    if len(json.load(r)["spans"]) >= n:
                        break
            except OSError:
                pass
            time.sleep(0.1)
    finally:
        server.terminate()
        server.wait()
    """
)


def spans_of_run(folder: Path, env: dict[str, str]) -> tuple[list[dict[str, Any]], int]:
    folder.mkdir(parents=True, exist_ok=True)
    store_file, port, api_port = folder / "zt.duckdb", free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--no-tls", "--quiet"),
            *("--port", str(port), "--store", str(store_file)),
            *("--http-port", str(api_port), "--grpc-port", str(free_port())),
            *("--", sys.executable, "-c", RUNNER, str(port), str(REQUESTS), api),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "ZEROTRACE_HOME": str(folder / "home"), **env},
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    store = DuckDBStore(str(store_file))
    try:
        spans = store.search(names.INDEX_SPANS, Query(limit=10_000))
    finally:
        store.close()
    http = [
        s for s in spans if s["kind"] in (names.SPAN_KIND_HTTP_SERVER, names.SPAN_KIND_HTTP_CLIENT)
    ]
    kinds = [s["kind"] for s in http]
    if kinds.count(names.SPAN_KIND_HTTP_CLIENT) != kinds.count(names.SPAN_KIND_HTTP_SERVER):
        # Shown when an assertion below fails: what zerotrace counted.
        print(f"zerotrace run said:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return http, port


def by_kind(spans: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["kind"] == kind]


def test_server_spans_are_named_by_the_module_the_server_runs(tmp_path: Path) -> None:
    spans, _ = spans_of_run(tmp_path, {"ZEROTRACE_SERVICE_NAMES": ""})
    server = by_kind(spans, names.SPAN_KIND_HTTP_SERVER)
    client = by_kind(spans, names.SPAN_KIND_HTTP_CLIENT)
    assert len(server) == len(client) == REQUESTS
    # Its comm is the interpreter's file name ("python3", or "python" in a virtualenv).
    assert {s["service"] for s in server} == {"http.server"}
    assert all(s["process_name"].startswith("python") for s in server)
    assert "http.server" not in {s["service"] for s in client}


def test_the_mapping_setting_renames_them(tmp_path: Path) -> None:
    spans, _ = spans_of_run(tmp_path, {"ZEROTRACE_SERVICE_NAMES": "nothing*=x, http.server=files"})
    server = by_kind(spans, names.SPAN_KIND_HTTP_SERVER)
    client = by_kind(spans, names.SPAN_KIND_HTTP_CLIENT)
    assert len(server) == len(client) == REQUESTS
    assert {s["service"] for s in server} == {"files"}
    assert "files" not in {s["service"] for s in client}
