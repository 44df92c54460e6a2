"""What observing an LLM server costs it: served requests/s and p99 TTFT, without and with
`zerotrace run --pid SERVER` attached (server-side observation, socket probe only).

The server is tests/harness/openai_server.py (uvicorn, paced streaming); the load and its
truth come from tests/harness/llm_load.py (the clients' own send and arrival times). Each round
measures both modes, and the order alternates between rounds, so a slow stretch of a noisy
machine does not land on one mode only. Throughput is measured requests over the span from
the first send to the last arrival (the clients' start-up and warm-up requests are outside it);
TTFT is the streamed requests' (send to first content event, as the client saw it). The
figures are the means over rounds of each mode.

Targets: under 5 % throughput loss and under 1 ms added p99 TTFT. Also checks that zerotrace
produced one LLM record per measured request.

Run (root, for eBPF): .venv/bin/python -m bench.llm_overhead [--requests 600 --concurrency 16
    --rounds 4]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.harness.accuracy import truth_ttft
from tests.harness.llm_load import KINDS, Truth, plan, run_load
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

REPO = Path(__file__).resolve().parents[1]
TARGET_LOSS_PCT = 5.0
TARGET_ADDED_P99_MS = 1.0
STARTUP_TIMEOUT_S = 120  # the bcc compile takes tens of seconds on a busy 2-core machine
CATCH_UP_TIMEOUT_S = 30
SETTLE_S = 3.0


@dataclass
class Measure:
    mode: str  # "off" or "on"
    requests_per_s: float
    p50_ttft_ms: float
    p99_ttft_ms: float
    failed: int
    records: int | None = None  # LLM records zerotrace made of the measured requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else math.nan


def measure(mode: str, truths: list[Truth]) -> Measure:
    ok = [t for t in truths if not t.error and t.token_ns]
    span_s = (max(t.done_ns for t in ok) - min(t.sent_ns for t in ok)) / 1e9 if ok else 0.0
    # TTFT of streamed requests only: a non-streamed answer's "first token" is its whole
    # response, hundreds of ms by design, and would be the p99 of any mix.
    ttft_ms = [truth_ttft(vars(t)) / 1e6 for t in ok if t.stream]
    return Measure(
        mode,
        requests_per_s=len(ok) / span_s if span_s else 0.0,
        p50_ttft_ms=percentile(ttft_ms, 0.50),
        p99_ttft_ms=percentile(ttft_ms, 0.99),
        failed=len(truths) - len(ok),
    )


@contextmanager
def openai_server(options: Sequence[str] = (), scheme: str = "http") -> Iterator[tuple[str, int]]:
    """The test server with these extra options (https: with --certfile and --keyfile)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.openai_server", "--port", str(port), *options],
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the OpenAI-compatible test server did not start")
            time.sleep(0.1)
        yield f"{scheme}://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def zerotrace_attached(
    pid: int, store: Path, summary: Path | None = None, env: Mapping[str, str] | None = None
) -> Iterator[int]:
    """`zerotrace run --pid PID` until the block ends; yields its HTTP port once it serves.
    *summary*: a file for its standard output (with --quiet, the summary it prints at the end);
    *env*: settings to run it with (ZEROTRACE_...), over this process's environment."""
    http_port = free_port()
    out = summary.open("w") if summary else None
    proc = subprocess.Popen(
        [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--quiet", "--pid", str(pid),
         "--store", str(store), "--http-port", str(http_port), "--grpc-port", str(free_port())],
        cwd=REPO, stdout=out or subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **env} if env else None,
    )  # fmt: skip
    if out:
        out.close()  # the child has its own copy
    assert proc.stderr is not None
    err: list[str] = []
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while "web page" not in (line := proc.stderr.readline()):
            err.append(line)
            if not line or time.monotonic() > deadline:
                raise SystemExit("zerotrace run did not start:\n" + "".join(err)[-2000:])
        # Keep reading its stderr, so a full pipe never blocks it.
        threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True).start()
        yield http_port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"zerotrace run exited {proc.returncode}:\n" + "".join(err)[-2000:])


