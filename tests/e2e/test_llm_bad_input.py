"""Bad input does not break the pipeline: one `zerotrace run -- CLIENT` observes a client that
sends garbage, a truncated request, a stream cut mid-way, a stream that fails mid-way, a 500,
a line protocol on port 80 and a 50 MiB response (tests/harness/bad_clients.py), then one good
streamed request. zerotrace exits cleanly with bounded memory, reports each bad exchange with
what it knew and why it is incomplete, and still measures the good request right."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.llm_fixtures import REPO, Server, free_port, start_server
from tests.ebpf_required import require_ebpf
from tests.harness import bad_clients as bad
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

require_ebpf()

LINE_PORT = 80  # a well-known HTTP port carrying something else (root may bind it)
# zerotrace's own peak resident memory over the whole run (the bcc compile at the start is
# most of it), and how much its heap (RssAnon) may grow while the 50 MiB body goes through.
# What is in flight is bounded by what one poll takes from the socket ring (POLL_BYTES, 4 MiB):
# its samples, then their Avro records on the in-process bus until the correlator takes them,
# plus allocator slack: 33-36 MiB measured at the default budget (2026-12-03, 3 runs; that
# is 8 times a poll, the next thing to cut). Holding the body itself (50 MiB) would show as
# more. File-backed pages are not counted: the socket ring's mapping becomes resident as the
# reader first walks each page, and library code as it first runs, fixed costs that came, or
# not, inside this window (the whole VmRSS grew 48.5 MiB in the run whose heap grew 36, and
# had grown 40-49 MiB in the CI runs that measured VmRSS).
MAX_RSS_BYTES = 400 * 1024 * 1024
MAX_RSS_GROWTH_BYTES = 48 * 1024 * 1024
RSS_EVERY_S = 0.02
RUN_TIMEOUT_S = 90


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path, tls=False)


@pytest.fixture
def bad_servers() -> Iterator[dict[str, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.bad_clients", "serve", "--line-port",
         str(LINE_PORT)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"the bad servers did not start (exit {proc.wait(timeout=5)})"
        yield json.loads(line)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


@dataclass
class Observed:
    code: int
    out: str
    err: str
    # bytes: the zerotrace process's own VmHWM, from its --summary-json. Not wait4's
    # ru_maxrss: that is the largest of the process and every descendant it reaped (the
    # observed command among them), and once read 549 MiB where zerotrace's own was 268.
    peak_rss: int
    rss: list[tuple[float, int]]  # (CLOCK_MONOTONIC, RssAnon bytes) sampled while it ran


def rss_anon(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^RssAnon:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def run_observed(command: list[str], tmp_path: Path) -> Observed:
    """Runs `zerotrace run -- command`, sampling its resident memory until it exits."""
    out, err = tmp_path / "zt.out", tmp_path / "zt.err"
    summary = tmp_path / "summary.json"
    with out.open("w") as stdout, err.open("w") as stderr:
        run = subprocess.Popen(
            [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--quiet",
             "--store", str(tmp_path / "zt.duckdb"), "--http-port", str(free_port()),
             "--grpc-port", str(free_port()), "--summary-json", str(summary),
             "--", *command],
            cwd=REPO, stdout=stdout, stderr=stderr,
        )  # fmt: skip
    deadline = time.monotonic() + RUN_TIMEOUT_S
    rss: list[tuple[float, int]] = []
    while True:
        pid, status, _ = os.wait4(run.pid, os.WNOHANG)
        if pid:
            break
        if (sample := rss_anon(run.pid)) is not None:
            rss.append((time.monotonic(), sample))
        if time.monotonic() > deadline:
            run.kill()
            run.wait()
            pytest.fail(f"zerotrace run took over {RUN_TIMEOUT_S} s:\n{err.read_text()[-3000:]}")
        time.sleep(RSS_EVERY_S)
    run.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    peak = json.loads(summary.read_text())["self"]["peak_rss_bytes"] if summary.exists() else -1
    return Observed(run.returncode, out.read_text(), err.read_text(), peak, rss)


def stored(store_file: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    store = DuckDBStore(str(store_file))
    try:
        return store.search("llm", Query(limit=10_000)), store.search("spans", Query(limit=10_000))
    finally:
        store.close()


def test_bad_input_is_reported_and_the_pipeline_goes_on(
    server: Server, bad_servers: dict[str, int], tmp_path: Path
) -> None:
    facts_file = tmp_path / "facts.json"
    run = run_observed(
        [sys.executable, "-m", "tests.harness.bad_clients", "client", "--llm-port",
         str(server.port), "--servers", json.dumps(bad_servers), "--out", str(facts_file)],
        tmp_path,
    )  # fmt: skip
    summary = run.out[run.out.find("summary:") :][:1500]
    facts = json.loads(facts_file.read_text())
    big_facts = facts[bad.BIG]
    before = [rss for t, rss in run.rss if t < big_facts["started"]]
    during = [rss for t, rss in run.rss if t >= big_facts["started"]]
    growth = max(during, default=0) - (before[-1] if before else 0)
    print(
        f"\nzerotrace peak RSS {run.peak_rss / 2**20:.0f} MiB; heap growth during and after "
        f"the 50 MiB response {growth / 2**20:.1f} MiB ({len(during)} samples)\n{summary}"
    )
    assert run.code == 0, run.err[-3000:]
    assert "Traceback" not in run.err, run.err[-3000:]
    assert re.search(r"\b0 dead letters\b", run.out), summary

    # The peers misbehaved as planned (the client's own view).
    assert facts["garbage"] == {"llm_answer": "HTTP/1.1 400", "echoed": True}
    assert facts[bad.CUT_STREAM] == {"status": 200, "content": bad.CUT_AFTER, "complete": False}
    assert facts[bad.ERROR_MIDSTREAM]["content"] == bad.ERROR_AFTER
    assert facts[bad.HTTP_500]["status"] == 500
    assert all(facts["line"]["answer_bytes"])
    assert big_facts["received"] > bad.BIG_BYTES
    assert facts[bad.GOOD]["usage_tokens"] == facts[bad.GOOD]["content"] == bad.GOOD_TOKENS

    records, spans = stored(tmp_path / "zt.duckdb")
    llm = [r for r in records if r["observation_point"] == "CLIENT"]
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in llm:
        by_model.setdefault(str(r["model"]), []).append(r)
    described = {m: [(r["path"], r["status_code"], r["error"]) for r in rs]
                 for m, rs in by_model.items()}  # fmt: skip
    expected = {bad.CUT_STREAM, bad.ERROR_MIDSTREAM, bad.HTTP_500, bad.BIG, bad.GOOD}
    # The 50 MiB response may outrun the reader: then its connection is shed (counted, the
    # exchange dropped whole, see below), and it has no record.
    socket_line = re.search(r"socket: lost (\d+), shed (\d+)", summary)
    assert socket_line, summary
    lost, shed = int(socket_line[1]), int(socket_line[2])
    if shed:
        expected.discard(bad.BIG)
    assert expected <= by_model.keys(), described
    # Garbage, the echo and the line protocol are not LLM traffic: no record from them.
    assert by_model.keys() <= {*expected, "unknown"}, described
    assert all(len(by_model[m]) == 1 for m in expected), described

    good = by_model[bad.GOOD][0]
    assert good["error"] is None, good
    assert good["output_tokens"] == bad.GOOD_TOKENS and not good["output_tokens_estimated"]
    assert good["content_events"] == bad.GOOD_TOKENS
    assert good["finish_reason"] == "length" and good["ttft_ns"] is not None

    cut = by_model[bad.CUT_STREAM][0]
    assert cut["stream"] and cut["status_code"] == 200
    assert cut["content_events"] == bad.CUT_AFTER, cut
    assert cut["output_tokens"] == bad.CUT_AFTER and cut["output_tokens_estimated"], cut
    assert cut["error"] and "stream aborted" in cut["error"], cut

    failed = by_model[bad.ERROR_MIDSTREAM][0]
    assert failed["content_events"] == bad.ERROR_AFTER, failed
    assert failed["error"] and bad.ERROR_MESSAGE in failed["error"], failed

    http_500 = by_model[bad.HTTP_500][0]
    assert http_500["status_code"] == 500 and str(http_500["error"]).startswith("http 500")

    # The truncated request: its body never came, so neither did its model; it is reported
    # with the reason, under its own path.
    truncated = [r for r in llm if r["path"] == bad.TRUNCATED_PATH]
    assert len(truncated) == 1, described
    assert truncated[0]["model"] == "unknown" and truncated[0]["status_code"] is None
    assert truncated[0]["error"], truncated[0]

    # 50 MiB went through without zerotrace holding it. The client reads it faster than the
    # collector drains the ring buffer: past three quarters of the ring the connection is
    # shed (counted; the correlator drops the exchange whole, never reports half of it);
    # otherwise it was followed to its last byte, or (events lost: counted) reported
    # incomplete.
    if bad.BIG in by_model:
        big = by_model[bad.BIG][0]
        assert big["status_code"] == 200, big
        big_span = next(s for s in spans if s["span_id"] == big["span_id"])
        if big["error"] is None:
            assert big_span["attributes"]["http.response.body.size"] == str(bad.BIG_BYTES)
        else:
            assert lost and str(big["error"]).startswith("response incomplete"), (big, summary)
        print(f"50 MiB response: {big['error'] or 'complete'}; {lost} events lost")
    else:
        assert re.search(r"http\.exchanges\.shed [1-9]", summary), summary
        print(f"50 MiB response: its connection shed ({shed} connections shed, {lost} lost)")
    assert 0 < run.peak_rss < MAX_RSS_BYTES, f"peak RSS {run.peak_rss / 2**20:.0f} MiB"
    assert during, "no memory sample was taken during the 50 MiB response"
    assert growth < MAX_RSS_GROWTH_BYTES, (
        f"zerotrace's heap grew {growth / 2**20:.1f} MiB while the 50 MiB response went through"
    )
    # The correlator's counters, where the summary reports them: the body over the JSON limit
    # (openai_stream.MAX_JSON_BODY_BYTES) was counted, not kept; garbage and the line
    # protocol were judged not HTTP; the cut and truncated exchanges counted as aborted.
    if re.search(r"http\.(limit|conns|exchanges)\.", summary):
        for counter in ("http.limit.json_body_bytes", "http.conns.not_http",
                        "http.exchanges.aborted"):  # fmt: skip
            assert re.search(rf"{re.escape(counter)} [1-9]", summary), (counter, summary)
