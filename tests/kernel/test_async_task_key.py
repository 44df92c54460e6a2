"""Kernel test: every egress call of an asyncio task carries its task's key (bpf/socket.c
"Asyncio task keys"), under each CPython found (3.11 here, 3.10/3.12/3.13 from pyenv or
scripts/other-python.sh).

A real asyncio server (tests/harness/async_task_server.py) runs two handler tasks that write
7 and 11 times to their client connections and as often to an upstream connection each task
opened (a gateway's outgoing calls), taking turns, each write a nested coroutine's; the loop
writes 3 times from a callback that runs no task, and a plain thread 5 times from inside a
generator. The truth is what the server logs: each task's root coroutine frame, as the
interpreter itself knows it. Every write of task A, to its client or upstream, carries A's
key, of B B's key, the others 0. Also: the same over TLS (SSL writes), an event loop thread
past the walker's reach (found once user space tells it), a native thread (no thread state:
said, not guessed), and uvicorn with uvloop (an LLM server's stack).
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness.async_task_server import (
    A_WRITES,
    B_WRITES,
    CALLBACK_WRITES,
    PLAIN_WRITES,
    POOL_WRITES,
)
from tests.harness.certificates import Certificates, make_certificates
from tests.harness.services import reap
from zerotrace_collector.probes.event_layout import F_PY_NO_THREAD, Direction, Source
from zerotrace_collector.probes.socket import SocketProbe
from zerotrace_collector.probes.socket_decode import SocketDataSample
from zerotrace_collector.probes.tls import find_libssl

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "tests" / "harness" / "async_task_server.py"

require_ebpf("syscalls/sys_enter_sendto")


def interpreters() -> dict[str, str]:
    """CPython 3.10 to 3.13 by version: the machine's, pyenv's, scripts/other-python.sh's."""
    candidates = ["/usr/bin/python3.11", os.environ.get("ZEROTRACE_OTHER_PYTHON", "")]
    candidates += sorted(glob.glob(str(REPO / ".venv/other-python/bin/python3.1[0-3]")))
    candidates += sorted(glob.glob("/root/.pyenv/versions/3.1[0-3].*/bin/python3.1[0-3]"))
    found: dict[str, str] = {}
    for c in candidates:
        if c and os.access(c, os.X_OK):
            found.setdefault(os.path.basename(os.path.realpath(c)).removeprefix("python"), c)
    return found


INTERPRETERS = interpreters()
VERSIONS = ["3.10", "3.11", "3.12", "3.13"]


@pytest.fixture(scope="module")
def probe() -> Iterator[SocketProbe]:
    p = SocketProbe(REPO / "bpf", tls=False, follow=True, seed_from_proc=False)
    p.attach()
    try:
        yield p
    finally:
        p.close()


def _drain(conn: socket.socket) -> None:
    try:
        while conn.recv(65536):
            pass
    except OSError:
        pass  # closed at the end of the test


