"""The spans of a client command, by two of zerotrace's paths, for kernel tests with real
servers (tests/harness/sql_servers.py):

- `embedded_spans`: `zerotrace run --port P -- COMMAND` (the socket probe, and with `tls` the
  TLS uprobes), spans read back from the DuckDB store it wrote;
- `captured_spans`: `zerotrace capture -i lo --port P -w FILE` while COMMAND runs, then
  `zerotrace analyze FILE --json OUT`, spans read from OUT.

Both return every span, as the records the store and the JSON carry (name, kind, status,
attributes, start_ns, end_ns, pid); `Workload.spans_in` picks a workload's. `in_turn` makes
one command of several, so one `zerotrace run` (its probes take seconds to load) serves them
all, and `by_process` splits their spans again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.harness.services import REPO, reap
from tests.harness.sql_servers import free_port
from zerotrace import names
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

TIMEOUT_S = 300


def _env(folder: Path) -> dict[str, str]:
    return {**os.environ, "ZEROTRACE_HOME": str(folder / "home")}


def in_turn(*commands: list[str]) -> list[str]:
    """One command that runs `commands` one after the other, failing at the first that fails."""
    runner = "import json, subprocess, sys\nfor c in json.loads(sys.argv[1]):\n"
    runner += "    subprocess.run(c, check=True)"
    return [sys.executable, "-c", runner, json.dumps(commands)]


def by_process(spans: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The spans of each process, processes in the order of their first span (the order
    `in_turn` ran them in)."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for span in sorted(spans, key=lambda s: int(s["start_ns"])):
        groups.setdefault(int(span["pid"]), []).append(span)
    return list(groups.values())


def embedded_run(command: list[str], ports: list[int], folder: Path, tls: bool = False) -> Path:
    """Runs `command` under `zerotrace run --port ...` (TLS uprobes only with `tls`), which
    must exit 0; the DuckDB store file it wrote."""
    folder.mkdir(parents=True, exist_ok=True)
    store_file = folder / "zt.duckdb"
    run = subprocess.run(
        [sys.executable, "-m", "zerotrace_cli", "run", "--no-files"]
        + [arg for port in ports for arg in ("--port", str(port))]
        + ([] if tls else ["--no-tls"])
        + ["--quiet", "--store", str(store_file), "--http-port", str(free_port())]
        + ["--grpc-port", str(free_port()), "--", *command],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(folder),
        timeout=TIMEOUT_S,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return store_file


def embedded_spans(
    command: list[str], ports: list[int], folder: Path, tls: bool = False
) -> list[dict[str, Any]]:
    """The spans `command` made under `zerotrace run` (see embedded_run)."""
    store = DuckDBStore(str(embedded_run(command, ports, folder, tls)))
    try:
        found = store.search(names.INDEX_SPANS, Query(limit=10_000))
    finally:
        store.close()
    return found


def captured_spans(command: list[str], port: int, folder: Path) -> list[dict[str, Any]]:
    """Captures port's packets on lo while `command` runs (it must exit 0), then analyzes."""
    folder.mkdir(parents=True, exist_ok=True)
    pcap, out = folder / "run.pcap", folder / "analyzed.jsonl"
    capture = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zerotrace_cli",
            "capture",
            "-i",
            "lo",
            "--port",
            str(port),
            "-w",
            str(pcap),
        ],
        cwd=REPO,
        env=_env(folder),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The capture socket is open and bound before the file is created (af_packet.capture).
        deadline = time.monotonic() + 60
        while not pcap.exists():
            assert capture.poll() is None, capture.communicate()[1]
            assert time.monotonic() < deadline, "zerotrace capture did not start"
            time.sleep(0.05)
        client = subprocess.run(
            command, capture_output=True, text=True, cwd=REPO, timeout=TIMEOUT_S
        )
        assert client.returncode == 0, client.stdout[-3000:] + client.stderr[-3000:]
        capture.send_signal(signal.SIGTERM)
        _, err = capture.communicate(timeout=60)
        assert capture.returncode == 0, err
        assert " 0 dropped by the kernel" in err, err
    finally:
        reap(capture)
    analyze = subprocess.run(
        [sys.executable, "-m", "zerotrace_cli", "analyze", str(pcap), "--json", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(folder),
        timeout=TIMEOUT_S,
    )
    assert analyze.returncode == 0, analyze.stdout[-3000:] + analyze.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return [r for r in records if r["record"] == names.DERIVED_SPAN.record]
