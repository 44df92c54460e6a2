"""Kernel test: TLS plaintext through libssl uprobes; ciphertext syscalls are marked.

A Python ``ssl`` server and client (separate processes, blocking sockets: OpenSSL's
socket BIO) exchange known messages over 127.0.0.1 with a self-signed certificate; and a
server that feeds libssl from memory (asyncio's way) serves connections one after another.
Needs root, bcc, kernel headers, uprobes, libssl and the ``openssl`` command.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ebpf_required import ebpf_missing, require
from tests.harness.services import reap
from zerotrace_collector.probes import tls_placement
from zerotrace_collector.probes.event_layout import (
    F_FD_UNKNOWN,
    F_WAITED,
    ConnKind,
    Direction,
    Source,
)
from zerotrace_collector.probes.socket import SocketProbe
from zerotrace_collector.probes.socket_decode import ConnSample, SocketDataSample, SocketSample
from zerotrace_collector.probes.tls import find_libssl

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parents[2]
BPF_DIR = REPO / "bpf"
ROUNDS = 11

COMMON = (
    textwrap.dedent(
        """
    import json, socket, ssl, sys
    ROUNDS = %d
    def request(i): return b"GET /secret/%%02d HTTP/1.1\\r\\n\\r\\n" %% i
    def response(i): return b"HTTP/1.1 200 OK\\r\\nx: %%02d\\r\\n\\r\\n" %% i + b"z" * (50 + i)
    calls = {"reads": 0}
    def recv_exact(s, n):
        buf = b""
        while len(buf) < n:
            calls["reads"] += 1
            buf += s.recv(n - len(buf))
        return buf
    """
    )
    % ROUNDS
)

SERVER = COMMON + textwrap.dedent(
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    print(srv.getsockname()[1], flush=True)
    raw, _ = srv.accept()
    conn = ctx.wrap_socket(raw, server_side=True)
    for i in range(ROUNDS):
        assert recv_exact(conn, len(request(i))) == request(i)
        conn.sendall(response(i))
    print(json.dumps({"fd": conn.fileno(), **calls}), flush=True)
    sys.stdin.readline()
    """
)

CLIENT = COMMON + textwrap.dedent(
    """
    ctx = ssl.create_default_context(cafile=sys.argv[1])
    raw = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    c = ctx.wrap_socket(raw, server_hostname="localhost")
    for i in range(ROUNDS):
        c.sendall(request(i))
        assert recv_exact(c, len(response(i))) == response(i)
    print(json.dumps({"fd": c.fileno(), **calls}), flush=True)
    sys.stdin.readline()
    """
)


# A server that feeds libssl from memory (ssl.MemoryBIO: what asyncio and uvicorn do). It
# holds one connection open (the keeper), then serves connections one after another, each with
# a new SSL object made after the last one was freed: the allocator hands the new one the freed
# one's address. Like asyncio, it runs a new connection's handshake once before reading
# anything (that call writes nothing), and meanwhile its thread sends on the keeper.
WAIT_S = 0.2
MEMORY_BIO_SERVER = (
    COMMON
    + f"WAIT_S = {WAIT_S}\n"
    + textwrap.dedent(
        """
    import gc, time
    CONNS = int(sys.argv[3])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    print(srv.getsockname()[1], flush=True)

    class Tls:
        def __init__(self, raw):
            self.raw, self.inbox, self.outbox = raw, ssl.MemoryBIO(), ssl.MemoryBIO()
            self.tls = ctx.wrap_bio(self.inbox, self.outbox, server_side=True)
        def flush(self):
            data = self.outbox.read()
            if data:
                self.raw.sendall(data)
        def pump(self, call):
            while True:
                try:
                    result = call()
                    self.flush()
                    return result
                except ssl.SSLWantReadError:
                    self.flush()
                    self.inbox.write(self.raw.recv(65536))

    keeper = Tls(srv.accept()[0])
    keeper.pump(keeper.tls.do_handshake)
    fds = []
    for i in range(CONNS):
        conn = Tls(srv.accept()[0])
        try:
            conn.tls.do_handshake()  # nothing read yet: it writes nothing
        except ssl.SSLWantReadError:
            pass
        keeper.pump(lambda: keeper.tls.write(b"tick"))  # another connection's bytes
        conn.pump(conn.tls.do_handshake)
        time.sleep(WAIT_S)  # busy elsewhere: the request waits in the socket
        got = b""
        while len(got) < len(request(i)):
            got += conn.pump(lambda: conn.tls.read(65536))
        assert got == request(i), got
        conn.pump(lambda: conn.tls.write(response(i)))
        fds.append(conn.raw.fileno())
        conn.raw.recv(1)  # the client's close
        conn.raw.close()
        del conn
        gc.collect()
    print(json.dumps(fds), flush=True)
    sys.stdin.readline()
    """
    )
)

