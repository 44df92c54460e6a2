"""LLM requests seen at client and server count once (issue 12), on real traffic through the
real collector: a client process sends 20 streamed chat completions to an OpenAI-compatible
server it started (tests/harness/llm_both_ends.py), all under one `zerotrace run --port P`,
so zerotrace writes each request twice, from the client's traffic (CLIENT) and from the
server's (SERVER), and trace assembly links the two spans (tcp_sequence). Read back from the
DuckDB store the run wrote, through the query service's LLM functions: each request once by
default, with the client's view on it; 20 per observation point; 40 records in all."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.ebpf_required import require_ebpf
from tests.harness.span_paths import embedded_run
from tests.harness.sql_servers import free_port
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.llm_search import LlmFilter, list_llm_requests, llm_percentiles

require_ebpf()
REQUESTS = 20
MODEL = "both-ends-model"


def test_requests_seen_at_client_and_server_count_once(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "tests.harness.llm_both_ends", str(port), str(REQUESTS)]
    store_file = embedded_run([*command, MODEL], [port], tmp_path)
    store = DuckDBStore(str(store_file))
    try:
        once = list_llm_requests(store, LlmFilter(model=MODEL))
        per_point = {
            point: list_llm_requests(store, LlmFilter(model=MODEL, observation_point=point))
            for point in ("CLIENT", "SERVER", "all")
        }
        stats = llm_percentiles(store, LlmFilter(model=MODEL, limit=1000))
    finally:
        store.close()

    assert {p: b["count"] for p, b in per_point.items()} == {
        "CLIENT": REQUESTS,
        "SERVER": REQUESTS,
        "all": 2 * REQUESTS,
    }
    assert (once["count"], once["total"], once["seen_at_both"]) == (REQUESTS, REQUESTS, REQUESTS)
    assert once["pairing_complete"] is True and not once["truncated"]
    clients = {r["span_id"]: r for r in per_point["CLIENT"]["requests"]}
    server_pids = {r["pid"] for r in per_point["SERVER"]["requests"]}
    assert len(server_pids) == 1 and server_pids.isdisjoint(r["pid"] for r in clients.values())
    for request in once["requests"]:
        assert request["observation_point"] == "SERVER"
        [seen] = request["also_seen_at"]
        client = clients[seen["span_id"]]
        assert seen["observation_point"] == "CLIENT" and seen["ttft_ns"] == client["ttft_ns"]
        gap = request["client_gap_ns"]
        # One host, one clock: the client writes the request before the server reads it, and
        # reads the last bytes after the server wrote them.
        assert gap["start"] == request["start_ns"] - client["start_ns"] >= 0
        assert gap["end"] == client["end_ns"] - request["end_ns"] >= 0
        assert gap["ttft"] == client["ttft_ns"] - request["ttft_ns"]
    assert {c["span_id"] for c in clients.values()} == {
        r["also_seen_at"][0]["span_id"] for r in once["requests"]
    }
    gaps = {
        k: sorted(r["client_gap_ns"][k] for r in once["requests"]) for k in ("start", "ttft", "end")
    }
    print(
        f"\nboth ends: {REQUESTS} requests once; client gap medians (us):",
        {k: v[len(v) // 2] / 1000 for k, v in gaps.items()},
    )
    assert stats["count"] == REQUESTS and stats["seen_at_both"] == REQUESTS
    [series] = stats["series"]
    assert series["count"] == REQUESTS and series["service"] == once["requests"][0]["service"]
