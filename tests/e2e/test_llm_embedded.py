"""TTFT, TPOT and tokens from traffic, embedded: `zerotrace run -- CLIENTS` observes 200
requests at concurrency 16 against a real uvicorn server (streaming and not, with and without
usage, the official openai SDK and a plain socket client), over HTTP and over HTTPS (TLS
uprobes), and every request's figures agree with what the clients themselves measured."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.llm_fixtures import (
    REPO,
    REQUESTS,
    Server,
    free_port,
    load_command,
    read_truth,
    start_server,
)
from tests.ebpf_required import require_ebpf
from tests.harness.accuracy import compare, uncertain, worst_errors
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

require_ebpf()


@pytest.fixture(params=[False, True], ids=["http", "https"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path, tls=request.param)


def test_every_request_matches_the_clients_truth(server: Server, tmp_path: Path) -> None:
    store_file, truth_file = tmp_path / "zt.duckdb", tmp_path / "truth.json"
    # zerotrace itself runs at a lower priority than the clients (they raise theirs): it
    # reads kernel timestamps, so being late costs it nothing, while a client that waits for
    # a CPU would stamp its truth late.
    run = subprocess.run(
        [
            "nice",
            "-n",
            "5",
            sys.executable,
            "-m",
            "zerotrace_cli",
            "run",
            "--no-files",
            "--quiet",
            "--store",
            str(store_file),
            "--http-port",
            str(free_port()),
            "--grpc-port",
            str(free_port()),
            "--",
            *load_command(server, truth_file),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    truths = read_truth(truth_file)
    store = DuckDBStore(str(store_file))
    try:
        records = store.search("llm", Query(limit=10_000))
    finally:
        store.close()
    measured = [r for r in records if str(r["model"]).startswith("model-")]
    problems = compare(truths, records, "CLIENT")
    print(
        f"\n{server.url}: worst |error| {worst_errors(truths, records)}, "
        f"{len(uncertain(truths))} requests whose client was descheduled while sending"
    )
    summary = run.stdout[run.stdout.find("summary:") :][:600]
    assert problems == [], "\n".join(problems[:20]) + "\n" + summary
    assert len(measured) == REQUESTS
    kinds = {r["endpoint"] for r in measured}
    assert kinds == {"chat.completions", "completions", "responses"}
    assert {r["stream"] for r in measured} == {True, False}
    assert any(r["output_tokens_estimated"] for r in measured)  # streams without usage
    assert any(not r["output_tokens_estimated"] for r in measured)