ONE_REQUEST_CLIENT = COMMON + textwrap.dedent(
    """
    ctx = ssl.create_default_context(cafile=sys.argv[1])
    def connect():
        raw = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
        return ctx.wrap_socket(raw, server_hostname="localhost")
    keeper = connect()
    for i in range(int(sys.argv[3])):
        c = connect()
        c.sendall(request(i))
        assert recv_exact(c, len(response(i))) == response(i)
        c.close()
    print("done", flush=True)
    sys.stdin.readline()
    """
)


# A TLS 1.3 client slow between its handshake and its request (preempted on a busy machine),
# and a memory-BIO server slow to read: one read takes the client's handshake tail (its
# ChangeCipherSpec and Finished) and, behind it, the request that came DELAY_S later.
DELAY_S = 0.2
HANDSHAKE_TAIL_SERVER = (
    COMMON
    + f"WAIT_S = {WAIT_S + DELAY_S}\n"
    + textwrap.dedent(
        """
    import time
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    print(srv.getsockname()[1], flush=True)
    raw = srv.accept()[0]
    inbox, outbox = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inbox, outbox, server_side=True)
    while not outbox.pending:  # the ClientHello in, the server's flight out
        inbox.write(raw.recv(65536))
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
    raw.sendall(outbox.read())
    time.sleep(WAIT_S)  # busy: the client's Finished, then its request, wait in the socket
    data = raw.recv(65536)
    inbox.write(data)
    tls.do_handshake()
    got = b""
    while len(got) < len(request(0)):
        try:
            got += tls.read(65536)
        except ssl.SSLWantReadError:
            inbox.write(raw.recv(65536))
    tls.write(response(0))
    raw.sendall(outbox.read())
    print(json.dumps({"first": data[0], "has_request": len(got) == len(request(0))}), flush=True)
    sys.stdin.readline()
    """
    )
)

SLOW_CLIENT = (
    COMMON
    + f"DELAY_S = {DELAY_S}\n"
    + textwrap.dedent(
        """
    import time
    ctx = ssl.create_default_context(cafile=sys.argv[1])
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    raw = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = ctx.wrap_socket(raw, server_hostname="localhost")
    time.sleep(DELAY_S)
    c.sendall(request(0))
    assert recv_exact(c, len(response(0))) == response(0)
    print("done", flush=True)
    sys.stdin.readline()
    """
    )
)


def request(i: int) -> bytes:
    return b"GET /secret/%02d HTTP/1.1\r\n\r\n" % i


