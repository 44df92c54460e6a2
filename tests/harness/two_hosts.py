"""Two network namespaces standing for two hosts, joined by a veth pair (10.77.<n>.1 and
10.77.<n>.2), for tests whose client and server must not share a network stack:

    with two_hosts() as hosts:
        hosts.run_in("a", [...])   # a command in host a's namespace

`python -m tests.harness.two_hosts serve PORT` and `... ask HOST PORT N` are the two ends of
a small threaded HTTP exchange (16 client threads, keep-alive), used as the command run in each
namespace. Needs root and `ip` (iproute2)."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Hosts:
    prefix: str
    subnet: int

    def namespace(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def address(self, host: str) -> str:
        return f"10.77.{self.subnet}.{1 if host == 'a' else 2}"

    def command(self, host: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(host), *argv]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextmanager
def two_hosts() -> Iterator[Hosts]:
    hosts = Hosts(f"zt{os.getpid()}", os.getpid() % 250 + 1)
    a, b = hosts.namespace("a"), hosts.namespace("b")
    try:
        _ip("netns", "add", a)
        _ip("netns", "add", b)
        _ip("link", "add", f"{a}v", "type", "veth", "peer", "name", f"{b}v")
        _ip("link", "set", f"{a}v", "netns", a)
        _ip("link", "set", f"{b}v", "netns", b)
        for host, ns in (("a", a), ("b", b)):
            _ip("-n", ns, "addr", "add", f"{hosts.address(host)}/24", "dev", f"{ns}v")
            _ip("-n", ns, "link", "set", f"{ns}v", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield hosts
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b"ok " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(host: str, port: int) -> None:
    server = ThreadingHTTPServer((host, port), _Answer)
    server.daemon_threads = True
    server.serve_forever()


def ask(host: str, port: int, total: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            http.client.HTTPConnection(host, port, timeout=2).connect()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    local = threading.local()

    def one(i: int) -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection(host, port)
        conn.request("GET", f"/x/r{i:05d}")
        assert conn.getresponse().read() == f"ok /x/r{i:05d}".encode()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(total)))
    # Keep the connections (and the process) a while: the collector reads a new connection's
    # addresses from the process's socket when it first sees it (proc_net.socket_endpoints),
    # which a process that has exited no longer has. A known limit (README, traces).
    time.sleep(HOLD_S)


HOLD_S = 8.0  # a busy machine (the CI's) has seen the collector 2 s and more behind


def both(prefix: str, subnet: int, port: int, total: int) -> int:
    """The server in host b, the client in host a; returns the client's exit status."""
    hosts = Hosts(prefix, subnet)
    me = [sys.executable, "-m", "tests.harness.two_hosts"]
    server = subprocess.Popen(hosts.command("b", [*me, "serve", hosts.address("b"), str(port)]))
    try:
        client = hosts.command("a", [*me, "ask", hosts.address("b"), str(port), str(total)])
        return subprocess.run(client).returncode
    finally:
        time.sleep(HOLD_S)  # as the client does: the server's sockets stay readable a while
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    verb, *rest = sys.argv[1:]
    if verb == "serve":
        serve(rest[0], int(rest[1]))
    elif verb == "ask":
        ask(rest[0], int(rest[1]), int(rest[2]))
    else:
        sys.exit(both(rest[0], int(rest[1]), int(rest[2]), int(rest[3])))
