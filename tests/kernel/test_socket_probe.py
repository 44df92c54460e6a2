"""Kernel test: the socket probe sees exactly the TCP traffic a workload makes.

A server and a client (separate child processes) on 127.0.0.1 make 23 request/response
round trips of known sizes through different syscalls (read/write, readv/writev,
recvmsg/sendmsg, recvfrom/sendto); one request is larger than the capture size.
Needs root, bcc, kernel headers and syscall tracepoints (scripts/setup-ebpf.sh).
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness.services import reap
from zerotrace_collector.cgroup import cgroup2_of_path, cgroup2_root
from zerotrace_collector.probes.event_layout import (
    F_TCP_SEQ,
    F_WAITED,
    ConnKind,
    Direction,
    SockOp,
    Source,
)
from zerotrace_collector.probes.socket import SocketProbe
from zerotrace_collector.probes.socket_decode import ConnSample, SocketDataSample, SocketSample
from zerotrace_collector.probes.socket_kernel import tcp_arrival_cflags

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parents[2]
BPF_DIR = REPO / "bpf"
ROUNDS = 23
PAYLOAD_MAX = 4096  # small capture size, so one request (BIG) is truncated
BIG = 3  # round whose request is larger than PAYLOAD_MAX


def request(i: int) -> bytes:
    size = 10_000 if i == BIG else 100 + i
    return (f"REQ{i:02d}".encode() + bytes(range(256)) * 40)[:size]


def response(i: int) -> bytes:
    return (f"RESP{i:02d}".encode() + b"abcdefgh" * 100)[: 200 + i]


_HELPERS = f"ROUNDS, BIG = {ROUNDS}, {BIG}\n" + "".join(
    inspect.getsource(f) for f in (request, response)
)

# Server: accept one connection, answer ROUNDS requests through rotating syscalls, report
# how many calls of each kind it made (reads may return partial data), wait for "bye".
SERVER = textwrap.dedent(
    """
    import json, os, socket, sys
    %(helpers)s
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    print(srv.getsockname()[1], flush=True)
    conn, peer = srv.accept()
    calls = {"in": 0, "out": 0, "in_bytes": 0, "out_bytes": 0}
    def recv_exact(n, how):
        buf = b""
        while len(buf) < n:
            calls["in"] += 1
            if how == 0:
                chunk = os.read(conn.fileno(), n - len(buf))
            elif how == 1:
                b = bytearray(n - len(buf)); k = os.readv(conn.fileno(), [b]); chunk = bytes(b[:k])
            elif how == 2:
                chunk, *_ = conn.recvmsg(n - len(buf))
            else:
                chunk = conn.recv(n - len(buf), socket.MSG_WAITALL)
            buf += chunk
        calls["in_bytes"] += len(buf)
        return buf
    for i in range(ROUNDS):
        got = recv_exact(len(request(i)), i % 4)
        assert got == request(i), i
        r = response(i)
        calls["out"] += 1
        if i % 4 == 0:
            n = os.write(conn.fileno(), r)
        elif i % 4 == 1:
            n = os.writev(conn.fileno(), [r[:50], r[50:]])
        elif i % 4 == 2:
            n = conn.sendmsg([r[:10], r[10:120], r[120:]])
        else:
            n = conn.send(r)
        assert n == len(r)
        calls["out_bytes"] += n
    print(json.dumps({"fd": conn.fileno(), "peer": peer[1], **calls}), flush=True)
    sys.stdin.readline()
    conn.close(); srv.close()
    """
).replace("%(helpers)s", _HELPERS)

CLIENT = textwrap.dedent(
    """
    import json, socket, sys
    %(helpers)s
    port = int(sys.argv[1])
    c = socket.create_connection(("127.0.0.1", port))
    for i in range(ROUNDS):
        c.sendall(request(i))
        assert c.recv(len(response(i)), socket.MSG_WAITALL) == response(i), i
    print(json.dumps({"fd": c.fileno(), "port": c.getsockname()[1]}), flush=True)
    sys.stdin.readline()
    c.close()
    """
).replace("%(helpers)s", _HELPERS)


require_ebpf("syscalls/sys_enter_sendmsg")


@pytest.fixture(scope="module")
def probe() -> Iterator[SocketProbe]:
    p = SocketProbe(BPF_DIR, payload_max=PAYLOAD_MAX, ringbuf_pages=4096, tls=False)
    p.attach()
    try:
        yield p
    finally:
        p.close()


def _poll_until(
    probe: SocketProbe, done: Callable[[list[SocketSample]], bool], seconds: float = 20
) -> list[SocketSample]:
    """Poll until done(samples) is true (then a short drain), or fail after *seconds*."""
    out: list[SocketSample] = []
    deadline = time.monotonic() + seconds
    while not done(out):
        assert time.monotonic() < deadline, "expected events did not arrive"
        out.extend(probe.poll(50))
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        out.extend(probe.poll(20))
    return out


def _popen(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"child {child.pid} exited early"
    return line


def test_round_trips_counted_exactly(probe: SocketProbe) -> None:
    lost_before, malformed_before = probe.lost, probe.malformed
    server = _popen(SERVER)
    client = None
    try:
        port = int(_line(server))
        client = _popen(CLIENT, str(port))
        cinfo = json.loads(_line(client))
        sinfo = json.loads(_line(server))
        spid, cpid = server.pid, client.pid

        def mine(s: SocketSample) -> bool:
            return s.pid in (spid, cpid)

        def complete(samples: list[SocketSample]) -> bool:
            data = [s for s in samples if isinstance(s, SocketDataSample) and mine(s)]
            want = sinfo["in"] + sinfo["out"] + 2 * ROUNDS
            return len(data) >= int(want)

        samples = [s for s in _poll_until(probe, complete) if mine(s)]
        for child in (server, client):
            assert child.stdin is not None
            child.stdin.write("bye\n")
            child.stdin.close()
        closes = [
            s
            for s in _poll_until(
                probe,
                lambda out: len([c for c in out if isinstance(c, ConnSample) and mine(c)]) >= 2,
            )
            if mine(s)
        ]
        assert server.wait(10) == 0 and client.wait(10) == 0
    finally:
        reap(server, client)
    assert probe.lost == lost_before, "kernel dropped events: host too busy to verify counts"
    assert probe.malformed == malformed_before, probe.last_malformed

    data = [s for s in samples if isinstance(s, SocketDataSample)]
    conns = [s for s in samples if isinstance(s, ConnSample)]

    def of(pid: int, direction: Direction) -> list[SocketDataSample]:
        return [s for s in data if s.pid == pid and s.direction is direction]

    c_out, c_in = of(cpid, Direction.EGRESS), of(cpid, Direction.INGRESS)
    s_in, s_out = of(spid, Direction.INGRESS), of(spid, Direction.EGRESS)
    assert len(c_out) == ROUNDS
    assert len(c_in) == ROUNDS  # MSG_WAITALL: one recvfrom per response
    assert len(s_in) == sinfo["in"]
    assert len(s_out) == ROUNDS == sinfo["out"]
    total_req = sum(len(request(i)) for i in range(ROUNDS))
    total_resp = sum(len(response(i)) for i in range(ROUNDS))
    assert sum(s.nbytes for s in c_out) == sum(s.nbytes for s in s_in) == total_req
    assert sum(s.nbytes for s in s_out) == sum(s.nbytes for s in c_in) == total_resp
    assert all(s.source is Source.SYSCALL and s.flags & ~F_WAITED == F_TCP_SEQ for s in data)
    # How long a read's bytes waited is known for reads only.
    assert all(s.direction is Direction.INGRESS for s in data if s.flags & F_WAITED)

    # TCP sequence numbers, read from the kernel's own structs (offsets from its BTF): each
    # call starts where the previous one on its side ended, and a receiver's first byte
    # has the sequence number its sender gave it, though two processes' structs were read.
    def chained(calls: list[SocketDataSample]) -> bool:
        seqs = [s.tcp_seq for s in calls]
        return None not in seqs and all(
            (a.tcp_seq + a.nbytes) % 2**32 == b.tcp_seq  # type: ignore[operator]
            for a, b in itertools.pairwise(calls)
        )

    for calls in (c_out, s_in, s_out, c_in):
        assert chained(calls), [(s.tcp_seq, s.nbytes) for s in calls]
    assert s_in[0].tcp_seq == c_out[0].tcp_seq and c_in[0].tcp_seq == s_out[0].tcp_seq

    # Payload prefixes are the bytes sent; only the big request is truncated.
    for i, (out, got) in enumerate(zip(c_out, c_in, strict=True)):
        assert out.nbytes == len(request(i))
        assert out.payload == request(i)[:PAYLOAD_MAX]
        assert out.truncated == (i == BIG)
        assert got.payload == response(i)
        assert out.op is SockOp.SENDTO and got.op is SockOp.RECVFROM
    for i, sent in enumerate(s_out):
        assert sent.payload == response(i) and not sent.truncated
    assert {s.op for s in s_out} == {SockOp.WRITE, SockOp.WRITEV, SockOp.SENDMSG, SockOp.SENDTO}
    assert {SockOp.READ, SockOp.READV, SockOp.RECVMSG, SockOp.RECVFROM} <= {s.op for s in s_in}
    assert b"".join(s.payload for s in s_in if not s.truncated).startswith(request(0))

    # Connection lifecycle and one connection id per side.
    connect = [c for c in conns if c.kind is ConnKind.CONNECT]
    accept = [c for c in conns if c.kind is ConnKind.ACCEPT]
    assert len(connect) == 1 and connect[0].pid == cpid and connect[0].fd == cinfo["fd"]
    assert connect[0].remote == ("127.0.0.1", port)
    assert len(accept) == 1 and accept[0].pid == spid and accept[0].fd == sinfo["fd"]
    assert {s.conn_start_ns for s in of(cpid, Direction.EGRESS) + c_in} == {
        connect[0].conn_start_ns
    }
    assert {s.conn_start_ns for s in s_in + s_out} == {accept[0].conn_start_ns}
    close = [c for c in closes if isinstance(c, ConnSample) and c.kind is ConnKind.CLOSE]
    assert sorted((c.pid, c.fd) for c in close) == sorted(
        [(cpid, cinfo["fd"]), (spid, sinfo["fd"])]
    )

    # 5-tuples, resolved from /proc while the connection was open.
    c_ends = probe.endpoints(c_out[0])
    s_ends = probe.endpoints(s_in[0])
    assert (c_ends.local_addr, c_ends.local_port) == ("127.0.0.1", cinfo["port"])
    assert (c_ends.remote_addr, c_ends.remote_port) == ("127.0.0.1", port)
    assert (s_ends.local_addr, s_ends.local_port) == ("127.0.0.1", port)
    assert (s_ends.remote_addr, s_ends.remote_port) == ("127.0.0.1", cinfo["port"])
    assert sinfo["peer"] == cinfo["port"]
    assert probe.endpoints(close[0]).known

    # Timing: monotonic, entry before exit.
    assert all(s.start_mono_ns <= s.end_mono_ns for s in samples)
    assert [s.start_mono_ns for s in c_out] == sorted(s.start_mono_ns for s in c_out)
    assert not [s for s in samples if s.pid == os.getpid()]


def test_a_process_that_exits_without_closing_gets_a_close_from_the_sweep(
    probe: SocketProbe,
) -> None:
    """Exit closes fds without close(2): the sweep drops the dead process's sockets and makes a
    CLOSE for its connection (zerotrace_collector.probes.socket_table.sweep), so the
    correlator is not left waiting."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        child = _popen(
            "import json, os, socket, sys\n"
            f"c = socket.create_connection(('127.0.0.1', {srv.getsockname()[1]}))\n"
            "c.sendall(b'hello'); print(json.dumps({'fd': c.fileno()}), flush=True)\n"
            "sys.stdin.readline(); os._exit(0)\n"
        )
        conn, _ = srv.accept()
        with conn, child:
            fd = json.loads(_line(child))["fd"]
            _poll_until(
                probe,
                lambda got: any(
                    isinstance(s, SocketDataSample) and s.pid == child.pid for s in got
                ),
            )
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.close()
            assert child.wait(10) == 0
            closes = [c for c in probe.sweep() if c.pid == child.pid]
    assert [(c.fd, c.kind) for c in closes] == [(fd, ConnKind.CLOSE)]
    assert [c for c in probe.sweep() if c.pid == child.pid] == []  # dropped: said once


