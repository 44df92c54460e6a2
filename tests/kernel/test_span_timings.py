"""Where a span's time went, through the real collector (`zerotrace run -- DRIVER`): the
connect, TLS handshake and file-read times on the spans match what the processes measured
themselves, within 1 ms (issue 11 point 3).

The driver (observed, with the server it starts as its child) makes two connections:

1. Plain HTTP to a server whose accept queue is full (listen backlog 0, a first connection
   not accepted yet): the kernel drops the client's SYN and the client's connect() waits for
   its retransmission (about 1 s), so its connect is slow by a delay the client measures. The
   handler reads a known file (under the configured model directory) and measures the read.
2. HTTPS (Python's ssl, OpenSSL's socket BIO) to a TLS server: both ends measure their
   do_handshake().

3. Non-blocking (its own test): the same full accept queue, met by a non-blocking connect (as
   asyncio's): connect() returns EINPROGRESS at once, and the client waits for the socket to
   be writable (poll) and reads SO_ERROR; the client span's connect time matches that wait,
   from the connect() call, within 1 ms (socket.c "Non-blocking connects": the ESTABLISHED
   event, not the CONNECT's ~0).

4. DNS (its own test): in a private network and mount namespace, where 10.0.0.1 is a local
   address and /etc/resolv.conf names the test DNS server (tests/harness/dns_server.py, 40 ms
   late), the driver resolves alpha.zt.test with getaddrinfo() (glibc: A and AAAA at once)
   and connects to the answer: the client span's DNS time matches the getaddrinfo() time the
   driver measured, within 1 ms.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.ebpf_required import require_ebpf
from tests.harness.services import REPO
from zerotrace import names
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_collector.probes.tls import find_libssl

require_ebpf()

MS = 1_000_000
FILE_BYTES = 3 * 1024 * 1024 + 17  # a known size, not a page multiple

SERVER = textwrap.dedent(
    r"""
    import json, os, socket, ssl, sys, threading, time
    cert, key, path = sys.argv[1:4]
    plain = socket.socket(); plain.bind(("127.0.0.1", 0)); plain.listen(0)
    secure = socket.socket(); secure.bind(("127.0.0.1", 0)); secure.listen(8)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key)
    out = {"plain_port": plain.getsockname()[1], "tls_port": secure.getsockname()[1],
           "server_pid": os.getpid()}
    print(json.dumps(out), flush=True)

    def request(read):
        got = b""
        while b"\r\n\r\n" not in got:
            got += read(65536)

    RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"

    sys.stdin.readline()  # the driver's SYN was dropped: accept now
    filler, _ = plain.accept(); filler.close()  # room in the queue for the SYN's retry
    sys.stdin.readline()  # the driver is connected (not woken by it: see below)
    conn, _ = plain.accept()
    request(conn.recv)
    with open(path, "rb") as f:
        t0 = time.monotonic_ns(); data = f.read(); t1 = time.monotonic_ns()
    out.update(read_ns=t1 - t0, read_bytes=len(data), read_tid=threading.get_native_id())
    conn.sendall(RESPONSE); conn.close()

    sys.stdin.readline()  # the driver connected: a server blocked in accept() would be woken
    raw, _ = secure.accept()  # by it, and run before the driver's clock read (2 CPUs)
    tls = ctx.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
    t0 = time.monotonic_ns(); tls.do_handshake(); t1 = time.monotonic_ns()
    out["server_handshake_ns"] = t1 - t0
    request(tls.recv)
    tls.sendall(RESPONSE); tls.close()
    print(json.dumps(out), flush=True)
    """
)

DRIVER = textwrap.dedent(
    r"""
    import json, socket, ssl, subprocess, sys, threading, time
    cert, key, path, result = sys.argv[1:5]
    server = subprocess.Popen([sys.executable, "-c", sys.argv[5], cert, key, path],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ports = json.loads(server.stdout.readline())
        REQUEST = b"GET /timed HTTP/1.1\r\nHost: localhost\r\n\r\n"

        def answer(read):
            got = b""
            while not got.endswith(b"ok"):
                chunk = read(65536)
                assert chunk, got
                got += chunk

        def timed_connect(sock, port):
            t0 = time.monotonic_ns(); sock.connect(("127.0.0.1", port))
            return time.monotonic_ns() - t0

        def overflows():
            lines = open("/proc/net/netstat").read().splitlines()
            heads, values = lines[0].split(), lines[1].split()
            return int(values[heads.index("ListenOverflows")])

        filler = socket.create_connection(("127.0.0.1", ports["plain_port"]))
        before = overflows()
        client = socket.socket(); client.bind(("127.0.0.1", 0))
        out = {}
        connecting = threading.Thread(
            target=lambda: out.update(connect_ns=timed_connect(client, ports["plain_port"])))
        connecting.start()
        deadline = time.monotonic() + 10
        while overflows() == before:  # our SYN met the full queue
            assert time.monotonic() < deadline, "the SYN was not dropped"
            time.sleep(0.001)
        server.stdin.write("accept\n"); server.stdin.flush()
        connecting.join()
        server.stdin.write("connected\n"); server.stdin.flush()
        client.sendall(REQUEST); answer(client.recv); client.close(); filler.close()

        ctx = ssl.create_default_context(cafile=cert)
        raw = socket.socket()
        out["tls_connect_ns"] = timed_connect(raw, ports["tls_port"])
        server.stdin.write("accept\n"); server.stdin.flush()
        tls = ctx.wrap_socket(raw, server_hostname="localhost", do_handshake_on_connect=False)
        t0 = time.monotonic_ns(); tls.do_handshake(); t1 = time.monotonic_ns()
        out["client_handshake_ns"] = t1 - t0
        tls.sendall(REQUEST); answer(tls.recv); tls.close()
        out.update(json.loads(server.stdout.readline()))
        assert server.wait(timeout=30) == 0
        open(result, "w").write(json.dumps(out))
    finally:
        if server.poll() is None:
            server.kill(); server.wait()
    """
)


NB_SERVER = textwrap.dedent(
    r"""
    import json, socket, sys
    plain = socket.socket(); plain.bind(("127.0.0.1", 0)); plain.listen(0)
    print(json.dumps({"port": plain.getsockname()[1]}), flush=True)
    sys.stdin.readline()  # the driver's SYN was dropped: make room for its retry
    filler, _ = plain.accept(); filler.close()
    sys.stdin.readline()  # the driver is connected (a server in accept() would be woken by it)
    conn, _ = plain.accept()
    got = b""
    while b"\r\n\r\n" not in got:
        got += conn.recv(65536)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    conn.close()
    """
)

NB_DRIVER = textwrap.dedent(
    r"""
    import errno, json, os, select, socket, subprocess, sys, time
    # The truth is read when poll() wakes up, so it holds this process's wake-up delay: on a
    # loaded machine milliseconds at normal priority. At real-time priority it wakes at once,
    # and the truth is the connect's own time (the probe's reading does not depend on it).
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except OSError:
        pass  # not root: the bracket may then be looser than the test allows
    result = sys.argv[1]
    server = subprocess.Popen([sys.executable, "-c", sys.argv[2]],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(server.stdout.readline())["port"]

        def overflows():
            lines = open("/proc/net/netstat").read().splitlines()
            heads, values = lines[0].split(), lines[1].split()
            return int(values[heads.index("ListenOverflows")])

        filler = socket.create_connection(("127.0.0.1", port))
        before = overflows()
        client = socket.socket(); client.setblocking(False)
        t0 = time.monotonic_ns()
        assert client.connect_ex(("127.0.0.1", port)) == errno.EINPROGRESS
        returned_ns = time.monotonic_ns() - t0
        deadline = time.monotonic() + 10
        while overflows() == before:  # our SYN met the full queue
            assert time.monotonic() < deadline, "the SYN was not dropped"
            time.sleep(0.001)
        server.stdin.write("accept\n"); server.stdin.flush()
        poller = select.poll(); poller.register(client, select.POLLOUT)
        assert poller.poll(10_000), "not connected"
        t1 = time.monotonic_ns()
        assert client.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        server.stdin.write("connected\n"); server.stdin.flush()
        client.setblocking(True)
        client.sendall(b"GET /nonblocking HTTP/1.1\r\nHost: localhost\r\n\r\n")
        got = b""
        while not got.endswith(b"ok"):
            chunk = client.recv(65536)
            assert chunk, got
            got += chunk
        client.close(); filler.close()
        assert server.wait(timeout=30) == 0
        out = {"connect_ns": t1 - t0, "returned_ns": returned_ns, "port": port}
        open(result, "w").write(json.dumps(out))
    finally:
        if server.poll() is None:
            server.kill(); server.wait()
    """
)


DNS_DRIVER = textwrap.dedent(
    r"""
    import json, socket, subprocess, sys, threading, time
    repo, result = sys.argv[1:3]
    dns = subprocess.Popen([sys.executable, "-m", "tests.harness.dns_server", "--address",
                            "127.0.0.1", "--port", "53", "--delay-ms", "40"],
                           cwd=repo, stdout=subprocess.PIPE, text=True)
    try:
        assert dns.stdout.readline().strip() == "ready"
        listener = socket.socket(); listener.bind(("10.0.0.1", 0)); listener.listen(8)
        port = listener.getsockname()[1]

        def serve():
            conn, _ = listener.accept()
            got = b""
            while b"\r\n\r\n" not in got:
                got += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            conn.close()

        server = threading.Thread(target=serve)
        # The first getaddrinfo() reads nsswitch.conf, gai.conf and more (ms): not the DNS's.
        socket.getaddrinfo("localhost", port)  # /etc/hosts: no query
        t0 = time.monotonic_ns()
        infos = socket.getaddrinfo("alpha.zt.test", port, type=socket.SOCK_STREAM)
        t1 = time.monotonic_ns()
        address = next(i[4] for i in infos if i[0] == socket.AF_INET)
        client = socket.socket()
        t2 = time.monotonic_ns(); client.connect(address); t3 = time.monotonic_ns()
        server.start()  # only now: a thread woken by the connect would contend for the GIL
        client.sendall(b"GET /resolved HTTP/1.1\r\nHost: alpha.zt.test\r\n\r\n")
        got = b""
        while not got.endswith(b"ok"):
            got += client.recv(65536)
        client.close(); server.join()
        out = {"dns_ns": t1 - t0, "connect_ns": t3 - t2, "address": address[0], "port": port}
        open(result, "w").write(json.dumps(out))
    finally:
        dns.terminate(); dns.wait()
    """
)
# A private network (10.0.0.1 on its loopback, the DNS server on its 127.0.0.1:53) and a
# private /etc/resolv.conf, for the command in "$@".
NAMESPACE = (
    "ip link set lo up && ip addr add 10.0.0.1/32 dev lo"
    ' && mount --bind "$RESOLV" /etc/resolv.conf && exec "$@"'
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def certificate(folder: Path) -> tuple[Path, Path]:
    crt, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
         "-days", "1", "-keyout", str(key), "-out", str(crt),
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return crt, key


def observe(tmp_path: Path, command: list[str], **env: str) -> list[dict[str, Any]]:
    """Runs command under `zerotrace run`; the spans it stored."""
    store_file = tmp_path / "zt.duckdb"
    run = subprocess.run(
        [
            sys.executable, "-m", "zerotrace_cli", "run", "--quiet",
            "--store", str(store_file),
            "--http-port", str(free_port()), "--grpc-port", str(free_port()),
            "--", *command,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "ZEROTRACE_HOME": str(tmp_path / "home"), **env},
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    store = DuckDBStore(str(store_file))
    try:
        return list(store.search(names.INDEX_SPANS, Query(limit=10_000)))
    finally:
        store.close()


def one(spans: list[dict[str, Any]], kind: str, port: int) -> dict[str, Any]:
    found = [
        s
        for s in spans
        if s["kind"] == kind and s["attributes"].get(names.ATTR_SERVER_PORT) == str(port)
    ]
    seen = [
        (s["kind"], s["attributes"].get(names.ATTR_SERVER_PORT), s["name"])
        for s in spans
        if s["kind"] != names.SPAN_KIND_FILE_OPEN
    ]
    assert len(found) == 1, (kind, port, seen)
    return dict(found[0]["attributes"])


def close_to(observed: str, truth: int) -> None:
    print(f"observed {int(observed)} ns, measured by the process {truth} ns")  # pytest -s shows
    assert abs(int(observed) - truth) <= MS, (int(observed), truth)


def test_connect_tls_and_file_times_match_the_processes_own(tmp_path: Path) -> None:
    assert find_libssl() is not None and shutil.which("openssl"), "libssl and openssl needed"
    models = tmp_path / "models"
    models.mkdir()
    data = models / "weights.bin"
    data.write_bytes(os.urandom(FILE_BYTES))
    crt, key = certificate(tmp_path)
    result = tmp_path / "result.json"
    spans = observe(
        tmp_path,
        [sys.executable, "-c", DRIVER, str(crt), str(key), str(data), str(result), SERVER],
        ZEROTRACE_MODEL_DIRS=str(models),
    )
    truth = json.loads(result.read_text())
    assert truth["connect_ns"] > 500 * MS  # the SYN waited for its retransmission
    assert truth["read_bytes"] == FILE_BYTES
    plain, secure = truth["plain_port"], truth["tls_port"]

    client = one(spans, names.SPAN_KIND_HTTP_CLIENT, plain)
    close_to(client[names.ATTR_CONNECT_DURATION], truth["connect_ns"])
    assert names.ATTR_TLS_HANDSHAKE_DURATION not in client

    # The server's end of a connection it closed at once has no addresses (/proc had no more
    # of it when the collector looked): its two spans are told apart by their order.
    served = sorted(
        (s for s in spans if s["kind"] == names.SPAN_KIND_HTTP_SERVER),
        key=lambda s: int(s["start_ns"]),
    )
    assert [int(s["pid"]) for s in served] == [truth["server_pid"]] * 2, served
    server, tls_server = (dict(s["attributes"]) for s in served)
    assert server[names.ATTR_FILE_READ_BYTES] == str(FILE_BYTES)
    assert server[names.ATTR_FILE_PATHS] == str(data)
    assert server[names.ATTR_FILE_MODEL_BYTES] == str(FILE_BYTES)
    assert server[names.ATTR_FILE_TAGS] == "model"
    assert server[names.ATTR_THREAD_ID] == str(truth["read_tid"])
    close_to(server[names.ATTR_FILE_READ_DURATION], truth["read_ns"])
    for phase in (
        names.ATTR_REQUEST_SEND_DURATION,
        names.ATTR_SERVER_DURATION,
        names.ATTR_RESPONSE_TRANSFER_DURATION,
    ):
        assert int(server[phase]) >= 0 and int(client[phase]) >= 0
    # The server's time holds the file read; the client's holds the server's.
    assert int(server[names.ATTR_SERVER_DURATION]) >= int(server[names.ATTR_FILE_READ_DURATION])
    assert int(client[names.ATTR_SERVER_DURATION]) >= int(server[names.ATTR_SERVER_DURATION])

    tls_client = one(spans, names.SPAN_KIND_HTTP_CLIENT, secure)
    close_to(tls_client[names.ATTR_CONNECT_DURATION], truth["tls_connect_ns"])
    close_to(tls_client[names.ATTR_TLS_HANDSHAKE_DURATION], truth["client_handshake_ns"])
    close_to(tls_server[names.ATTR_TLS_HANDSHAKE_DURATION], truth["server_handshake_ns"])
    assert names.ATTR_CONNECT_DURATION not in tls_server
    assert names.ATTR_FILE_READ_BYTES not in tls_server  # that handler read no file


def test_a_non_blocking_connect_is_timed_to_the_established_state(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    spans = observe(tmp_path, [sys.executable, "-c", NB_DRIVER, str(result), NB_SERVER])
    truth = json.loads(result.read_text())
    assert truth["connect_ns"] > 500 * MS  # the SYN waited for its retransmission
    assert truth["returned_ns"] < 100 * MS  # connect() itself returned at once: EINPROGRESS
    client = one(spans, names.SPAN_KIND_HTTP_CLIENT, truth["port"])
    close_to(client[names.ATTR_CONNECT_DURATION], truth["connect_ns"])


def test_dns_time_of_the_resolution_before_the_connect(tmp_path: Path) -> None:
    assert shutil.which("unshare") and shutil.which("ip"), "unshare and ip needed"
    resolv, result = tmp_path / "resolv.conf", tmp_path / "result.json"
    resolv.write_text("nameserver 127.0.0.1\noptions attempts:1 timeout:5\n")
    command = ["unshare", "--net", "--mount", "sh", "-c", NAMESPACE, "sh"]
    spans = observe(
        tmp_path,
        [*command, sys.executable, "-c", DNS_DRIVER, str(REPO), str(result)],
        RESOLV=str(resolv),
    )
    truth = json.loads(result.read_text())
    assert truth["address"] == "10.0.0.1"
    assert truth["dns_ns"] > 40 * MS  # the server answers 40 ms late
    client = one(spans, names.SPAN_KIND_HTTP_CLIENT, truth["port"])
    assert client[names.ATTR_DNS_RESOLVED_NAME] == "alpha.zt.test"
    close_to(client[names.ATTR_DNS_DURATION], truth["dns_ns"])
    close_to(client[names.ATTR_CONNECT_DURATION], truth["connect_ns"])
