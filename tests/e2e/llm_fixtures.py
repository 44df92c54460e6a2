"""Shared pieces of the LLM end-to-end tests: the real server (plain or TLS), free ports,
and reading what zerotrace stored."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
REQUESTS = 200
CONCURRENCY = 16


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    port: int
    cafile: str | None
    proc: subprocess.Popen[bytes]
    truth: Path  # the server's own stamps, a line per request (openai_server.py --truth)


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def start_server(tmp_path: Path, tls: bool) -> Iterator[Server]:
    port = free_port()
    truth = tmp_path / "server-truth.jsonl"
    args = [sys.executable, "-m", "tests.harness.openai_server", "--port", str(port)]
    args += ["--truth", str(truth)]
    cafile = None
    if tls:
        cert, key = self_signed(tmp_path)
        args += ["--certfile", str(cert), "--keyfile", str(key)]
        cafile = str(cert)
    proc = subprocess.Popen(args, cwd=REPO)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the OpenAI-compatible test server did not start")
    scheme = "https" if tls else "http"
    yield Server(f"{scheme}://127.0.0.1:{port}", port, cafile, proc, truth)
    proc.terminate()
    proc.wait(timeout=10)


def load_command(server: Server, truth: Path, requests: int = REQUESTS) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "tests.harness.llm_load",
        "--url",
        server.url,
        "--requests",
        str(requests),
        "--concurrency",
        str(CONCURRENCY),
        "--out",
        str(truth),
    ]
    if server.cafile:
        command += ["--cafile", server.cafile]
    return command


def read_truth(path: Path) -> list[dict[str, Any]]:
    truths: list[dict[str, Any]] = json.loads(path.read_text())
    failed = [t for t in truths if t["error"]]
    assert not failed, f"the clients themselves failed: {failed[0]['error']}"
    return truths


def read_server_truth(path: Path) -> dict[str, dict[str, Any]]:
    """The server's stamps by model (each request names its own model)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return {row["model"]: row for row in map(json.loads, lines)}
