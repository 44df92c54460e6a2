"""bcc shell around ``bpf/socket.c`` (+ ``bpf/tls.c``): socket bytes, TLS plaintext, connections.

Decoding lives in :mod:`.socket_decode`, endpoint lookup in :mod:`..proc_net`; this
module compiles, attaches, polls, resolves endpoints once per connection, applies the
user-space filters (port, non-TCP fds) and tears down. bcc is imported
lazily in :meth:`SocketProbe.attach`.

The event ring is read a batch per poll (:mod:`.socket_ring`: through its memory map where it
can be, else through libbpf).

Non-blocking connects: where the kernel allows (socket_kernel.set_state_cflags), a connect()
that returned -EINPROGRESS is followed to the established state and an ESTABLISHED sample comes
then, its time from the connect() call (socket.c "Non-blocking connects").

UDP: a UDP socket is tracked once it talks to DNS (port 53) or a ``ports`` port (socket.c
"Datagrams"); its CONNECT sample says ``dgram`` and carries the peer, its local end comes from
/proc/PID/net/udp (:mod:`.socket_udp`), and each datagram is one data sample.

TLS ciphertext: once a socket is seen under an SSL call, its syscall events are not
emitted (the plaintext comes from the SSL uprobes), only counted in
:attr:`SocketProbe.ciphertext_dropped`; with ``keep_ciphertext=True`` they are, marked
``ciphertext``, with no payload.

Asyncio task keys: egress calls of CPython processes carry the thread's task key (socket.c
"Asyncio task keys"); :mod:`.socket_python` keeps the walker's processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from zerotrace.cpu_slices import no_pause

from ..cgroup import Cgroup2, in_cgroup2
from ..errors import MalformedEvent, ProbeUnavailable
from ..proc_net import UNKNOWN, Endpoints, ProcNet
from ..python_procs import PythonProcess
from . import socket_table
from .bcc_loader import (
    AttachedProbe,
    annotated,
    bcc_for,
    compile_program,
    first_line,
    read_program,
    release,
    tell_python_walker,
    tell_thread_states,
)
from .event_layout import DEFAULT_PAYLOAD_MAX, F_PY_NO_THREAD, ConnKind, RawEvent
from .kernel_btf import offset_cflags
from .python_stack import PYTHON_STACK_FILE, THREAD_SELF_MEMBERS
from .socket_decode import (
    ConnSample,
    SocketDataSample,
    SocketSample,
    decode_socket_event,
)
from .socket_kernel import (
    address_cflags,
    port_filter_cflags,
    process_name_cflags,
    set_state_cflags,
    tcp_arrival_cflags,
    tcp_seq_cflags,
)
from .socket_python import PythonProcesses
from .socket_ring import EventRing
from .socket_udp import udp_socket
from .tls import attach_tls, find_libssl
from .tls_placement import UnplacedTls

__all__ = ["SocketProbe"]

PROGRAM_FILE: Final = "socket.c"
TLS_PROGRAM_FILE: Final = "tls.c"
EVENTS_MAP: Final = b"zt_socket_events"
STATS_MAP: Final = b"zt_socket_stats"
# Indexes into zt_socket_stats; mirror the ZT_STAT_* defines in bpf/socket.c.
STAT_LOST: Final = 0
STAT_INFLIGHT_FULL: Final = 1
STAT_SOCKETS_FULL: Final = 2
STAT_CONNS_SHED: Final = 3
STAT_CALLS_SHED: Final = 4
STAT_TLS_STALE: Final = 5
STAT_CONNS_RESUMED: Final = 6
STAT_CIPHERTEXT: Final = 7
STAT_PORT_FILTERED: Final = 8
STAT_MMSG_UNCOPIED: Final = 9
STAT_PY_TOO_DEEP: Final = 10
# UDP peers on this port are always tracked, and with --port it is always among the wanted
# ports (TCP too): DNS timings belong to every trace (socket.c "Datagrams").
DNS_PORT: Final = 53
# A shed connection is taken up again no sooner than this after its mark (socket.c
# "Shedding"): longer than the correlator's grace for the SHED record (CLOSE_GRACE_NS, 5 s;
# tests/unit/test_http_llm_step.py holds the two together).
RESUME_AFTER_S: Final = 10.0
FLOW_MAP: Final = b"zt_socket_flow"
PY_PROCS_MAP: Final = b"zt_py_procs"
PY_TSTATES_MAP: Final = b"zt_py_tstates"
# python_stack.h "Tasks made by tasks": the uretprobe that gives a context the key of the task
# that copied it, on the interpreter module (executable or libpython) of each CPython found.
EXECS_QUEUE: Final = b"zt_execs"
CONTEXT_COPY_SYMBOL: Final = b"PyContext_CopyCurrent"
CONTEXT_COPY_FN: Final = b"zt_py_context_copied"

_SYSCALLS: Final = (
    "read",
    "write",
    "readv",
    "writev",
    "recvfrom",
    "sendto",
    "recvmsg",
    "sendmsg",
    "sendmmsg",
    "recvmmsg",
    "connect",
    "accept",
    "accept4",
    "close",
    "socket",
)
# What the probe compares with a task's comm: 15 characters, nothing to escape in a C literal.
COMM_PREFIX: Final = re.compile(r"[A-Za-z0-9_.:/@+-]{1,15}")
_SWEEP_EVERY_S: Final = 10.0
# Records decoded between two pause points (about 0.3 ms of decoding at ~2.7 µs each).
_DECODE_PIECE: Final = 128


# The data calls' shared exit (bpf/socket.c, `zt_data_exit`): a program of its own, reached
# from the ten exit tracepoints by a tail call through this one-slot array.
DATA_EXIT_PROG: Final = b"zt_data_exit_tail"
DATA_EXIT_ARRAY: Final = b"zt_data_exit_prog"


def _link_data_exit(bpf: Any, bpf_class: Any) -> None:
    """Load the shared exit program and put it where the exit tracepoints tail-call it. Until
    this runs (the tracepoints are attached inside bcc's constructor), a data call's exit is
    not traced: the probe is still starting."""
    exit_prog = bpf.load_func(DATA_EXIT_PROG, bpf_class.TRACEPOINT)
    bpf[DATA_EXIT_ARRAY][ctypes.c_int(0)] = ctypes.c_int(exit_prog.fd)


def _forget_python(bpf: Any, pid: int) -> None:
    """Take *pid* out of the walker's map (it exited, exec'd, or its pid is another's)."""
    table = bpf[PY_PROCS_MAP]
    with contextlib.suppress(KeyError):
        del table[table.Key(pid)]


def _follow_contexts(bpf: Any, module: str, pid: int) -> str | None:
    """Attach the context-copy uretprobe to *module* (pid -1: every process mapping it); None
    when attached, else one line saying what is lost."""
    try:
        bpf.attach_uretprobe(
            name=module.encode(), sym=CONTEXT_COPY_SYMBOL, fn_name=CONTEXT_COPY_FN, pid=pid
        )
    except Exception as exc:
        return (
            f"uretprobe on {CONTEXT_COPY_SYMBOL.decode()} in {module} failed "
            f"({first_line(exc, 120)}): asyncio tasks made by tasks carry their own keys"
        )
    return None


def _unfollow_contexts(bpf: Any, module: str, pid: int) -> None:
    """Detach the uretprobe of one process that is gone. bcc finds the probe again by module
    and pid; where it cannot (the module is gone from the disk), the probe stays until the
    program closes: it fires for no process, as the pid it filtered on is gone."""
    with contextlib.suppress(Exception):
        bpf.detach_uretprobe(name=module.encode(), sym=CONTEXT_COPY_SYMBOL, pid=pid)


def context_probe_pid(pid_filter: int | None, follow: bool, pid: int) -> int:
    """Which processes the context-copy uretprobe of the CPython *pid* is installed in: the
    one process asked for; that process alone when only followed processes are observed (a
    uretprobe costs every process it is installed in a trap per copy, about 2 us, and a node
    runs many Python programs nobody asked about); every process mapping the interpreter
    module (-1) when the whole host is observed."""
    if pid_filter:
        return pid_filter
    return pid if follow else -1


def _thread_self_cflags() -> tuple[list[str], str | None]:
    """The walker's FS base offset (python_stack.h: how it finds a CPython 3.10 thread)."""
    flags, why = offset_cflags(THREAD_SELF_MEMBERS)
    return flags, (f"CPython 3.10 calls without asyncio task keys: {why}" if why else None)


def _possible_cpus() -> int:
    """Highest possible CPU id + 1, from /sys/devices/system/cpu/possible ("0-63")."""
    try:
        text = Path("/sys/devices/system/cpu/possible").read_text().strip()
        return max(int(part.split("-")[-1]) for part in text.split(",")) + 1
    except (OSError, ValueError):
        return os.cpu_count() or 1


def check_payload_max(payload_max: int) -> None:
    """Bytes copied per call must be a power of two (the BPF copy is masked) that fits the
    per-CPU event buffer: 64..32768. Raises ValueError with one line."""
    if payload_max < 64 or payload_max > 32768 or payload_max & (payload_max - 1):
        raise ValueError(f"payload_max must be a power of two in 64..32768, got {payload_max}")


class SocketProbe(AttachedProbe):
    """Trace TCP socket I/O (syscalls, and libssl plaintext) and DNS-bound UDP datagrams, with
    payload prefixes.

    Usage mirrors :class:`.fileio.FileOpenProbe`::

        with SocketProbe(Path("bpf")) as probe:
            for sample in probe.poll(100):
                endpoints = probe.endpoints(sample)

    Filters: *pid_filter*, *comm_prefix* and *cgroup* (that cgroup and those below it) are
    compiled in (applied
    where a socket becomes tracked); *ports* is applied in the kernel where it can be and in
    :meth:`poll` after /proc resolution (a connection whose endpoints are unknown is kept);
    with *ports*, 53 is always among them (DNS). The collector's own
    pid (*self_pid*) is never traced.
    """

    program_file = PROGRAM_FILE

    def __init__(
        self,
        bpf_dir: Path,
        pid_filter: int = 0,
        *,
        self_pid: int | None = None,
        comm_prefix: str = "",
        cgroup: Cgroup2 | None = None,
        ports: Iterable[int] = (),
        payload_max: int = DEFAULT_PAYLOAD_MAX,
        ringbuf_pages: int = 4096,
        tls: bool = True,
        libssl: Path | None = None,
        keep_ciphertext: bool = False,
        seed_from_proc: bool = True,
        proc_net: ProcNet | None = None,
        follow: bool = False,
        resume_after_s: float = RESUME_AFTER_S,
    ) -> None:
        if pid_filter < 0:
            raise ValueError("pid_filter must be >= 0")
        if comm_prefix and not COMM_PREFIX.fullmatch(comm_prefix):
            raise ValueError(f"comm_prefix must be 1-15 plain characters, got {comm_prefix!r}")
        check_payload_max(payload_max)
        if ringbuf_pages <= 0 or ringbuf_pages & (ringbuf_pages - 1):
            raise ValueError(f"ringbuf_pages must be a power of two, got {ringbuf_pages}")
        self.bpf_dir = Path(bpf_dir).resolve()
        self.pid_filter = pid_filter
        self.self_pid = os.getpid() if self_pid is None else self_pid
        self.comm_prefix = comm_prefix
        self.cgroup = cgroup
        # With --port, DNS (port 53) is always wanted too ("Datagrams" in socket.c).
        self.ports = frozenset(ports) | {DNS_PORT} if ports else frozenset()
        self.payload_max = payload_max
        self.ringbuf_pages = ringbuf_pages
        self.resume_after_s = resume_after_s
        self.want_tls = tls
        self.libssl = libssl
        self.keep_ciphertext = keep_ciphertext
        self.seed_from_proc = seed_from_proc
        # follow=True: trace only the processes given to follow_pid() and what they fork.
        self.follow = follow
        self._followed: set[int] = set()
        self.proc = proc_net if proc_net is not None else ProcNet()
        self.tls_active = False
        self.notes: list[str] = []
        """One line per feature that is off (e.g. no libssl -> TLS capture off)."""
        self.malformed = 0
        self.last_malformed = ""
        """Why the newest malformed event was refused (for diagnostics)."""
        self.truncated = 0
        """Data samples whose payload holds fewer bytes than the call moved."""
        self.filtered = 0
        """Samples dropped in user space: port filter, or the fd turned out not TCP."""
        self._unplaced = UnplacedTls()
        self.seeded = 0
        self.exit_closes = 0
        """CLOSE events made for connections of processes that exited."""
        """(pid, fd) entries written from /proc at attach."""
        self._bpf: Any = None
        self._ring: EventRing | None = None
        self._pending: list[SocketSample] = []
        self.python: PythonProcesses | None = None
        """The CPython processes whose egress calls get task keys (after attach)."""
        # True when the last poll left events in the ring (it took POLL_BYTES): the reader is
        # behind, and the ring may fill (then events are lost).
        self.backlog = False
        # Called between pieces of a poll's decoding (zerotrace.cpu_slices): a loop that paces
        # its work sets it.
        self.pause: Callable[[], None] = no_pause
        self._corrupt_seen = 0
        self._lost_at_close = 0
        self._shed_at_close = (0, 0, 0)
        self._ciphertext_at_close = 0
        self._port_filtered_at_close = 0
        self._last_sweep = 0.0

    # -- program -------------------------------------------------------------

    def _tls_enabled(self) -> bool:
        return self.want_tls and self.libssl is not None

    def cflags(self) -> list[str]:
        flags = [
            f"-I{self.bpf_dir}",
            f"-DZT_FILTER_PID={self.pid_filter}",
            f"-DZT_FOLLOW={int(self.follow)}",
            f"-DZT_SELF_PID={self.self_pid}",
            f"-DZT_FILTER_CGROUP={self.cgroup.id if self.cgroup else 0}",
            f"-DZT_FILTER_CGROUP_LEVEL={self.cgroup.level if self.cgroup else 0}",
            f"-DZT_PAYLOAD_MAX={self.payload_max}",
            f"-DZT_RINGBUF_PAGES={self.ringbuf_pages}",
            f"-DZT_RESUME_AFTER_NS={int(self.resume_after_s * 1e9)}ULL",
            f"-DZT_NR_CPUS={_possible_cpus()}",
            f"-DZT_CAPTURE_TLS={int(self._tls_enabled())}",
            f"-DZT_KEEP_CIPHERTEXT={int(self.keep_ciphertext)}",
            "-DZT_PY_TASK_KEYS=1",  # python_stack.h's zt_python_task ("Asyncio task keys")
        ]
        if self.comm_prefix:
            flags.append(f'-DZT_FILTER_COMM="{self.comm_prefix}"')
        if self.ports:
            # UDP peers: judged by the destination address, no kernel offsets needed.
            flags.append(f"-DZT_DGRAM_PORTS={','.join(str(p) for p in sorted(self.ports))}")
        return flags + [flag for flags, _ in self._kernel_offsets() for flag in flags]

    def _kernel_offsets(self) -> list[tuple[list[str], str | None]]:
        """(flags, why not) for each part that needs something of this kernel: offsets of
        its structs (from BTF), a tracepoint."""
        return [
            tcp_seq_cflags(),
            address_cflags(),
            tcp_arrival_cflags(),
            _thread_self_cflags(),
            set_state_cflags(),
            port_filter_cflags(self.ports),
            *([process_name_cflags()] if self.comm_prefix else []),
        ]

    def _source(self) -> str:
        # tls.c is compiled in the same unit as socket.c (shared maps; see socket.c).
        tls = (TLS_PROGRAM_FILE,) if self._tls_enabled() else ()
        # The frame walker first, in the same text (bcc rewrites map calls only there).
        return read_program(self.bpf_dir, PYTHON_STACK_FILE, self.program_file, *tls)

    def program_text(self) -> str:
        """The exact C text handed to bcc, preceded by a comment with its cflags."""
        if self.want_tls and self.libssl is None:
            self.libssl = find_libssl()
        return annotated(self.cflags(), self._source())

    # -- lifecycle -----------------------------------------------------------

    def attach(self) -> None:
        """Compile and attach; raise :class:`ProbeUnavailable` if syscall capture cannot run.

        A missing libssl or a failed uprobe only turns TLS capture off (see :attr:`notes`).
        """
        if self._bpf is not None:
            return
        bpf_class = bcc_for(
            "socket probe",
            [
                ("syscalls", f"sys_{edge}_{name}")
                for name in _SYSCALLS
                for edge in ("enter", "exit")
            ],
        )
        self.notes = []
        self.notes += [why for _, why in self._kernel_offsets() if why]
        if self.want_tls and self.libssl is None:
            self.libssl = find_libssl()
            if self.libssl is None:
                self.notes.append("libssl not found: TLS capture off, syscall capture on")
        bpf = compile_program(bpf_class, self._source(), self.cflags(), self.source_path)
        try:
            _link_data_exit(bpf, bpf_class)
            # A new program's ring: its flow counts start at 0.
            self._ring = EventRing(bpf, bpf[EVENTS_MAP], bpf[FLOW_MAP], self.notes)
            self._corrupt_seen = 0
        except Exception as exc:
            release(bpf)
            raise ProbeUnavailable(f"opening {EVENTS_MAP.decode()} failed: {exc}") from exc
        self._bpf = bpf
        # (module, pid) of each context-copy uretprobe tried (context_probe_pid)
        self._context_probes: set[tuple[str, int]] = set()
        self.python = PythonProcesses(
            lambda proc: self._tell_python(bpf, proc),
            lambda pid: self._forget_python(bpf, pid),
            lambda states: tell_thread_states(bpf[PY_TSTATES_MAP], states),
        )
        self.tls_active = self._tls_enabled() and self._attach_tls(bpf)
        if self.seed_from_proc:
            self._seed()

    def _tell_python(self, bpf: Any, proc: PythonProcess) -> None:
        tell_python_walker(bpf[PY_PROCS_MAP], proc)
        probe = (proc.module, context_probe_pid(self.pid_filter, self.follow, proc.pid))
        if probe not in self._context_probes:
            self._context_probes.add(probe)  # tried once, whatever comes of it
            failed = _follow_contexts(bpf, *probe)
            if failed is not None and failed not in self.notes:
                self.notes.append(failed)

    @property
    def context_probes(self) -> frozenset[tuple[str, int]]:
        """(interpreter module, pid or -1) of each context-copy uretprobe installed."""
        return frozenset(self._context_probes)

    def _forget_python(self, bpf: Any, pid: int) -> None:
        _forget_python(bpf, pid)
        if not self.follow or self.pid_filter:
            return  # one probe for the host, or for the one process: kept to the end
        for probe in [p for p in self._context_probes if p[1] == pid]:
            self._context_probes.discard(probe)
            _unfollow_contexts(bpf, *probe)

    def _attach_tls(self, bpf: Any) -> bool:
        assert self.libssl is not None
        failed = attach_tls(bpf, self.libssl, self.pid_filter or -1)
        if failed is not None:
            self.notes.append(failed)
        return failed is None

    def close(self) -> None:
        """Detach and free the BPF program. Safe to call more than once."""
        if self._bpf is None:
            return
        self._lost_at_close = self.lost
        self._shed_at_close = (self.conns_shed, self.calls_shed, self.conns_resumed)
        self._ciphertext_at_close = self.ciphertext_dropped
        self._port_filtered_at_close = self.port_filtered
        bpf, self._bpf = self._bpf, None
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        release(bpf)

    # -- tracked sockets -----------------------------------------------------

    def _pid_wanted(self, pid: int) -> bool:
        if pid == self.self_pid or (self.pid_filter and pid != self.pid_filter):
            return False
        if self.follow and pid not in self._followed:
            return False
        if self.comm_prefix:
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().rstrip("\n")
            except OSError:
                return False
            if not comm.startswith(self.comm_prefix):
                return False
        return self.cgroup is None or in_cgroup2(pid, self.cgroup)

    def follow_pid(self, pid: int) -> None:
        """Trace `pid` and, from now on, every process it forks (needs follow=True). Its
        TCP sockets that exist already are tracked from /proc."""
        if self._bpf is None or not self.follow:
            raise RuntimeError("follow_pid() needs follow=True and attach() first")
        table = self._bpf[b"zt_follow"]
        table[table.Key(pid)] = table.Leaf(1)
        self._followed.add(pid)
        if self.python is not None:
            self.python.saw(pid)
        if self.seed_from_proc:
            self._seed([pid])

    def track(self, pid: int, fd: int, family: int = 0) -> int:
        """Start tracking (pid, fd) -- a connection opened before attach. Returns its
        conn_start_ns (CLOCK_MONOTONIC now), which names the connection from here on."""
        if self._bpf is None:
            raise RuntimeError("track() before attach()")
        return socket_table.track(self._bpf, pid, fd, family)

    def untrack(self, pid: int, fd: int) -> None:
        if self._bpf is not None:
            socket_table.untrack(self._bpf, pid, fd)

    def _seed(self, only: list[int] | None = None) -> None:
        """Track the established TCP sockets and note the TCP listeners that exist now."""
        pids = only or (
            [self.pid_filter]
            if self.pid_filter
            else [int(name) for name in os.listdir("/proc") if name.isdigit()]
        )
        for pid in pids:
            if not self._pid_wanted(pid):
                continue
            connected = self.proc.tcp_fds(pid)
            listeners = self.proc.tcp_fds(pid, listening=True)
            if (connected or listeners) and self.python is not None:
                self.python.saw(pid)  # a server's writes get task keys from its first request
            for fd, sock in connected:
                if self.ports and not self._on_wanted_port(sock.endpoints):
                    continue
                family = socket_table.family_of(sock.endpoints.local_addr)
                conn = self.track(pid, fd, family)
                self.proc.remember(pid, fd, conn, sock.endpoints)
                self.seeded += 1
            for fd, sock in listeners:
                family = socket_table.family_of(sock.endpoints.local_addr)
                socket_table.note_listener(self._bpf, pid, fd, family)

    def sweep(self) -> list[ConnSample]:
        """Untrack sockets of processes that exited (socket_table.sweep): a CLOSE for each of
        their connections that this probe had resolved."""
        if self._bpf is None:
            return []
        closed = socket_table.sweep(self._bpf, lambda pid: Path(f"/proc/{pid}").exists())
        self.exit_closes += len(closed)
        if self.python is not None:
            self.python.sweep()
        return [c for c in closed if self.proc.cached(c.pid, c.fd, c.conn_start_ns) is not None]

    # -- events --------------------------------------------------------------

    def _take(self, records: Sequence[RawEvent]) -> None:
        """Decode each record and keep those that pass the filters. The hot loop: the
        callables it calls are bound once."""
        keep, pending, pause = self._keep, self._pending, self.pause
        for first in range(0, len(records), _DECODE_PIECE):
            for record in records[first : first + _DECODE_PIECE]:
                try:
                    sample = decode_socket_event(record)
                except MalformedEvent as exc:
                    self.malformed += 1
                    self.last_malformed = str(exc)
                    continue
                if keep(sample):
                    pending.append(sample)
            pause()

    def poll(self, timeout_ms: int) -> list[SocketSample]:
        """Wait up to *timeout_ms* (-1 = forever); return the samples that pass the filters.

        Resolves each new connection's endpoints in /proc right away (while it is
        likely still open); :meth:`endpoints` then answers from the cache.
        """
        if self._bpf is None:
            raise RuntimeError("poll() before attach()")
        assert self._ring is not None
        ring = self._ring
        self._take(ring.take(timeout_ms))
        self.backlog = ring.backlog
        if ring.corrupt > self._corrupt_seen:
            self.malformed += ring.corrupt - self._corrupt_seen
            self.last_malformed = "ring record longer than the ring holds: the rest skipped"
            self._corrupt_seen = ring.corrupt
        out, self._pending = self._pending, []
        if self.python is not None:
            if self.follow:
                self._take_execs(self.python)
            for pid in {s.pid for s in out}:
                self.python.saw(pid)
        now = time.monotonic()
        if len(self._unplaced):
            self._unplaced.expire(now)
        if now - self._last_sweep > _SWEEP_EVERY_S:
            self._last_sweep = now
            out += self.sweep()
        return out

    def _take_execs(self, python: PythonProcesses) -> None:
        """The followed processes that exec'd since the last poll (bpf/socket.c zt_execs)."""
        queue = self._bpf[EXECS_QUEUE]
        while True:
            try:
                pid = queue.pop().value
            except KeyError:  # empty
                break
            python.started(pid)
        python.watch()

    def _keep(self, sample: SocketSample) -> bool:
        if isinstance(sample, SocketDataSample):
            if sample.truncated:
                self.truncated += 1
            if sample.flags & F_PY_NO_THREAD and self.python is not None:
                self.python.no_thread(sample.pid)
        if sample.fd < 0:
            # A TLS call with no socket yet: its process was chosen in the kernel (pid, name,
            # cgroup); a port filter must wait until it is placed (tls_placement).
            if not self.ports or not isinstance(sample, SocketDataSample):
                return True
            self._unplaced.hold(sample, time.monotonic())
            return False
        if isinstance(sample, ConnSample) and sample.kind is ConnKind.TLS_BOUND:
            # Not a connection event: places the calls held for that SSL* (in the ring it
            # follows them and precedes any later call on the socket, so order holds).
            placed = self._unplaced.bound(sample.pid, sample.ret, sample.fd, sample.conn_start_ns)
            self._pending += [s for s in placed if self._wanted_socket(s)]
            return False
        return self._wanted_socket(sample)

    def _wanted_socket(self, sample: SocketSample) -> bool:
        """A sample on a known socket: resolved, and through the port filter."""
        endpoints = self.proc.cached(sample.pid, sample.fd, sample.conn_start_ns)
        if endpoints is None:
            endpoints = self._resolve_new(sample)
            if endpoints is None:
                self.filtered += 1
                return False
        if self.ports and not self._on_wanted_port(endpoints):
            self.filtered += 1
            if not (isinstance(sample, ConnSample) and sample.kind is ConnKind.CLOSE):
                self.untrack(sample.pid, sample.fd)
            return False
        return True

    def _on_wanted_port(self, endpoints: Endpoints) -> bool:
        """For --port: either end on a wanted port. A connection /proc could not resolve
        (closed at once) passes: the kernel tracked it only if its ports matched (where it
        has the offsets to tell; else the probe's notes say so)."""
        local, remote = endpoints.local_port, endpoints.remote_port
        return (not local and not remote) or local in self.ports or remote in self.ports

    def _resolve_new(self, sample: SocketSample) -> Endpoints | None:
        """First sight of a connection: endpoints from /proc, or None if the fd is neither TCP
        nor UDP."""
        pid, fd, conn = sample.pid, sample.fd, sample.conn_start_ns
        if isinstance(sample, ConnSample) and sample.dgram:
            return self._resolve_dgram(sample)
        if isinstance(sample, ConnSample) and sample.local_end and sample.peer_end:
            # Read by the kernel as connect or accept returned (socket.c zt_sock_addrs): true
            # even when the connection has closed by now, and no /proc read.
            endpoints = Endpoints(*sample.local_end, *sample.peer_end)
            self.proc.remember(pid, fd, conn, endpoints)
            return endpoints
        closed = isinstance(sample, ConnSample) and sample.kind is ConnKind.CLOSE
        if (
            not closed
            and self._bpf is not None
            and not socket_table.holds(self._bpf, pid, fd, conn)
        ):
            # Read late: the connection closed, and its fd may already be another socket's
            # (one not yet connected is in no TCP table and was taken for AF_UNIX: this
            # connection went unread, and untracking the fd stopped the next one). Named as a
            # closed one is.
            closed = True
        sock = None if closed else self.proc.lookup(pid, fd)
        if sock is None and not closed:
            sock = udp_socket(self.proc, pid, fd)
        if sock is not None:
            endpoints = sock.endpoints
            if not endpoints.remote_port and isinstance(sample, ConnSample) and sample.remote:
                # Still connecting: the far end is the address connect() was given.
                endpoints = Endpoints(
                    endpoints.local_addr, endpoints.local_port, sample.remote[0], sample.remote[1]
                )
        elif not closed and self.proc.socket_inode(pid, fd) is not None:
            # A live socket that is in neither TCP table: AF_UNIX and the like.
            self.untrack(pid, fd)
            self.proc.remember(pid, fd, conn, UNKNOWN)
            return None
        elif isinstance(sample, ConnSample) and sample.remote is not None:
            endpoints = Endpoints("", 0, sample.remote[0], sample.remote[1])
        else:
            endpoints = UNKNOWN
        self.proc.remember(pid, fd, conn, endpoints)
        return endpoints

    def _resolve_dgram(self, sample: ConnSample) -> Endpoints:
        """A UDP socket the kernel tracked (its peer's port was wanted): the peer is the address
        its CONNECT carries; the local end is read from /proc only while the fd still looks
        like that socket. A stub resolver closes its socket and opens the next at the same fd
        (with an AF_UNIX one to nscd in between) sooner than this runs: what the fd is now must
        neither name this flow's local end nor untrack it."""
        remote = sample.remote or ("", 0)
        endpoints = Endpoints("", 0, remote[0], remote[1])
        if sample.kind is ConnKind.CONNECT:
            sock = udp_socket(self.proc, sample.pid, sample.fd)
            if sock is not None and sock.endpoints.remote_port in (0, remote[1]):
                local = sock.endpoints
                endpoints = Endpoints(local.local_addr, local.local_port, remote[0], remote[1])
        self.proc.remember(sample.pid, sample.fd, sample.conn_start_ns, endpoints)
        return endpoints

    def endpoints(self, sample: SocketSample) -> Endpoints:
        """The connection's endpoints as resolved in :meth:`poll` (UNKNOWN if never)."""
        found = self.proc.cached(sample.pid, sample.fd, sample.conn_start_ns)
        return found if found is not None else UNKNOWN

    # -- counters ------------------------------------------------------------

    def _stat(self, index: int) -> int:
        if self._bpf is None:
            return 0
        table = self._bpf[STATS_MAP]
        return int(table[table.Key(index)].value)

    @property
    def lost(self) -> int:
        """Events dropped in the kernel: ring buffer full, or per-thread state map full."""
        if self._bpf is None:
            return self._lost_at_close
        return self._stat(STAT_LOST) + self._stat(STAT_INFLIGHT_FULL)

    @property
    def conns_shed(self) -> int:
        """Connections shed, whole from the mark on, because this reader was too far behind
        (socket.c "Shedding"); never a random event of a kept one."""
        return self._shed_at_close[0] if self._bpf is None else self._stat(STAT_CONNS_SHED)

    @property
    def calls_shed(self) -> int:
        """Data calls of shed connections, counted instead of emitted."""
        return self._shed_at_close[1] if self._bpf is None else self._stat(STAT_CALLS_SHED)

    @property
    def conns_resumed(self) -> int:
        """Shed connections taken up again once this reader had caught up (socket.c
        "Shedding"); their exchange in progress then is skipped, not reported in part."""
        return self._shed_at_close[2] if self._bpf is None else self._stat(STAT_CONNS_RESUMED)

    @property
    def ciphertext_dropped(self) -> int:
        """Syscalls on TLS sockets not emitted, their plaintext being seen by the SSL uprobes
        (filtered in the kernel; 0 with keep_ciphertext)."""
        return self._ciphertext_at_close if self._bpf is None else self._stat(STAT_CIPHERTEXT)

    @property
    def port_filtered(self) -> int:
        """Connections never tracked: neither end on a --port port (filtered in the kernel)."""
        if self._bpf is None:
            return self._port_filtered_at_close
        return self._stat(STAT_PORT_FILTERED)

    @property
    def mmsg_uncopied(self) -> int:
        """Datagrams of sendmmsg/recvmmsg calls past the first ZT_MAX_MMSG: not emitted."""
        return self._stat(STAT_MMSG_UNCOPIED)

    @property
    def py_too_deep(self) -> int:
        """Egress calls of Python threads without a task key: their frame chain was longer
        than the walker follows (ZT_PY_TASK_DEPTH)."""
        return self._stat(STAT_PY_TOO_DEEP)

    @property
    def unplaced(self) -> int:
        """TLS calls dropped because a port filter could not judge them: their SSL* was
        never bound to a socket within tls_placement.HOLD_S."""
        return self._unplaced.unplaced

    @property
    def tls_rebound(self) -> int:
        """SSL objects found bound to a socket that had closed (the allocator reuses a freed
        SSL*'s address for the next connection): bound again to their own (tls.c)."""
        return self._stat(STAT_TLS_STALE)

    @property
    def sockets_full(self) -> int:
        """Connections not tracked because zt_socket_fds was full."""
        return self._stat(STAT_SOCKETS_FULL)
