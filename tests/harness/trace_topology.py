"""A small traced topology for trace assembly tests, run as one command under `zerotrace run`:

    python -m tests.harness.trace_topology TRUTH.json SERVICE_PORT UPSTREAM_PORT REDIS_PORT N

- an upstream HTTP server in a child process (threads; answers GET /up/<id>);
- a threaded service (ThreadingHTTPServer) in this process: for GET /work/<id> its handler
  thread asks Redis (GET, raw RESP over its own connection per thread) and then the upstream
  (GET /up/<id>, keep-alive per thread), then answers;
- 16 client threads sending N requests in all, keep-alive.

The truth is what this program logs, by ids zerotrace does not read: for each request id, the
service thread's native id and the epoch-ns interval of its Redis call. Written to TRUTH.json
at the end: {"service_pid", "upstream_pid", "client_tid_of": {...}, "requests": {id: {...}}}.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONCURRENCY = 16


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def upstream(port: int) -> None:
    class Up(_Quiet):
        def do_GET(self) -> None:
            time.sleep(0.002)
            self._answer(b"up " + self.path.encode())

    server = ThreadingHTTPServer(("127.0.0.1", port), Up)
    server.daemon_threads = True
    server.serve_forever()


class _PerThread(threading.local):
    redis: socket.socket | None = None
    up: http.client.HTTPConnection | None = None


def _redis_get(sock: socket.socket, key: str) -> bytes:
    data = key.encode()
    sock.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(data), data))
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("redis closed")
        reply += chunk
    return reply


def main() -> int:
    truth_path, service_port, upstream_port, redis_port, total = sys.argv[1:6]
    child = subprocess.Popen([sys.executable, "-m", __spec__.name, "--upstream", upstream_port])
    truth: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()
    local = _PerThread()

    class Service(_Quiet):
        def do_GET(self) -> None:
            request_id = self.path.rsplit("/", 1)[-1]
            if local.redis is None:
                local.redis = socket.create_connection(("127.0.0.1", int(redis_port)))
                local.up = http.client.HTTPConnection("127.0.0.1", int(upstream_port))
            redis_start = time.time_ns()
            _redis_get(local.redis, f"key:{request_id}")
            redis_end = time.time_ns()
            assert local.up is not None
            local.up.request("GET", f"/up/{request_id}")
            local.up.getresponse().read()
            with lock:
                truth[request_id] = {
                    "tid": threading.get_native_id(),
                    "redis": [redis_start, redis_end],
                }
            self._answer(b"done " + request_id.encode())

    server = ThreadingHTTPServer(("127.0.0.1", int(service_port)), Service)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _wait_for(int(upstream_port))

    per_client = threading.local()

    def one(i: int) -> None:
        conn = getattr(per_client, "conn", None)
        if conn is None:
            conn = per_client.conn = http.client.HTTPConnection("127.0.0.1", int(service_port))
        conn.request("GET", f"/work/r{i:05d}")
        body = conn.getresponse().read()
        assert body == f"done r{i:05d}".encode(), body

    try:
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(one, range(int(total))))
    finally:
        server.shutdown()
        child.terminate()
        child.wait(10)
    with open(truth_path, "w") as f:
        json.dump({"service_pid": os.getpid(), "upstream_pid": child.pid, "requests": truth}, f)
    return 0


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    if sys.argv[1] == "--upstream":
        upstream(int(sys.argv[2]))
    else:
        sys.exit(main())
