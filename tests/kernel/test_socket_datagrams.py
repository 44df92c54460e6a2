"""The socket probe on UDP (bpf/socket.c "Datagrams"), against the real kernel: a client that
sends 7 datagrams with one sendmmsg on an unconnected socket (the destination in each
message's msg_name) and takes the 7 answers with one recvmmsg gives a CONNECT marked dgram
with that destination, then one event per datagram for the first ZT_MAX_MMSG (4) of each call,
in order and with their own bytes, the other 3 + 3 counted; and UDP to a port nobody asked for
is not tracked at all."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness.services import REPO, reap
from zerotrace_collector.probes.event_layout import ConnKind, Direction
from zerotrace_collector.probes.socket import SocketProbe
from zerotrace_collector.probes.socket_decode import ConnSample, SocketDataSample, SocketSample

require_ebpf()

DATAGRAMS = 7  # a prime (bcc's rule); more than ZT_MAX_MMSG
MAX_MMSG = 4  # bpf/socket.c ZT_MAX_MMSG

# python -c CLIENT PORT: sendmmsg of DATAGRAMS messages "q0".."q6" to 127.0.0.1:PORT, then
# recvmmsg of as many answers; prints "done".
CLIENT = textwrap.dedent(
    r"""
    import ctypes, socket, sys
    port, n = int(sys.argv[1]), int(sys.argv[2])
    libc = ctypes.CDLL(None, use_errno=True)
    class Iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    class Msghdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                    ("iov", ctypes.POINTER(Iovec)), ("iovlen", ctypes.c_size_t),
                    ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]
    class Mmsghdr(ctypes.Structure):
        _fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]
    assert ctypes.sizeof(Mmsghdr) == 64
    addr = ctypes.create_string_buffer(
        (2).to_bytes(2, "little") + port.to_bytes(2, "big") + socket.inet_aton("127.0.0.1")
        + bytes(8), 16)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    def vector(payloads, name):
        bufs = [ctypes.create_string_buffer(p, len(p)) for p in payloads]
        iovs = [Iovec(ctypes.cast(b, ctypes.c_void_p), len(b)) for b in bufs]
        msgs = (Mmsghdr * len(payloads))()
        for m, iov in zip(msgs, iovs):
            m.hdr.iov = ctypes.pointer(iov)
            m.hdr.iovlen = 1
            if name:
                m.hdr.name = ctypes.cast(addr, ctypes.c_void_p)
                m.hdr.namelen = 16
        return msgs, bufs, iovs
    out, *keep = vector([b"q%d" % i for i in range(n)], True)
    assert libc.sendmmsg(s.fileno(), out, n, 0) == n, ctypes.get_errno()
    inbox, bufs, iovs = vector([bytes(64)] * n, False)
    got = 0
    while got < n:  # recvmmsg returns what has come; the first call usually takes all
        r = libc.recvmmsg(s.fileno(), ctypes.byref(inbox, got * 64), n - got, 0, None)
        assert r > 0, ctypes.get_errno()
        got += r
    print("done", flush=True)
    """
)


@pytest.fixture
def server() -> Iterator[socket.socket]:
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind(("127.0.0.1", 0))
    try:
        yield srv
    finally:
        srv.close()


def _run_client(port: int, srv: socket.socket | None) -> subprocess.Popen[str]:
    client = subprocess.Popen[str](
        [sys.executable, "-c", CLIENT, str(port), str(DATAGRAMS)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if srv is not None:
            srv.settimeout(30)
            asked = [srv.recvfrom(64) for _ in range(DATAGRAMS)]
            # All answered after all came: the client's recvmmsg then finds them together.
            for data, peer in asked:
                srv.sendto(b"a" + data[1:], peer)
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "done"
        client.wait(timeout=30)
    finally:
        reap(client)
    return client


def _samples(probe: SocketProbe, pid: int, until: int) -> list[SocketSample]:
    out: list[SocketSample] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out += [s for s in probe.poll(100) if s.pid == pid]
        if len(out) >= until:
            break
    return out


def test_mmsg_datagrams_are_one_event_each_up_to_the_cap(server: socket.socket) -> None:
    port = server.getsockname()[1]
    probe = SocketProbe(REPO / "bpf", ports={port}, tls=False, seed_from_proc=False)
    probe.attach()
    try:
        client = _run_client(port, server)
        # CONNECT, 4 out, 4 in, CLOSE
        samples = _samples(probe, client.pid, 2 + 2 * MAX_MMSG)
        uncopied = probe.mmsg_uncopied
    finally:
        probe.close()
    conns = [s for s in samples if isinstance(s, ConnSample)]
    data = [s for s in samples if isinstance(s, SocketDataSample)]
    assert [(c.kind, c.dgram) for c in conns] == [(ConnKind.CONNECT, True), (ConnKind.CLOSE, True)]
    assert conns[0].remote == ("127.0.0.1", port)
    sent = [s.payload for s in data if s.direction is Direction.EGRESS]
    came = [s.payload for s in data if s.direction is Direction.INGRESS]
    assert sent == [b"q%d" % i for i in range(MAX_MMSG)]
    assert came == [b"a%d" % i for i in range(MAX_MMSG)]
    assert {s.conn_start_ns for s in data} == {conns[0].conn_start_ns}
    assert all(s.tcp_seq is None and s.waited_us is None for s in data)
    # Each message of a call has its own time: ids stay apart, order holds.
    starts = [s.start_mono_ns for s in data if s.direction is Direction.EGRESS]
    assert starts == sorted(set(starts))
    assert uncopied == 2 * (DATAGRAMS - MAX_MMSG)
    assert probe.endpoints(conns[0]).remote_port == port


def test_udp_to_a_port_not_asked_for_is_not_tracked(server: socket.socket) -> None:
    port = server.getsockname()[1]
    probe = SocketProbe(REPO / "bpf", ports={port + 1}, tls=False, seed_from_proc=False)
    probe.attach()
    try:
        client = _run_client(port, server)
        # The client has exited: whatever it caused is in the ring by now.
        samples = [s for _ in range(3) for s in probe.poll(100) if s.pid == client.pid]
        uncopied = probe.mmsg_uncopied
    finally:
        probe.close()
    assert (samples, uncopied) == ([], 0)
