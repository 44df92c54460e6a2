"""HTTP/2 and gRPC through the real collector, embedded (`zerotrace run --port P -- CLIENT`),
against real servers (tests/harness/h2_servers.py): hypercorn (h2c by prior knowledge, and
h2 over TLS) and grpcio (plaintext, and TLS). Every call of a known workload comes out as
exactly one span with its method, path and status (gRPC: service, method, grpc-status from
the trailers, the messages each side sent), over TLS too (the libssl uprobes' plaintext:
httpx, and gRPC framed on `h2` over Python's ssl, since grpcio's BoringSSL is invisible to
them). A connection joined mid-way (zerotrace started after its first requests: the HPACK
tables unknown) still gives method, path and status, with the fields it cannot know marked.
The same plaintext workloads captured with `zerotrace capture` give the same spans through
`zerotrace analyze`.

Servers are module-scoped and each observed run (a compile of the probes, most of the time)
serves two tests: the h2c and the gRPC workloads in one, both TLS ones in another. grpcio's
plaintext client writes its first HEADERS with 22 iovecs in one sendmsg: the socket probe
copies from up to 32 (bpf/socket.c, ZT_MAX_IOV)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness import h2_servers as hs
from tests.harness.certificates import make_certificates
from tests.harness.services import REPO, reap
from zerotrace import names
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

require_ebpf()

HARNESS = [sys.executable, "-m", "tests.harness.h2_servers"]
RUN_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Servers:
    h2c: int
    h2_tls: int
    grpc: int
    grpc_tls: int
    gen: Path  # the compiled echo.proto
    ca: Path


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
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    folder = tmp_path_factory.mktemp("h2")
    certs = make_certificates(folder / "certs")
    gen = hs.compile_proto(folder / "gen")
    tls = [str(certs.server_chain), str(certs.server_key)]
    ports = [free_port() for _ in range(4)]
    commands = [
        ["hypercorn", str(ports[0])],
        ["hypercorn", str(ports[1]), *tls],
        ["grpc", str(ports[2]), str(gen)],
        ["grpc", str(ports[3]), str(gen), *tls],
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
        yield Servers(ports[0], ports[1], ports[2], ports[3], gen=gen, ca=certs.ca)
    finally:
        for server in started:
            server.terminate()
            reap(server)


def _zerotrace(tmp_path: Path, store: Path, *options: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "zerotrace_cli",
        "run",
        *options,
        "--no-files",
        "--quiet",
        "--store",
        str(store),
        "--grpc-port",
        str(free_port()),
    ]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "ZEROTRACE_HOME": str(tmp_path / "home")}


def _spans(store_file: Path, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    store = DuckDBStore(str(store_file))
    try:
        found = store.search(names.INDEX_SPANS, Query(limit=10_000))
    finally:
        store.close()
    return [s for s in found if str(s["kind"]) in kinds]


def observe(tmp_path: Path, ports: list[int], client: list[str], tls: bool) -> list[dict[str, Any]]:
    """Spans of HTTP/2 and gRPC that `zerotrace run --port P... -- CLIENT` stored."""
    store = tmp_path / "zt.duckdb"
    port_options = [option for port in ports for option in ("--port", str(port))]
    run = subprocess.run(
        [
            *_zerotrace(tmp_path, store, *port_options, *([] if tls else ["--no-tls"])),
            "--http-port",
            str(free_port()),
            "--",
            *HARNESS,
            *client,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(tmp_path),
        timeout=RUN_TIMEOUT_S,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return _spans(store, KINDS)


@pytest.fixture(scope="module")
def plain_spans(tmp_path_factory: pytest.TempPathFactory, servers: Servers) -> list[dict[str, Any]]:
    """One observed run (a compile of the probes) for the h2c and the gRPC workloads."""
    client = ["plain-clients", str(servers.h2c), str(servers.grpc), str(servers.gen)]
    return observe(tmp_path_factory.mktemp("plain"), [servers.h2c, servers.grpc], client, False)


@pytest.fixture(scope="module")
def tls_spans(tmp_path_factory: pytest.TempPathFactory, servers: Servers) -> list[dict[str, Any]]:
    client = [
        "tls-clients", str(servers.h2_tls), str(servers.grpc_tls), str(servers.gen), str(servers.ca)
    ]  # fmt: skip
    return observe(tmp_path_factory.mktemp("tls"), [servers.h2_tls, servers.grpc_tls], client, True)


def of_protocol(spans: list[dict[str, Any]], protocol: str) -> list[dict[str, Any]]:
    return [s for s in spans if str(s["kind"]).startswith(protocol + ".")]


KINDS = tuple(
    names.protocol_span_kind(p, side)
    for p in (names.PROTOCOL_HTTP2, names.PROTOCOL_GRPC)
    for side in ("client", "server")
)


def h2_view(spans: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return sorted(
        (
            str(s["name"]),
            s["attributes"][names.ATTR_HTTP_METHOD],
            s["attributes"][names.ATTR_URL_PATH],
            s["attributes"][names.ATTR_HTTP_STATUS],
        )
        for s in spans
    )


def grpc_view(spans: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str, str]]:
    out = []
    for s in spans:
        a = s["attributes"]
        out.append(
            (
                str(s["name"]),
                a[names.ATTR_RPC_METHOD],
                a[names.ATTR_RPC_REQUEST_MESSAGES],
                a[names.ATTR_RPC_RESPONSE_MESSAGES],
                a[names.ATTR_RPC_GRPC_STATUS_CODE],
                a.get(names.ATTR_ERROR_TYPE, ""),
            )
        )
    return sorted(out)


def check_h2(spans: list[dict[str, Any]], port: int) -> None:
    assert h2_view(spans) == hs.expected_h2_spans(hs.H2_CALLS)
    assert {s["kind"] for s in spans} == {"http2.client"}
    for span in spans:
        attrs = span["attributes"]
        failed = int(attrs[names.ATTR_HTTP_STATUS]) >= 400  # a client's view: 4xx fail too
        assert span["status"] == ("ERROR" if failed else "OK"), span
        if failed:
            assert attrs[names.ATTR_ERROR_TYPE] == attrs[names.ATTR_HTTP_STATUS]
        assert attrs[names.ATTR_NETWORK_PROTOCOL_VERSION] == "2"
        assert (attrs[names.ATTR_SERVER_ADDRESS], attrs[names.ATTR_SERVER_PORT]) == (
            "127.0.0.1",
            str(port),
        )
        assert int(span["end_ns"]) > int(span["start_ns"])


def check_grpc(spans: list[dict[str, Any]], port: int) -> None:
    assert grpc_view(spans) == hs.expected_grpc_spans()
    assert {s["kind"] for s in spans} == {"grpc.client"}
    for span in spans:
        attrs = span["attributes"]
        assert attrs[names.ATTR_RPC_SYSTEM] == names.PROTOCOL_GRPC
        assert attrs[names.ATTR_RPC_SERVICE] == hs.SERVICE
        assert span["status"] == (
            "OK" if attrs[names.ATTR_RPC_GRPC_STATUS_CODE] == "0" else "ERROR"
        )
        assert attrs[names.ATTR_SERVER_PORT] == str(port)
        assert int(span["end_ns"]) > int(span["start_ns"])


def test_h2c_every_request_is_one_span(plain_spans: list[dict[str, Any]], servers: Servers) -> None:
    check_h2(of_protocol(plain_spans, names.PROTOCOL_HTTP2), servers.h2c)


def test_grpc_every_call_is_one_span(plain_spans: list[dict[str, Any]], servers: Servers) -> None:
    check_grpc(of_protocol(plain_spans, names.PROTOCOL_GRPC), servers.grpc)


def test_h2_over_tls_gives_the_plaintext_spans(
    tls_spans: list[dict[str, Any]], servers: Servers
) -> None:
    check_h2(of_protocol(tls_spans, names.PROTOCOL_HTTP2), servers.h2_tls)


def test_grpc_over_tls_gives_the_plaintext_spans(
    tls_spans: list[dict[str, Any]], servers: Servers
) -> None:
    check_grpc(of_protocol(tls_spans, names.PROTOCOL_GRPC), servers.grpc_tls)


def _api_spans(http_port: int) -> int:
    url = f"http://127.0.0.1:{http_port}/api/v1/spans?kind=http2.client&limit=1000"
    with urllib.request.urlopen(url, timeout=5) as answer:
        return int(json.load(answer)["count"])


def test_joined_mid_connection(tmp_path: Path, servers: Servers) -> None:
    ready, go = tmp_path / "ready", tmp_path / "go"
    client = subprocess.Popen(
        [*HARNESS, "join-client", str(servers.h2c), str(ready), str(go)], cwd=REPO, text=True
    )
    observer: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and client.poll() is None, "client not ready"
            time.sleep(0.05)
        store, http_port = tmp_path / "zt.duckdb", free_port()
        observer = subprocess.Popen(
            [
                *_zerotrace(tmp_path, store, "--pid", str(client.pid), "--port", str(servers.h2c)),
                "--no-tls",
                "--http-port",
                str(http_port),
            ],
            cwd=REPO,
            env=_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_listening(http_port, observer)  # served once the probes follow the client
        go.write_text("go")
        assert client.wait(timeout=30) == 0
        deadline = time.monotonic() + 30
        while _api_spans(http_port) < len(hs.JOIN_AFTER):
            assert time.monotonic() < deadline and observer.poll() is None, "no spans"
            time.sleep(0.1)
        observer.send_signal(signal.SIGINT)
        _, err = observer.communicate(timeout=60)
        assert observer.returncode == 0, err[-3000:]
    finally:
        for process in (client, observer):
            if process is not None and process.poll() is None:
                process.terminate()
                reap(process)
    spans = _spans(store, KINDS)
    assert hs.U == names.UNKNOWN_VALUE
    assert h2_view(spans) == sorted(hs.JOIN_SEEN)  # the requests before the join: none
    assert {s["kind"] for s in spans} == {"http2.client"}
    failed = sorted(s["attributes"][names.ATTR_ERROR_TYPE] for s in spans if s["status"] == "ERROR")
    assert failed == ["404", "500"]


def _capture_ready(capture: subprocess.Popen[str]) -> bool:
    """Its AF_PACKET socket is open: listed in /proc/net/packet under an inode it holds."""
    held = set()
    for fd in Path(f"/proc/{capture.pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(target[8:-1])
    rows = Path("/proc/net/packet").read_text().splitlines()[1:]
    return any(row.split()[-1] in held for row in rows)


def captured(tmp_path: Path, port: int, client: list[str]) -> list[dict[str, Any]]:
    """Spans of `zerotrace analyze` on what `zerotrace capture --port PORT` kept of CLIENT."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    pcap, out = tmp_path / "cap.pcap", tmp_path / "records.jsonl"
    capture = subprocess.Popen(
        [sys.executable, "-m", "zerotrace_cli", "capture", "-w", str(pcap), "--port", str(port)],
        cwd=REPO,
        env=_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _capture_ready(capture):
            assert time.monotonic() < deadline and capture.poll() is None, "no capture"
            time.sleep(0.05)
        subprocess.run([*HARNESS, *client], cwd=REPO, check=True, timeout=60)
        capture.send_signal(signal.SIGINT)
        _, err = capture.communicate(timeout=30)
        assert capture.returncode == 0, err
    finally:
        if capture.poll() is None:
            capture.terminate()
            reap(capture)
    subprocess.run(
        [sys.executable, "-m", "zerotrace_cli", "analyze", str(pcap), "--json", str(out)],
        cwd=REPO,
        env=_env(tmp_path),
        check=True,
        capture_output=True,
        timeout=60,
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return [r for r in records if r["record"] == names.DERIVED_SPAN.record]


def test_capture_gives_the_same_spans(tmp_path: Path, servers: Servers) -> None:
    h2 = captured(tmp_path / "h2", servers.h2c, ["h2-client", str(servers.h2c)])
    assert h2_view(h2) == hs.expected_h2_spans(hs.H2_CALLS)
    client = ["grpc-client", str(servers.grpc), str(servers.gen)]
    grpc = captured(tmp_path / "grpc", servers.grpc, client)
    assert grpc_view(grpc) == hs.expected_grpc_spans()