def test_a_connection_gone_before_the_probe_looks_is_named_by_the_kernel(
    probe: SocketProbe,
) -> None:
    """A client that connects, sends, reads, closes and exits before the probe reads a single
    event (a short-lived client on a busy node), and its server likewise: the kernel read both
    ends when connect() and accept() returned (socket.c zt_sock_addrs), so both sides' samples
    are named in full with nothing left in /proc to read."""
    server = _popen(
        "import socket\n"
        "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n"
        "print(srv.getsockname()[1], flush=True)\n"
        "conn, _ = srv.accept(); conn.recv(100); conn.sendall(b'bye'); conn.close()\n"
    )
    with server:
        port = int(_line(server))
        client = _popen(
            "import socket\n"
            f"c = socket.create_connection(('127.0.0.1', {port}))\n"
            "c.sendall(b'hello'); c.recv(100); print(c.getsockname()[1], flush=True)\n"
        )
        with client:
            client_port = int(_line(client))
            assert client.wait(10) == 0 and server.wait(10) == 0
    samples = _poll_until(
        probe,
        lambda got: (
            {s.pid for s in got if isinstance(s, SocketDataSample)} >= {client.pid, server.pid}
        ),
    )
    sides = {client.pid: ("127.0.0.1", client_port, "127.0.0.1", port)}
    sides[server.pid] = ("127.0.0.1", port, "127.0.0.1", client_port)
    for pid, want in sides.items():
        mine = [s for s in samples if s.pid == pid and isinstance(s, SocketDataSample)]
        assert mine, pid
        for sample in mine:
            got = probe.endpoints(sample)
            assert (got.local_addr, got.local_port, got.remote_addr, got.remote_port) == want