class Run:
    """The server under one interpreter, its three clients, and what the probe saw of it."""

    def __init__(
        self, probe: SocketProbe, python: str, threads: int = 0, tls: Certificates | None = None
    ) -> None:
        self.probe = probe
        tls_args = ["--tls", str(tls.server_chain), str(tls.server_key)] if tls else []
        self.upstream = socket.socket()  # the gateway's upstream: drained, never answers
        self.upstream.bind(("127.0.0.1", 0))
        self.upstream.listen()
        self.upstream_conns: list[socket.socket] = []
        threading.Thread(target=self._sink, daemon=True).start()
        self.server = subprocess.Popen(
            [
                python,
                str(SERVER),
                "--threads",
                str(threads),
                *tls_args,
                "--upstream",
                str(self.upstream.getsockname()[1]),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.clients: list[socket.socket] = []
        ports = self.line()
        probe.follow_pid(self.server.pid)  # before any connection: it knows the process now
        self.tell("followed")
        context = ssl.create_default_context(cafile=str(tls.ca)) if tls else None

        def connect(port: int) -> socket.socket:
            sock = socket.create_connection(("127.0.0.1", port))
            return context.wrap_socket(sock, server_hostname="127.0.0.1") if context else sock

        for name in ("A", "B"):
            client = connect(ports["port"])
            client.sendall(f"{name}\n".encode())
            self.clients.append(client)
        self.clients.append(connect(ports["plain_port"]))
        self.conns = self.line()
        self.seen: list[SocketDataSample] = []

    def _sink(self) -> None:
        while True:
            try:
                conn, _ = self.upstream.accept()
            except OSError:
                return  # closed
            self.upstream_conns.append(conn)
            threading.Thread(target=_drain, args=(conn,), daemon=True).start()

    def line(self) -> Any:
        assert self.server.stdout is not None
        text = self.server.stdout.readline()
        assert text, f"server {self.server.pid} exited early"
        return json.loads(text)

    def tell(self, word: str) -> None:
        assert self.server.stdin is not None
        self.server.stdin.write(word + "\n")
        self.server.stdin.flush()

    def writes(self, name: str, fd_of: str = "fd") -> list[SocketDataSample]:
        fd = self.conns[name][fd_of]
        return [s for s in self.seen if s.fd == fd and s.direction is Direction.EGRESS]

    def round(self) -> None:
        """One "go": every write of the round made and seen by the probe."""
        before = len(self.seen)
        self.tell("go")
        assert self.line() == {"done": True}
        want = 2 * (A_WRITES + B_WRITES + POOL_WRITES) + CALLBACK_WRITES + PLAIN_WRITES
        deadline = time.monotonic() + 20
        while len(self.seen) - before < want:
            if time.monotonic() > deadline:
                heads = sorted(bytes(s.payload[:11]) for s in self.seen[before:])
                raise AssertionError(f"{len(heads)} of {want} writes seen: {heads}")
            self.seen += [
                s
                for s in self.probe.poll(50)
                if isinstance(s, SocketDataSample)
                and s.pid == self.server.pid
                and s.direction is Direction.EGRESS
            ]
        for client in self.clients:  # drained, so no write ever waits
            client.setblocking(False)
            try:
                while client.recv(65536):
                    pass
            except (BlockingIOError, ssl.SSLWantReadError):
                pass

    def close(self) -> None:
        try:
            if self.server.poll() is None:
                self.tell("bye")
                self.server.wait(10)
        finally:
            for client in self.clients + self.upstream_conns:
                client.close()
            self.upstream.close()
            reap(self.server)


def keyed(samples: list[SocketDataSample], prefix: bytes) -> list[int]:
    return [s.py_task for s in samples if s.payload.startswith(prefix)]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_task_writes_under_its_own_key(probe: SocketProbe, version: str) -> None:
    python = INTERPRETERS.get(version)
    if python is None:
        pytest.skip(f"no CPython {version} here: run scripts/other-python.sh")
    run = Run(probe, python)
    try:
        assert probe.python is not None and run.server.pid in probe.python.known
        module = probe.python.known[run.server.pid].module
        run.round()
    finally:
        run.close()
    # Only followed processes are observed: the context-copy uretprobe is installed in the
    # server alone, not in every process that maps its interpreter, and goes when it exits.
    assert (module, run.server.pid) in probe.context_probes
    assert (module, -1) not in probe.context_probes
    probe.python.sweep()
    assert not [p for p in probe.context_probes if p[1] == run.server.pid]
    a, b, plain = run.writes("A"), run.writes("B"), run.writes("C")
    key_a, key_b = run.conns["A"]["key"], run.conns["B"]["key"]
    assert key_a and key_b and key_a != key_b
    # Exactly the writes made, each with the key of the task that made it.
    assert keyed(a, b"A-task-") == [key_a] * A_WRITES
    assert keyed(b, b"B-task-") == [key_b] * B_WRITES
    # Each task's outgoing calls on its upstream connection, whether it made them itself or
    # a child or grandchild task did (python_stack.h "Tasks made by tasks"), or a worker
    # thread it handed them to: the key of its response writes.
    assert keyed(run.writes("A", "up"), b"A-up-") == [key_a] * A_WRITES
    assert keyed(run.writes("B", "up"), b"B-up-") == [key_b] * B_WRITES
    assert keyed(run.writes("A", "up"), b"A-pool-") == [key_a] * POOL_WRITES
    assert keyed(run.writes("B", "up"), b"B-pool-") == [key_b] * POOL_WRITES
    # The callbacks the main task scheduled run between task steps in a copy of its context:
    # its key, not A's (whose connection they write to) nor none.
    key_main = run.conns["main"]["key"]
    assert key_main not in (0, key_a, key_b)
    assert keyed(a, b"A-callback-") == [key_main] * CALLBACK_WRITES
    assert keyed(plain, b"C-plain-") == [0] * PLAIN_WRITES  # a thread in a plain generator
    assert (len(a), len(b), len(plain)) == (A_WRITES + CALLBACK_WRITES, B_WRITES, PLAIN_WRITES)
    assert not [s for s in run.seen if s.flags & F_PY_NO_THREAD]
    # The two tasks took turns: keys tell interleaved calls apart, not separate runs of them.
    order = sorted((s.start_mono_ns, s.py_task) for s in a + b if s.py_task)
    switches = sum(1 for x, y in itertools.pairwise(order) if x[1] != y[1])
    assert switches >= 2 * A_WRITES - 1, order


def test_a_loop_thread_past_the_walkers_reach_is_found_once_told(probe: SocketProbe) -> None:
    """70 threads started after the event loop's: the walker, which looks at the newest 64
    thread states, does not reach the loop's; its calls say so (F_PY_NO_THREAD), the probe
    reads the process's thread list, and once the walker looks again (ZT_PY_NO_THREAD_NS, 1 s,
    after it last searched in vain) its tasks' calls carry their keys. Rounds are run until
    one is keyed in full, for at most 15 s."""
    run = Run(probe, INTERPRETERS.get("3.11", "/usr/bin/python3.11"), threads=70)
    rounds: list[list[SocketDataSample]] = []
    try:
        deadline = time.monotonic() + 15
        while not rounds or [s for s in rounds[-1] if s.flags & F_PY_NO_THREAD]:
            assert time.monotonic() < deadline, f"still not found after {len(rounds)} rounds"
            before = len(run.seen)
            run.round()
            rounds.append(run.seen[before:])
    finally:
        run.close()
    lost = [s for s in rounds[0] if s.flags & F_PY_NO_THREAD]
    # Only the loop's thread is past reach; the plain writer thread is among the newest.
    assert lost and all(s.py_task == 0 for s in lost)
    assert {s.tid for s in lost} == {run.server.pid}
    assert len(rounds) >= 2 and probe.python is not None and probe.python.thread_walks >= 1
    key_a, key_b = run.conns["A"]["key"], run.conns["B"]["key"]
    a = [s for s in rounds[-1] if s.fd == run.conns["A"]["fd"]]
    b = [s for s in rounds[-1] if s.fd == run.conns["B"]["fd"]]
    assert keyed(a, b"A-task-") == [key_a] * A_WRITES
    assert keyed(b, b"B-task-") == [key_b] * B_WRITES


def test_ssl_writes_carry_the_key_of_the_task_that_made_them(tmp_path: Path) -> None:
    """The same over TLS: asyncio's connections through a memory BIO (SSL_write_ex inside the
    task's write, the ciphertext flushed after it), the thread's a blocking ssl socket. The
    plaintext events (tls.c's SSL exit) carry the keys; the ciphertext syscalls are not
    emitted."""
    if find_libssl() is None:
        pytest.skip("no libssl.so found for CPython's _ssl")
    certs = make_certificates(tmp_path / "certs")
    with SocketProbe(REPO / "bpf", follow=True, seed_from_proc=False) as tls_probe:
        assert tls_probe.tls_active, tls_probe.notes
        run = Run(tls_probe, INTERPRETERS.get("3.11", "/usr/bin/python3.11"), tls=certs)
        try:
            run.round()
        finally:
            run.close()
    key_a, key_b = run.conns["A"]["key"], run.conns["B"]["key"]
    plaintext = [s for s in run.seen if s.source is Source.TLS]
    plain_up = [s for s in run.seen if s.source is Source.SYSCALL]  # upstreams are not TLS
    assert len(plaintext) == A_WRITES + B_WRITES + CALLBACK_WRITES + PLAIN_WRITES
    assert keyed(plain_up, b"A-up-") == [key_a] * A_WRITES
    assert keyed(plain_up, b"B-up-") == [key_b] * B_WRITES
    assert keyed(plaintext, b"A-task-") == [key_a] * A_WRITES
    assert keyed(plaintext, b"B-task-") == [key_b] * B_WRITES
    assert keyed(plain_up, b"A-pool-") == [key_a] * POOL_WRITES
    assert keyed(plaintext, b"A-callback-") == [run.conns["main"]["key"]] * CALLBACK_WRITES
    assert keyed(plaintext, b"C-plain-") == [0] * PLAIN_WRITES


# A thread CPython never saw (a native library's: grpcio's, librdkafka's) writes to a tracked
# socket: pthread_create(perror) writes "native: ..." to fd 2, which is the connection (through
# stderr itself once that stream has an orientation; else glibc writes to a dup of fd 2).
NATIVE = """
import ctypes, os, socket, sys
print("ready", flush=True)
sys.stdin.readline()
os.close(2)
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
assert conn.fileno() == 2
libc = ctypes.CDLL(None)
libc.fwide(ctypes.c_void_p.in_dll(libc, "stderr"), -1)
libc.pthread_create.argtypes = [ctypes.c_void_p] * 4
libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
for _ in range(3):
    thread = ctypes.c_ulong()
    libc.pthread_create(ctypes.byref(thread), None, ctypes.cast(libc.perror, ctypes.c_void_p),
                        ctypes.c_char_p(b"native"))
    libc.pthread_join(thread.value, None)
conn.send(b"python")
print("done", flush=True)
sys.stdin.readline()
"""


def test_a_native_threads_writes_say_the_walker_found_no_thread(probe: SocketProbe) -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        child = subprocess.Popen(
            [INTERPRETERS.get("3.11", "/usr/bin/python3.11"), "-c", NATIVE,
             str(srv.getsockname()[1])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        peer = None
        try:
            assert child.stdin is not None and child.stdout is not None
            assert child.stdout.readline() == "ready\n"  # interpreter up
            probe.follow_pid(child.pid)
            assert probe.python is not None and child.pid in probe.python.known
            child.stdin.write("go\n")
            child.stdin.flush()
            peer, _ = srv.accept()
            assert child.stdout.readline() == "done\n"
            seen: list[SocketDataSample] = []
            deadline = time.monotonic() + 20
            while len(seen) < 4:
                assert time.monotonic() < deadline, seen
                seen += [
                    s
                    for s in probe.poll(50)
                    if isinstance(s, SocketDataSample) and s.pid == child.pid
                ]
            child.stdin.write("bye\n")
            child.stdin.flush()
        finally:
            if peer is not None:
                peer.close()
            reap(child)
    native = [s for s in seen if s.payload.startswith(b"native")]
    python = [s for s in seen if s.payload == b"python"]
    assert len(native) == 3 and len(python) == 1
    assert all(s.tid != child.pid and s.flags & F_PY_NO_THREAD and not s.py_task for s in native)
    assert python[0].tid == child.pid and not python[0].flags & F_PY_NO_THREAD
    assert python[0].py_task == 0  # the main thread runs no coroutine


def _stream(port: int, out: dict[int, bytes]) -> None:
    """One streamed chat completion, read to its end; *out* gets it by the client's port."""
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": TOKENS,
            "zt_pace": {"first_ms": 5, "token_ms": 5},
        }
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
        out[conn.getsockname()[1]] = got


TOKENS = 13


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_each_request_to_a_uvicorn_server_streams_under_its_own_key(probe: SocketProbe) -> None:
    """The stack LLM servers run on (tests/harness/openai_server.py: an ASGI app under uvicorn
    with uvloop and httptools, whose transport writes from C): three streamed responses at
    once, their tokens interleaved in time; every write of one response carries one key, and
    the three differ."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.openai_server", "--port", str(port)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        probe.follow_pid(server.pid)
        assert probe.python is not None and server.pid in probe.python.known
        replies: dict[int, bytes] = {}
        clients = [threading.Thread(target=_stream, args=(port, replies)) for _ in range(3)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(30)
        assert len(replies) == 3 and all(b"[DONE]" in r for r in replies.values())
        writes: dict[int, list[SocketDataSample]] = {}
        deadline = time.monotonic() + 20
        while sum(any(b"[DONE]" in s.payload for s in w) for w in writes.values()) < 3:
            assert time.monotonic() < deadline, {fd: len(w) for fd, w in writes.items()}
            for sample in probe.poll(50):
                if (
                    isinstance(sample, SocketDataSample)
                    and sample.pid == server.pid
                    and sample.direction is Direction.EGRESS
                ):
                    writes.setdefault(sample.fd, []).append(sample)
    finally:
        server.terminate()
        reap(server)
    keys = {fd: {s.py_task for s in w} for fd, w in writes.items()}
    assert len(keys) == 3 and all(len(k) == 1 and 0 not in k for k in keys.values()), keys
    assert len(set.union(*keys.values())) == 3
    assert all(len(w) > TOKENS for w in writes.values())  # a write per token, and more