def catch_up(http_port: int, expected: int) -> None:
    """Waits until zerotrace has indexed `expected` LLM records (or stopped adding any), so
    stopping it loses none still in its pipeline."""
    url = f"http://127.0.0.1:{http_port}/api/v1/llm/requests?limit=1"
    last, last_change = -1, time.monotonic()
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while time.monotonic() < deadline and time.monotonic() - last_change < 3:
        with urllib.request.urlopen(url, timeout=10) as response:
            total = int(json.load(response)["total"])
        if total >= expected:
            return
        if total != last:
            last, last_change = total, time.monotonic()
        time.sleep(0.3)


def count_records(store_file: Path, models: set[str]) -> int:
    store = DuckDBStore(str(store_file))
    try:
        docs = store.search("llm", Query(limit=10_000))
    finally:
        store.close()
    return sum(d["observation_point"] == "SERVER" and d["model"] in models for d in docs)


def run_mode(mode: str, url: str, pid: int, args: argparse.Namespace, store: Path) -> Measure:
    specs = plan(args.requests)
    if mode == "off":
        return measure(mode, run_load(url, specs, args.concurrency))
    with zerotrace_attached(pid, store) as http_port:
        time.sleep(SETTLE_S)  # steady state: not the end of its start-up (first scans, caches)
        truths = run_load(url, specs, args.concurrency)
        warmups = args.concurrency * len(KINDS)  # each client warms every kind up once
        catch_up(http_port, args.requests + warmups)
    result = measure(mode, truths)
    result.records = count_records(store, {t.model for t in truths})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=600, help="measured requests a run")
    parser.add_argument("--concurrency", type=int, default=16, help="client processes")
    parser.add_argument("--rounds", type=int, default=4, help="off/on pairs, order alternating")
    args = parser.parse_args()
    results: list[Measure] = []
    with openai_server() as (url, pid), tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            modes = ("off", "on") if round_ % 2 == 0 else ("on", "off")
            for mode in modes:
                store = Path(tmp) / f"zt-{round_}.duckdb"
                result = run_mode(mode, url, pid, args, store)
                results.append(result)
                records = "" if result.records is None else f", {result.records} LLM records"
                print(
                    f"round {round_ + 1} {mode:>3}: {result.requests_per_s:7.1f} req/s, "
                    f"stream TTFT p50 {result.p50_ttft_ms:6.2f} ms p99 {result.p99_ttft_ms:6.2f} "
                    f"ms, {result.failed} failed{records}",
                    flush=True,
                )
    report(results, args.requests)


def report(results: list[Measure], requests: int) -> None:
    off = [r for r in results if r.mode == "off"]
    on = [r for r in results if r.mode == "on"]
    rps_off = statistics.mean(r.requests_per_s for r in off)
    rps_on = statistics.mean(r.requests_per_s for r in on)
    loss_pct = 100 * (rps_off - rps_on) / rps_off
    added_ms = statistics.mean(r.p99_ttft_ms for r in on) - statistics.mean(
        r.p99_ttft_ms for r in off
    )
    records = [r.records for r in on]

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    print(f"\nthroughput: {rps_off:.1f} req/s without, {rps_on:.1f} with zerotrace")
    if requests < 100:
        print(f"(only {requests} requests a run: the p99 is close to the maximum, so noisy)")
    print(
        f"throughput loss {loss_pct:+.1f} %   "
        f"(target < {TARGET_LOSS_PCT:.0f} %)  {verdict(loss_pct < TARGET_LOSS_PCT)}"
    )
    print(
        f"added p99 TTFT  {added_ms:+.2f} ms  "
        f"(target < {TARGET_ADDED_P99_MS:.0f} ms)  {verdict(added_ms < TARGET_ADDED_P99_MS)}"
    )
    print(
        f"LLM records     {records} for {requests} requests a run  "
        f"{verdict(all(r == requests for r in records))}"
    )
    if any(r.failed for r in results):
        print(f"failed requests: {[r.failed for r in results]}")


if __name__ == "__main__":
    main()