def test_port_filter_drops_other_connections() -> None:
    server = _popen(SERVER)
    client = None
    filtered = SocketProbe(BPF_DIR, ports={1}, tls=False, seed_from_proc=False)
    try:
        filtered.attach()
        port = int(_line(server))
        client = _popen(CLIENT, str(port))
        _line(client)
        _line(server)
        samples = []
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            samples.extend(filtered.poll(50))
    finally:
        filtered.close()
        reap(server, client)
    assert not [s for s in samples if s.pid in (server.pid, client.pid if client else 0)]
    # In the kernel where BTF gives the ports (never tracked), else in user space.
    assert (
        filtered.port_filtered > 0
        if "port filter in user space" not in " ".join(filtered.notes)
        else filtered.filtered > 0
    )


def _exchange_under(
    probe: SocketProbe, client_code: str, env: dict[str, str] | None = None
) -> tuple[list[SocketDataSample], int, int]:
    """SERVER and a client running *client_code* (CLIENT, set up some way) make their ROUNDS
    exchanges under *probe*; returns what it saw of them and their pids (server, client)."""
    server = _popen(SERVER)
    client = None
    try:
        probe.attach()
        port = int(_line(server))
        client = subprocess.Popen(
            [sys.executable, "-c", client_code, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        pids = (server.pid, client.pid)
        _line(client)
        _line(server)

        def client_done(samples: list[SocketSample]) -> bool:
            data = [s for s in samples if isinstance(s, SocketDataSample) and s.pid in pids]
            return len(data) >= 2 * ROUNDS

        # Long enough for the server's events too, had the filter let them through.
        samples = _poll_until(probe, client_done)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            samples.extend(probe.poll(50))
    finally:
        probe.close()
        reap(server, client)
    data = [s for s in samples if isinstance(s, SocketDataSample) and s.pid in pids]
    return data, pids[0], pids[1]


def _client_only(data: list[SocketDataSample], server_pid: int, client_pid: int) -> None:
    assert not [s for s in data if s.pid == server_pid]
    out = [s for s in data if s.pid == client_pid and s.direction is Direction.EGRESS]
    assert sum(s.nbytes for s in out) == sum(len(request(i)) for i in range(ROUNDS))


def test_process_name_filter_keeps_only_that_process() -> None:
    """The client names its process, then talks from a thread that has a name of its own (as
    pthread_setname_np gives): the process's name decides. The server keeps its name."""
    client = (
        "import threading\n"
        'open("/proc/self/comm", "w").write("ztpick-client")\n'
        f"CLIENT = {CLIENT!r}\n"
        "def worker():\n"
        '    open(f"/proc/self/task/{threading.get_native_id()}/comm", "w").write("worker-7")\n'
        "    exec(CLIENT, {})\n"
        "thread = threading.Thread(target=worker)\n"
        "thread.start()\n"
        "thread.join()\n"
    )
    probe = SocketProbe(BPF_DIR, comm_prefix="ztpick", tls=False, seed_from_proc=False)
    _client_only(*_exchange_under(probe, client))


def test_cgroup_filter_keeps_that_cgroup_and_those_below_it() -> None:
    """The filter names a cgroup (as a pod's directory); the client runs in one below it (as
    a container's), the server elsewhere."""
    root = cgroup2_root(Path("/proc/mounts").read_text())
    if root is None:
        pytest.fail("no cgroup v2 hierarchy mounted: the cgroup filter cannot be checked")
    group = Path(root) / f"zt-test-{os.getpid()}"
    inner = group / "inner"
    inner.mkdir(parents=True)
    try:
        # The client moves itself into the inner cgroup before it opens a socket.
        move = (
            "import os\n"
            'open(os.environ["ZT_CGROUP"] + "/cgroup.procs", "w").write(str(os.getpid()))\n'
        )
        probe = SocketProbe(
            BPF_DIR, cgroup=cgroup2_of_path(str(group)), tls=False, seed_from_proc=False
        )
        env = {**os.environ, "ZT_CGROUP": str(inner)}
        _client_only(*_exchange_under(probe, move + CLIENT, env))
    finally:
        inner.rmdir()
        group.rmdir()


UVICORN_APP = textwrap.dedent(
    """
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for i in range(3):
            await send({"type": "http.response.body", "body": b"data: %d\\n\\n" % i,
                        "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    """
)


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop not installed")
def test_uvicorn_uvloop_server_and_httpx_client(probe: SocketProbe, tmp_path: Path) -> None:
    (tmp_path / "zt_sse_app.py").write_text(UVICORN_APP)
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "zt_sse_app:app", "--port", "0", "--loop", "uvloop",
         "--http", "httptools", "--log-level", "info"],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    client = None
    try:
        assert server.stderr is not None
        port = 0
        while not port:
            line = server.stderr.readline()
            assert line, "uvicorn exited"
            if "running on" in line.lower():
                port = int(line.rsplit(":", 1)[1].split()[0])
        client_code = (
            "import httpx,sys\n"
            "with httpx.Client() as c:\n"
            "    for _ in range(7):\n"
            "        r = c.post(f'http://127.0.0.1:{sys.argv[1]}/v1/chat', json={'q': 1})\n"
            "        assert r.status_code == 200 and r.text.startswith('data: 0'), r.text\n"
        )
        client = subprocess.run([sys.executable, "-c", client_code, str(port)], timeout=30)
        assert client.returncode == 0
        samples = _poll_until(
            probe,
            lambda out: (
                sum(
                    isinstance(s, SocketDataSample)
                    and s.pid == server.pid
                    and s.direction is Direction.EGRESS
                    for s in out
                )
                >= 7 * 5
            ),
        )
    finally:
        server.terminate()
        server.wait(10)
        reap(server)
    srv = [s for s in samples if s.pid == server.pid]
    srv_data = [s for s in srv if isinstance(s, SocketDataSample)]
    assert [s.kind for s in srv if isinstance(s, ConnSample)][:1] == [ConnKind.ACCEPT]
    reqs = [s for s in srv_data if s.direction is Direction.INGRESS]
    assert reqs and all(s.op is SockOp.READ for s in reqs)  # uvloop/libuv: read(2)
    assert sum(s.payload.startswith(b"POST /v1/chat HTTP/1.1") for s in reqs) == 7
    out = [s for s in srv_data if s.direction is Direction.EGRESS]
    assert {s.op for s in out} <= {SockOp.WRITE, SockOp.WRITEV}
    assert sum(b"data: 2\n\n" in s.payload for s in out) == 7
    http_clients = [
        s for s in samples
        if isinstance(s, SocketDataSample) and s.payload.startswith(b"POST /v1/chat")
        and s.direction is Direction.EGRESS
    ]  # fmt: skip
    assert len(http_clients) == 7
    assert {s.op for s in http_clients} == {SockOp.SENDTO}  # httpx: socket.sendall -> sendto


WAITING_SERVER = textwrap.dedent(
    """
    import socket, sys, threading, time
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    print(srv.getsockname()[1], flush=True)
    sys.stdin.readline()
    client = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    client.sendall(b"GET /late HTTP/1.1\\r\\n\\r\\n")
    time.sleep(0.3)  # a server busy elsewhere: the request waits in the socket
    conn.recv(100)
    # A blocking server: in its read before the next request comes, which waits for nothing.
    reader = threading.Thread(target=conn.recv, args=(100,))
    reader.start()
    time.sleep(0.2)
    client.sendall(b"GET /idle HTTP/1.1\\r\\n\\r\\n")
    reader.join()
    # A server that sends something (a TLS session ticket, say) between a request's arrival
    # and its read: the socket's last segment is then that send, not the request.
    client.sendall(b"GET /sent-meanwhile HTTP/1.1\\r\\n\\r\\n")
    time.sleep(0.15)
    conn.sendall(b"x")
    time.sleep(0.15)
    conn.recv(100)
    print("done", flush=True)
    """
)


def test_a_read_says_how_long_its_bytes_waited_in_the_socket() -> None:
    """The request is sent, then read 300 ms later: the read's event carries that wait (from
    the socket's last segment), also when the server sent something in between (from the
    arrival tcp:tcp_probe saw); a read entered before its bytes came (a blocking server idle
    between requests) and the sends carry none."""
    probe = SocketProbe(BPF_DIR, tls=False, follow=True)
    probe.attach()
    app = _popen(WAITING_SERVER)
    try:
        _line(app)
        probe.follow_pid(app.pid)
        assert app.stdin
        app.stdin.write("go\n")
        app.stdin.flush()
        assert _line(app) == "done\n"
        samples = _poll_until(probe, lambda s: any(_is_read(x, b"GET /sent-") for x in s))
    finally:
        reap(app)
        probe.close()
    [read] = [s for s in samples if isinstance(s, SocketDataSample) and _is_read(s, b"GET /late")]
    assert read.waited_us is not None and 280_000 <= read.waited_us <= 600_000, read.waited_us
    [idle] = [s for s in samples if isinstance(s, SocketDataSample) and _is_read(s, b"GET /idle")]
    assert idle.waited_us is None, idle.waited_us
    [sent] = [s for s in samples if isinstance(s, SocketDataSample) and _is_read(s, b"GET /sent-")]
    if tcp_arrival_cflags()[0]:
        assert sent.waited_us is not None and 280_000 <= sent.waited_us <= 600_000, sent.waited_us
    else:  # from the send's time: short by the 150 ms before it
        assert sent.waited_us is not None and sent.waited_us < 280_000, sent.waited_us
    sends = [
        s for s in samples if isinstance(s, SocketDataSample) and s.direction == Direction.EGRESS
    ]
    assert sends and all(s.waited_us is None for s in sends)


def _is_read(sample: SocketSample, start: bytes) -> bool:
    return (
        isinstance(sample, SocketDataSample)
        and sample.direction == Direction.INGRESS
        and sample.payload.startswith(start)
    )


# A connection read late, its fd already another socket's: A is connected, used and closed,
# then an AF_UNIX socket is made at the same fd (as asyncio's self-pipe is) and kept until the
# test has read A's events; then it is closed and B is connected at that fd and used.
FD_REUSED = textwrap.dedent(
    """
    import json, socket, sys
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    a = socket.create_connection(srv.getsockname()); served_a, _ = srv.accept()
    a.sendall(b"first"); served_a.recv(5)
    fd = a.fileno(); a.close()
    unix = socket.socket(socket.AF_UNIX)
    print(json.dumps({"a": fd, "unix": unix.fileno(), "port": srv.getsockname()[1]}), flush=True)
    sys.stdin.readline()
    unix.close()
    b = socket.create_connection(srv.getsockname()); served_b, _ = srv.accept()
    b.sendall(b"second"); served_b.recv(6)
    print(json.dumps({"b": b.fileno()}), flush=True)
    sys.stdin.readline()
    """
)


def test_a_connection_read_after_its_fd_went_to_another_socket_is_kept(
    probe: SocketProbe,
) -> None:
    def sent(pid: int, payload: bytes) -> Callable[[list[SocketSample]], bool]:
        return lambda got: any(
            isinstance(s, SocketDataSample) and s.pid == pid and s.payload == payload for s in got
        )

    def connects(samples: list[SocketSample], pid: int) -> list[ConnSample]:
        return [
            s
            for s in samples
            if isinstance(s, ConnSample) and s.pid == pid and s.kind is ConnKind.CONNECT
        ]

    filtered_before = probe.filtered
    child = _popen(FD_REUSED)
    try:
        fds = json.loads(_line(child))
        assert fds["a"] == fds["unix"]  # the lowest free fd: A's, given again
        first = _poll_until(probe, sent(child.pid, b"first"))
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert json.loads(_line(child))["b"] == fds["a"]
        second = _poll_until(probe, sent(child.pid, b"second"))
    finally:
        reap(child)
    # A's connect was kept and named by the address it connected to, not taken for the
    # AF_UNIX socket that held its fd when it was read (which dropped it, counted filtered).
    assert [c.fd for c in connects(first, child.pid)] == [fds["a"]]
    assert probe.filtered == filtered_before
    assert probe.endpoints(connects(first, child.pid)[0]).remote_port == fds["port"]
    # B, at the same fd, was tracked whole.
    assert [c.fd for c in connects(second, child.pid)] == [fds["a"]]
