"""Other protocols through the real collector, embedded (`zerotrace run --port P -- CLIENT`):
a real redis-server (Debian's `redis-server`, started here on a free port) and a client that
sends a known workload over one connection: every command comes out as exactly one redis
span, with its name, its status (an error reply fails it) and the server's address; pipelined
commands too. Nothing of the values the client stored is kept (arguments become `?`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness.services import REPO, reap
from zerotrace import names
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

require_ebpf()

# 17 single commands (two of them fail) and a pipeline of 6: 23 spans, a prime (bcc's rule).
CLIENT = textwrap.dedent(
    r"""
    import socket, sys
    def cmd(*args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        return out
    def replies(sock, n):
        got = b""
        while got.count(b"\r\n") < n:  # every reply here is one line, or a $ line and its data
            got += sock.recv(65536)
        return got
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    for i in range(10):
        s.sendall(cmd("SET", "secret-key-%d" % i, "secret-value-%d" % i)); replies(s, 1)
    for i in range(5):
        s.sendall(cmd("GET", "secret-key-%d" % i)); replies(s, 2)
    s.sendall(cmd("INCR", "secret-key-0")); replies(s, 1)  # not an integer: an error reply
    s.sendall(cmd("NOSUCHCOMMAND")); replies(s, 1)  # an error reply
    s.sendall(b"".join(cmd("INCR", "counter") for _ in range(6))); replies(s, 6)
    s.close()
    """
)
SPANS = {"SET": 10, "GET": 5, "INCR": 7, "NOSUCHCOMMAND": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is missing: `apt-get install -y redis-server` (scripts/test does)"
    port = free_port()
    server = subprocess.Popen[str](
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and server.poll() is None, "redis did not start"
            time.sleep(0.1)
    try:
        yield port
    finally:
        server.terminate()
        reap(server)


def test_every_redis_command_is_one_span(tmp_path: Path, redis_port: int) -> None:
    store_file = tmp_path / "zt.duckdb"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "zerotrace_cli",
            "run",
            "--port",
            str(redis_port),
            "--no-files",
            "--no-tls",
            "--quiet",
            "--store",
            str(store_file),
            "--http-port",
            str(free_port()),
            "--grpc-port",
            str(free_port()),
            "--",
            sys.executable,
            "-c",
            CLIENT,
            str(redis_port),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "ZEROTRACE_HOME": str(tmp_path / "home")},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    store = DuckDBStore(str(store_file))
    try:
        found = [
            s
            for s in store.search(names.INDEX_SPANS, Query(limit=10_000))
            if str(s["kind"]).startswith("redis.")
        ]
    finally:
        store.close()
    assert Counter(str(s["name"]) for s in found) == SPANS, run.stdout[-3000:]
    assert {s["kind"] for s in found} == {"redis.client"}
    failed = sorted(
        str(s["attributes"][names.ATTR_ERROR_TYPE]) for s in found if s["status"] == "ERROR"
    )
    assert failed == ["ERR", "ERR"]
    for span in found:
        attrs = span["attributes"]
        assert attrs[names.ATTR_DB_SYSTEM_NAME] == "redis"
        assert (attrs[names.ATTR_SERVER_ADDRESS], attrs[names.ATTR_SERVER_PORT]) == (
            "127.0.0.1",
            str(redis_port),
        )
        assert "secret" not in str(attrs)
        assert int(span["end_ns"]) > int(span["start_ns"])
