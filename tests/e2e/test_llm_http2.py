"""TTFT, TPOT and tokens over HTTP/2, embedded: `zerotrace run --port P... -- CLIENTS` observes
streamed OpenAI-compatible chats against hypercorn (tests/harness/h2_llm.py), over h2c and
over h2 with TLS (the libssl uprobes' plaintext), from a raw `h2` client that stamps its own
truth and from httpx with http2=True; and Triton's gRPC ModelStreamInfer (a grpcio server,
each response message a token). Every request is one derived.llm record, and each raw
client's request agrees with the client's truth within TOLERANCE_NS."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness import h2_llm as hl
from tests.harness.certificates import make_certificates
from tests.harness.services import REPO, reap
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

require_ebpf()

HARNESS = [sys.executable, "-m", "tests.harness.h2_llm"]
TOLERANCE_NS = 2_000_000
RUN_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline and server.poll() is None, f"no server on {port}"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One observed run of both clients: the stored llm records and each client's truth."""
    folder = tmp_path_factory.mktemp("h2llm")
    certs = make_certificates(folder / "certs")
    ports = [free_port(), free_port(), free_port()]
    commands = [
        ["serve", str(ports[0])],
        ["serve", str(ports[1]), str(certs.server_chain), str(certs.server_key)],
        ["triton", str(ports[2])],
    ]
    started: list[subprocess.Popen[str]] = []
    try:
        for port, command in zip(ports, commands, strict=True):
            started.append(
                subprocess.Popen(
                    [*HARNESS, *command],
                    cwd=REPO,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
            _wait_listening(port, started[-1])
        store = folder / "zt.duckdb"
        truths = [folder / "h2c.jsonl", folder / "tls.jsonl", folder / "triton.jsonl"]
        client = ["clients", *map(str, ports), str(certs.ca), *map(str, truths)]
        zerotrace = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--quiet"]
        zerotrace += [option for port in ports for option in ("--port", str(port))]
        zerotrace += ["--store", str(store)]
        zerotrace += ["--http-port", str(free_port()), "--grpc-port", str(free_port())]
        # zerotrace at a lower priority than the client, whose own stamps are the truth.
        run = subprocess.run(
            ["nice", "-n", "5", *zerotrace, "--", *HARNESS, *client],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "ZEROTRACE_HOME": str(folder / "home")},
            timeout=RUN_TIMEOUT_S,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        db = DuckDBStore(str(store))
        try:
            records = db.search("llm", Query(limit=10_000))
        finally:
            db.close()
        yield {
            "records": records,
            "ports": ports,
            "truth": [[json.loads(x) for x in t.read_text().splitlines()] for t in truths],
        }
    finally:
        for server in started:
            server.terminate()
            reap(server)


def _of_model(records: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    return sorted((r for r in records if r["model"] == model), key=lambda r: int(r["start_ns"]))


def check(observed: dict[str, Any], which: int) -> None:
    truth = observed["truth"][which]
    assert len(truth) == hl.REQUESTS
    # Records carry wall-clock times, the truth CLOCK_MONOTONIC: they pair by order (the h2c
    # client runs first, then the TLS one, each request after the last).
    model = hl.TRITON_MODEL if which == 2 else hl.MODEL
    found = _of_model(observed["records"], model)
    assert len(found) == (hl.REQUESTS if which == 2 else 2 * hl.REQUESTS), found
    records = found[which % 2 * hl.REQUESTS :][: hl.REQUESTS]
    problems, worst = [], [0, 0]
    for record, t in zip(records, truth, strict=True):
        endpoint = "inference.GRPCInferenceService/ModelStreamInfer" if which == 2 else None
        assert record["endpoint"] == (endpoint or "chat.completions")
        assert record["stream"] is True
        assert (record["output_tokens"], record["status_code"], record["error"]) == (
            hl.TOKENS, 200, None,
        )  # fmt: skip
        assert record["output_tokens_estimated"] is (which == 2)
        ttft = t["tokens_ns"][0] - t["sent_ns"]
        tpot = (t["tokens_ns"][-1] - t["tokens_ns"][0]) // (hl.TOKENS - 1)
        errors = [abs(int(record["ttft_ns"]) - ttft), abs(int(record["tpot_ns"]) - tpot)]
        worst = [max(w, e) for w, e in zip(worst, errors, strict=True)]
        if max(errors) > TOLERANCE_NS:
            problems.append((record["ttft_ns"], ttft, record["tpot_ns"], tpot))
    print(f"\nworst |error| ttft {worst[0] / 1e6:.3f} ms, tpot {worst[1] / 1e6:.3f} ms")
    assert problems == []


def test_h2c_every_request_matches_the_clients_truth(observed: dict[str, Any]) -> None:
    check(observed, 0)


def test_h2_over_tls_every_request_matches_the_clients_truth(observed: dict[str, Any]) -> None:
    check(observed, 1)


def test_triton_model_stream_infer_matches_the_clients_truth(observed: dict[str, Any]) -> None:
    check(observed, 2)


def test_httpx_with_http2_every_request_is_recorded(observed: dict[str, Any]) -> None:
    httpx = [r for r in observed["records"] if r["model"] == hl.HTTPX_MODEL]
    assert len(httpx) == 2 * hl.HTTPX_REQUESTS
    for record in httpx:
        assert (record["output_tokens"], record["content_events"], record["error"]) == (
            hl.TOKENS, hl.TOKENS, None,
        )  # fmt: skip
        assert int(record["ttft_ns"]) >= hl.PACE["first_ms"] * 1_000_000
