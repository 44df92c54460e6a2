"""Kernel test: socket.c "Non-blocking connects" at the probe's level.

One child process makes three connections over loopback to a listener of its own, then reports
their fds and exits (closing them):

- a blocking connect: its CONNECT is the connect time; no ESTABLISHED;
- a non-blocking connect to the listener (room in its queue): over loopback the SYN-ACK can be
  processed inside connect() itself (at release_sock), the socket established before connect()'s
  exit tracepoint: the ESTABLISHED must still come, after the CONNECT (whichever of the exit and
  the state change comes second sends it);
- a non-blocking connect to a closed port: refused (SYN_SENT -> CLOSE), no ESTABLISHED.

The slow case (ESTABLISHED from the state change, a second later) is
tests/kernel/test_span_timings.py's non-blocking test, through the whole pipeline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ebpf_required import require_ebpf
from zerotrace_collector.probes.event_layout import ConnKind
from zerotrace_collector.probes.socket import SocketProbe
from zerotrace_collector.probes.socket_decode import ConnSample, SocketSample
from zerotrace_collector.probes.socket_kernel import set_state_cflags

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parents[2]
BPF_DIR = REPO / "bpf"
EINPROGRESS = 115

CLIENT = textwrap.dedent(
    r"""
    import errno, json, select, socket, sys
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(8)
    port = srv.getsockname()[1]
    closed = socket.socket(); closed.bind(("127.0.0.1", 0)); dead = closed.getsockname()[1]
    closed.close()  # nothing listens there: refused
    blocking = socket.create_connection(("127.0.0.1", port))
    fast = socket.socket(); fast.setblocking(False)
    assert fast.connect_ex(("127.0.0.1", port)) == errno.EINPROGRESS
    assert select.select([], [fast], [], 10)[1]
    assert fast.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    refused = socket.socket(); refused.setblocking(False)
    assert refused.connect_ex(("127.0.0.1", dead)) == errno.EINPROGRESS
    assert select.select([], [refused], [], 10)[1]
    assert refused.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNREFUSED
    out = {"blocking": blocking.fileno(), "fast": fast.fileno(), "refused": refused.fileno()}
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    """
)

require_ebpf("sock/inet_sock_set_state")


@pytest.fixture(scope="module")
def probe() -> Iterator[SocketProbe]:
    p = SocketProbe(BPF_DIR, tls=False)
    p.attach()
    try:
        yield p
    finally:
        p.close()


def test_the_kernel_allows_following_non_blocking_connects(probe: SocketProbe) -> None:
    assert set_state_cflags()[1] is None
    assert not [n for n in probe.notes if "non-blocking" in n], probe.notes


def test_established_follows_a_non_blocking_connect_only(probe: SocketProbe) -> None:
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout is not None and client.stdin is not None
        fds = json.loads(client.stdout.readline())
        client.stdin.write("bye\n")
        client.stdin.close()
        assert client.wait(timeout=30) == 0
        samples: list[SocketSample] = []
        deadline = time.monotonic() + 20

        def closes() -> int:
            return sum(
                1
                for s in samples
                if isinstance(s, ConnSample) and s.pid == client.pid and s.kind is ConnKind.CLOSE
            )

        while closes() < 3:  # the listener's end: not tracked (no connect, no accept)
            assert time.monotonic() < deadline, samples
            samples.extend(probe.poll(50))
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        if client.stdout is not None:
            client.stdout.close()
    mine = [s for s in samples if isinstance(s, ConnSample) and s.pid == client.pid]
    by_fd: dict[int, list[ConnSample]] = {}
    for s in mine:
        by_fd.setdefault(s.fd, []).append(s)
    kinds = {name: [s.kind for s in by_fd[fd]] for name, fd in fds.items()}
    assert kinds == {
        "blocking": [ConnKind.CONNECT, ConnKind.CLOSE],
        "fast": [ConnKind.CONNECT, ConnKind.ESTABLISHED, ConnKind.CLOSE],
        "refused": [ConnKind.CONNECT, ConnKind.CLOSE],
    }, kinds
    connect, established, _ = by_fd[fds["fast"]]
    assert connect.ret == established.ret == -EINPROGRESS
    assert established.conn_start_ns == connect.conn_start_ns
    assert established.start_mono_ns == connect.start_mono_ns  # connect()'s entry
    # Over loopback it is established within a few hundred microseconds of connect()'s entry.
    assert connect.start_mono_ns < established.end_mono_ns < connect.start_mono_ns + 100_000_000
    assert established.tid == connect.tid and established.comm == connect.comm
    assert established.remote == connect.remote
