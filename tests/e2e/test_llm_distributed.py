"""TTFT, TPOT and tokens from traffic, distributed: the collector publishes to the real Kafka,
the faust correlator derives LLM records, the query service indexes them into the real
OpenSearch and serves them; 200 requests at concurrency 16 agree with the clients' truth."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.llm_fixtures import REPO, REQUESTS, Server, free_port, load_command, start_server
from tests.ebpf_required import require_ebpf
from tests.harness.accuracy import compare, worst_errors
from tests.harness.services import Service

require_ebpf()


@pytest.fixture(params=[False, True], ids=["http", "https"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path, tls=request.param)


def llm_records(http_port: int, prefix: str, node_id: str) -> list[dict[str, Any]]:
    """This test's records (the servers keep earlier runs' too: they are told by node id)."""
    url = f"http://127.0.0.1:{http_port}/api/v1/llm/requests?limit=10000"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    key = "requests" if "requests" in body else "items"
    return [r for r in body[key] if str(r["model"]).startswith(prefix) and r["node_id"] == node_id]


def test_llm_metrics_through_kafka_faust_and_opensearch(
    server: Server, kafka_bootstrap: str, opensearch_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "ZEROTRACE_KAFKA": kafka_bootstrap,
        "ZEROTRACE_OPENSEARCH": opensearch_url,
        "ZEROTRACE_NODE_ID": f"e2e-llm-{uuid.uuid4().hex[:8]}",
        "ZEROTRACE_HOME": str(tmp_path),
    }
    http_port = free_port()
    correlator = Service("correlator", ["correlator"], env, tmp_path)
    query = Service(
        "query",
        ["query", "--http-port", str(http_port), "--grpc-port", str(free_port())],
        env,
        tmp_path,
    )
    go, truth_file = tmp_path / "go", tmp_path / "truth.json"
    load = subprocess.Popen(
        [*load_command(server, truth_file), "--wait-for", str(go)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    collector = Service(
        "collector", ["collector", "--no-files", "--pid", str(load.pid)], env, tmp_path
    )
    try:
        query.wait_for("query: indexing")
        collector.wait_for("collector attached")
        go.write_text("go")
        out, _ = load.communicate(timeout=300)
        assert load.returncode == 0, out
        truths = json.loads(truth_file.read_text())
        deadline = time.monotonic() + 120
        records: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            time.sleep(2)
            records = llm_records(http_port, "model-", env["ZEROTRACE_NODE_ID"])
            # Done when every request is there and none is still waiting for its close.
            if len(records) >= REQUESTS and not compare(truths, records, "CLIENT"):
                break
    finally:
        assert collector.stop() == 0, collector.log.read_text()[-2000:]
        correlator.stop()
        query.stop()
    problems = compare(truths, records, "CLIENT")
    print(f"\ndistributed {server.url}: worst |error| {worst_errors(truths, records)}")
    assert problems == [], "\n".join(problems[:20])
    assert len(records) == REQUESTS