def response(i: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\nx: %02d\r\n\r\n" % i + b"z" * (50 + i)


def _tls_missing() -> str | None:
    if find_libssl() is None:
        return "no libssl.so found for CPython's _ssl: TLS capture cannot be tested"
    if shutil.which("openssl") is None:
        return "the openssl command is needed to make a test certificate"
    return None


require(ebpf_missing() or _tls_missing())


@pytest.fixture(scope="module")
def probe() -> Iterator[SocketProbe]:
    # keep_ciphertext: the test checks the kernel's marking; by default poll() drops them.
    p = SocketProbe(BPF_DIR, keep_ciphertext=True)
    p.attach()
    try:
        assert p.tls_active, p.notes
        yield p
    finally:
        p.close()


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    crt, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
         "-days", "1", "-keyout", str(key), "-out", str(crt),
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return crt, key


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


def test_tls_plaintext_seen_and_ciphertext_marked(
    probe: SocketProbe, cert: tuple[Path, Path]
) -> None:
    server = _popen(SERVER, str(cert[0]), str(cert[1]))
    client = None
    samples: list[SocketSample] = []
    try:
        port = int(_line(server))
        client = _popen(CLIENT, str(cert[0]), str(port))
        cinfo = json.loads(_line(client))
        sinfo = json.loads(_line(server))
        pids = {server.pid, client.pid}
        want = 2 * ROUNDS + cinfo["reads"] + sinfo["reads"]
        deadline = time.monotonic() + 20
        while (
            len([s for s in samples if s.pid in pids and isinstance(s, SocketDataSample)
                 and s.source is Source.TLS]) < want
        ):  # fmt: skip
            assert time.monotonic() < deadline, "TLS events did not arrive"
            samples.extend(probe.poll(50))
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            samples.extend(probe.poll(20))
    finally:
        reap(server, client)
    mine = [s for s in samples if s.pid in pids]
    tls = [s for s in mine if isinstance(s, SocketDataSample) and s.source is Source.TLS]
    c_out = [s for s in tls if s.pid == client.pid and s.direction is Direction.EGRESS]
    s_in = [s for s in tls if s.pid == server.pid and s.direction is Direction.INGRESS]
    s_out = [s for s in tls if s.pid == server.pid and s.direction is Direction.EGRESS]
    c_in = [s for s in tls if s.pid == client.pid and s.direction is Direction.INGRESS]
    assert [s.payload for s in c_out] == [request(i) for i in range(ROUNDS)]
    assert [s.payload for s in s_out] == [response(i) for i in range(ROUNDS)]
    assert len(s_in) == sinfo["reads"] and len(c_in) == cinfo["reads"]
    assert b"".join(s.payload for s in s_in) == b"".join(request(i) for i in range(ROUNDS))
    assert b"".join(s.payload for s in c_in) == b"".join(response(i) for i in range(ROUNDS))
    # The SSL* was bound to the socket by the syscalls made inside the SSL calls.
    assert {s.fd for s in c_out + c_in} == {cinfo["fd"]}
    assert {s.fd for s in s_in + s_out} == {sinfo["fd"]}
    # No ciphertext or fd flag on a plaintext call. A read may say its bytes waited
    # (F_WAITED): the first request comes right behind the client's Finished, often before
    # the server's thread is back in SSL_read.
    assert not [s for s in tls if s.flags & ~F_WAITED]
    assert not [s for s in tls if s.flags & F_WAITED and s.direction is Direction.EGRESS]

    # Every syscall on the two TLS sockets (handshake included) is marked ciphertext,
    # carries no payload, and the plaintext never shows up at the syscall layer.
    sys_events = [s for s in mine if isinstance(s, SocketDataSample) and s.source is Source.SYSCALL]
    assert sys_events
    assert all(s.ciphertext and s.payload == b"" for s in sys_events)
    accept = [s for s in mine if isinstance(s, ConnSample) and s.kind is ConnKind.ACCEPT]
    assert len(accept) == 1
    conns = {(s.pid, s.conn_start_ns) for s in tls}
    assert len(conns) == 2  # one connection per side, shared by TLS and syscall events
    assert {(s.pid, s.conn_start_ns) for s in sys_events} == conns


def test_ciphertext_dropped_by_default(cert: tuple[Path, Path]) -> None:
    p = SocketProbe(BPF_DIR, seed_from_proc=False)
    server = _popen(SERVER, str(cert[0]), str(cert[1]))
    client = None
    samples: list[SocketSample] = []
    try:
        p.attach()
        port = int(_line(server))
        client = _popen(CLIENT, str(cert[0]), str(port))
        _line(client)
        _line(server)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            samples.extend(p.poll(50))
    finally:
        p.close()
        reap(server, client)
    pids = {server.pid, client.pid if client else 0}
    data = [s for s in samples if s.pid in pids and isinstance(s, SocketDataSample)]
    assert data and all(s.source is Source.TLS for s in data)
    assert p.ciphertext_dropped > 0


def test_memory_bio_ssl_objects_at_a_reused_address_are_bound_to_their_own_connection(
    probe: SocketProbe, cert: tuple[Path, Path]
) -> None:
    """Each connection's plaintext is reported on its own connection (its accept's fd and
    start), though its SSL object has the address of the previous, closed connection's and
    its thread sent on another connection between its first handshake call and its first
    bytes; and with how long its ciphertext waited before the server read it."""
    conns = 6
    server = _popen(MEMORY_BIO_SERVER, str(cert[0]), str(cert[1]), str(conns))
    client = None
    samples: list[SocketSample] = []
    rebound_before = probe.tls_rebound
    try:
        port = int(_line(server))
        client = _popen(ONE_REQUEST_CLIENT, str(cert[0]), str(port), str(conns))
        _line(client)
        fds = json.loads(_line(server))
        deadline = time.monotonic() + 20
        while len(_requests_read(samples, server.pid)) < conns:
            assert time.monotonic() < deadline, "the server's TLS reads did not arrive"
            samples.extend(probe.poll(50))
    finally:
        reap(server, client)
    accepts = [
        s for s in samples
        if s.pid == server.pid and isinstance(s, ConnSample) and s.kind is ConnKind.ACCEPT
    ]  # fmt: skip
    assert len(accepts) == conns + 1  # and the keeper's, first
    reads = _requests_read(samples, server.pid)
    for i, accept in enumerate(accepts[1:]):
        read = [s for s in reads if s.payload == request(i)]
        assert [(s.fd, s.conn_start_ns) for s in read] == [(fds[i], accept.conn_start_ns)], i
        assert read[0].fd_guessed  # bound by the egress that followed the handshake
        # Its ciphertext had waited in the socket: the plaintext's read says how long (at
        # most the sleep; less by the time the client took to send it after the handshake).
        assert read[0].waited_us is not None, i
        assert WAIT_S * 0.5e6 <= read[0].waited_us <= WAIT_S * 1e6 + 50_000, i
    # The allocator did reuse a freed SSL*'s address (else this test proves nothing new).
    assert probe.tls_rebound > rebound_before


def test_a_request_read_with_the_handshake_tail_waited_from_its_own_arrival(
    probe: SocketProbe, cert: tuple[Path, Path]
) -> None:
    """A request that came DELAY_S after the client's TLS 1.3 Finished, read by the same
    ciphertext read as that Finished, waited from its own arrival: the oldest unread bytes
    are the handshake's, and their wait is not the request's (bench.busy_llm saw HTTPS TTFTs
    a few ms too long on its busy clients this way)."""
    server = _popen(HANDSHAKE_TAIL_SERVER, str(cert[0]), str(cert[1]))
    client = None
    samples: list[SocketSample] = []
    try:
        port = int(_line(server))
        client = _popen(SLOW_CLIENT, str(cert[0]), str(port))
        _line(client)
        told = json.loads(_line(server))
        deadline = time.monotonic() + 20
        while not _requests_read(samples, server.pid):
            assert time.monotonic() < deadline, "the server's TLS read did not arrive"
            samples.extend(probe.poll(50))
    finally:
        reap(server, client)
    # The setup: one read took the ChangeCipherSpec the handshake's tail starts with, and
    # the request behind it.
    assert told == {"first": 0x14, "has_request": True}, told
    (read,) = [s for s in _requests_read(samples, server.pid) if s.payload == request(0)]
    assert read.waited_us is not None
    # WAIT_S after its own arrival (DELAY_S after the Finished): not WAIT_S + DELAY_S
    assert WAIT_S * 0.5e6 <= read.waited_us <= WAIT_S * 1e6 + 50_000, read.waited_us


def _requests_read(samples: list[SocketSample], pid: int) -> list[SocketDataSample]:
    return [
        s for s in samples
        if s.pid == pid and isinstance(s, SocketDataSample) and s.source is Source.TLS
        and s.direction is Direction.INGRESS
    ]  # fmt: skip


# A memory-BIO client (asyncio's way) whose SSL* stays unbound through its handshake: it sends
# each handshake flight later than bpf/tls.c's 50 ms pending window. Its first SSL_write is then
# made with no socket known (F_FD_UNKNOWN). Connection "bound": it sends that record itself at
# once, which binds the SSL*; connection "never": another thread sends it, so it never is.
UNBOUND_CLIENT = COMMON + textwrap.dedent(
    """
    import threading, time
    ctx = ssl.create_default_context(cafile=sys.argv[1])
    def session(port, i, sender):
        raw = socket.create_connection(("127.0.0.1", port))
        inbox, outbox = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(inbox, outbox, server_hostname="localhost")
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                time.sleep(0.12)  # past the pending window: the flight binds nothing
                raw.sendall(outbox.read())
                inbox.write(raw.recv(65536))
        time.sleep(0.12)
        raw.sendall(outbox.read())  # the handshake's last flight
        tls.write(request(i))
        sender(raw, outbox.read())
        got = b""
        while len(got) < len(response(i)):
            try:
                got += tls.read(65536)
            except ssl.SSLWantReadError:
                inbox.write(raw.recv(65536))
        assert got == response(i), got
        raw.close()
    def at_once(raw, data):
        raw.sendall(data)
    def elsewhere(raw, data):
        t = threading.Thread(target=raw.sendall, args=(data,)); t.start(); t.join()
    port_a, port_b = int(sys.argv[2]), int(sys.argv[3])
    session(port_a, 0, at_once)    # on the filtered port: placed, kept
    session(port_b, 1, at_once)    # elsewhere: placed, filtered out
    session(port_a, 2, elsewhere)  # never placed: dropped and counted
    print("done", flush=True)
    sys.stdin.readline()
    """
)

ONE_CONN_SERVER = COMMON + textwrap.dedent(
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    print(srv.getsockname()[1], flush=True)
    while True:
        conn = ctx.wrap_socket(srv.accept()[0], server_side=True)
        data = conn.recv(65536)
        conn.sendall(response(int(data[13:15])))
        conn.close()
    """
)


def test_with_a_port_filter_a_tls_call_is_kept_only_once_placed_on_a_wanted_socket(
    cert: tuple[Path, Path],
) -> None:
    """`--port` holds for TLS: a call made before its SSL* was bound is held, then placed on
    its socket and judged by its port (kept on the filtered one, dropped on the other); one
    never placed is dropped and counted, never published unfiltered."""
    servers = [_popen(ONE_CONN_SERVER, str(cert[0]), str(cert[1])) for _ in range(2)]
    client = None
    ports = [int(_line(s)) for s in servers]
    p = SocketProbe(BPF_DIR, ports=[ports[0]], seed_from_proc=False)
    samples: list[SocketSample] = []
    try:
        p.attach()
        assert p.tls_active, p.notes
        client = _popen(UNBOUND_CLIENT, str(cert[0]), str(ports[0]), str(ports[1]))
        _line(client)
        end = time.monotonic() + tls_placement.HOLD_S + 1.0
        while time.monotonic() < end:
            samples.extend(p.poll(50))
    finally:
        p.close()
        reap(client, *servers)
    tls_calls = [
        s for s in samples
        if client is not None and s.pid == client.pid and isinstance(s, SocketDataSample)
        and s.source is Source.TLS
    ]  # fmt: skip
    sent = [s.payload for s in tls_calls if s.direction is Direction.EGRESS]
    assert sent == [request(0)]  # placed and on the port; request 1 filtered; 2 never placed
    [write] = [s for s in tls_calls if s.direction is Direction.EGRESS]
    assert write.flags & F_FD_UNKNOWN  # made before its SSL* was bound: placed here
    assert all(s.fd >= 0 for s in tls_calls)
    received = b"".join(s.payload for s in tls_calls if s.direction is Direction.INGRESS)
    assert response(0) in received and response(1) not in received
    assert p.unplaced >= 2  # connection 2's write and its read(s)
