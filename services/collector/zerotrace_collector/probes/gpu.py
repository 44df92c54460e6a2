"""bcc shell around ``bpf/gpu_calls.c``: CUDA allocation, free and launch calls with stacks.

Decoding lives in :mod:`.gpu_decode`, finding libraries in :mod:`..cuda_libraries`. This
module compiles, attaches uprobes to CUDA library files, polls, resumes processes stopped
at a library open, reads user stacks, and tears down. bcc is imported in :meth:`attach`.

Which files are probed: at :meth:`GpuProbe.attach`, every ``libcudart*`` / ``libcuda.*``
mapped by a wanted process (from /proc), plus *libraries* given explicitly; afterwards,
every such file a wanted process opens (the kernel stops it until the uprobes are in: see
the header of ``bpf/gpu_calls.c``). Uprobes are inode-wide: a file attached once is probed
in every process, so each file is attached once, keyed by (device, inode).

On-GPU kernel time is not measured (that needs CUPTI and a GPU); a launch is an event with
its calling stack and its host-side call duration, and profiles count launches per stack.

Bad input never raises out of :meth:`poll`; it is counted (:meth:`counters`) and, for
library trouble, described in one line in :attr:`GpuProbe.notes`.

Python frames: a CPython process is made known to the BPF frame walker (``zt_py_procs``)
when it is seen with a CUDA library: at attach for those mapping one already, and at the
library open for the others, while the process is stopped, so its very first call carries
its Python frames. :attr:`GpuProbe.python` keeps what was learnt, for naming the frames.
A process that opens an already-known library path is not stopped: it is learnt when
followed (:meth:`GpuProbe.follow_pid`) or by the feed when its first calls arrive, and
calls made before that carry native frames only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from ..cuda_libraries import cuda_libraries_in_maps, exported_functions, probed_symbols
from ..errors import MalformedEvent, ProbeUnavailable
from ..python_procs import PythonProcess, inspect
from . import stop_guard
from .bcc_loader import (
    AttachedProbe,
    bcc_for,
    compile_program,
    first_line,
    read_program,
    release,
    tell_python_walker,
    tell_thread_states,
)
from .event_layout import DEFAULT_PY_DEPTH
from .gpu_decode import (
    GPU_APIS,
    GpuCallSample,
    GpuLibSample,
    decode_gpu_event,
)
from .python_stack import PYTHON_STACK_FILE, python_stack_cflags

__all__ = ["GpuProbe"]

PROGRAM_FILE: Final = "gpu_calls.c"
EVENTS_MAP: Final = b"zt_gpu_events"
# Indexes into zt_gpu_stats; mirror the ZT_STAT_* defines in bpf/gpu_calls.c.
_STATS: Final = ("lost", "inflight_full", "nested", "stops")
_TRACEPOINTS: Final = [
    ("syscalls", f"sys_{edge}_{call}")
    for call in ("openat", "openat2")
    for edge in ("enter", "exit")
]


class GpuProbe(AttachedProbe):
    """Trace CUDA runtime/driver allocation, free and launch calls.

    Usage::

        with GpuProbe(Path("bpf")) as probe:
            for call in probe.poll(100):
                addresses = probe.user_stack(call)   # leaf first

    *pid_filter* (a tgid) or *follow* (processes given to :meth:`follow_pid` and their
    children) restrict what is traced; the collector's own pid (*self_pid*) never is.
    *stop_on_open* False turns the late-load stop off: calls made right after a dlopen are
    then missed until the library is attached from a later poll.
    """

    program_file = PROGRAM_FILE

    def __init__(
        self,
        bpf_dir: Path,
        pid_filter: int = 0,
        *,
        self_pid: int | None = None,
        follow: bool = False,
        stop_on_open: bool = True,
        libraries: Iterable[Path] = (),
        scan_proc: bool = True,
        ringbuf_pages: int = 256,
        stack_entries: int = 16384,
        py_depth: int = DEFAULT_PY_DEPTH,
    ) -> None:
        if pid_filter < 0:
            raise ValueError("pid_filter must be >= 0")
        if ringbuf_pages <= 0 or ringbuf_pages & (ringbuf_pages - 1):
            raise ValueError(f"ringbuf_pages must be a power of two, got {ringbuf_pages}")
        self.bpf_dir = Path(bpf_dir).resolve()
        self.pid_filter = pid_filter
        self.self_pid = os.getpid() if self_pid is None else self_pid
        self.follow = follow
        self.stop_on_open = stop_on_open
        self.libraries = [Path(p) for p in libraries]
        self.scan_proc = scan_proc
        self.ringbuf_pages = ringbuf_pages
        self.stack_entries = stack_entries
        if not 1 <= py_depth <= 128:
            raise ValueError(f"py_depth must be 1..128, got {py_depth}")
        self.py_depth = py_depth
        self.python: dict[int, PythonProcess] = {}
        """The CPython processes whose frames the walker reads, by pid."""
        self.notes: list[str] = []
        """One line per library that could not be probed, and why."""
        self.attached_files: dict[tuple[int, int], str] = {}
        """(st_dev, st_ino) -> the path the uprobes were attached through."""
        self._counts: Counter[str] = Counter()
        self._bpf: Any = None
        self._calls: list[GpuCallSample] = []
        self._libs: list[GpuLibSample] = []
        # Continues what the kernel stopped for us if this process dies first (stop_guard).
        self._guard: subprocess.Popen[bytes] | None = None

    # -- program -------------------------------------------------------------

    def cflags(self) -> list[str]:
        return [
            f"-I{self.bpf_dir}",
            f"-DZT_FILTER_PID={self.pid_filter}",
            f"-DZT_FOLLOW={int(self.follow)}",
            f"-DZT_SELF_PID={self.self_pid}",
            f"-DZT_STOP_ON_OPEN={int(self.stop_on_open)}",
            f"-DZT_RINGBUF_PAGES={self.ringbuf_pages}",
            f"-DZT_STACKS={self.stack_entries}",
            f"-DZT_PY_MAX_DEPTH={self.py_depth}",
            *python_stack_cflags()[0],
        ]

    def _source(self) -> str:
        # One text: bcc rewrites map calls only in the main text (see python_stack.h).
        return read_program(self.bpf_dir, PYTHON_STACK_FILE, self.program_file)

    # -- lifecycle -----------------------------------------------------------

    def attach(self) -> None:
        """Compile, attach the open tracepoints, and probe the CUDA libraries there are now.

        Raises :class:`ProbeUnavailable` when the program cannot run; a library that
        cannot be probed is only counted and noted."""
        if self._bpf is not None:
            return
        bpf_class = bcc_for("gpu probe", _TRACEPOINTS)
        bpf = compile_program(bpf_class, self._source(), self.cflags(), self.source_path)
        try:
            bpf[EVENTS_MAP].open_ring_buffer(self._on_ring_event)
            # bcc loads (verifies) a uprobe program at its first attach: done here, it is
            # not paid while a process waits stopped at its library open (~8 ms each).
            for api in GPU_APIS:
                for edge in (b"zt_gpu_enter_", b"zt_gpu_return_"):
                    bpf.load_func(edge + api.symbol.encode(), bpf_class.KPROBE)
        except Exception as exc:
            release(bpf)
            raise ProbeUnavailable(
                f"loading the uprobe programs failed: {first_line(exc)}"
            ) from exc
        self._bpf = bpf
        if self.stop_on_open:
            self._guard = stop_guard.start()
        # Explicit libraries are not marked known: which cgroups will open them is unknown,
        # so each cgroup's first opener is stopped once (briefly: the file is attached).
        for path in self.libraries:
            self.attach_library(str(path))
        if self.scan_proc:
            pids = [self.pid_filter] if self.pid_filter else _all_pids()
            for pid in pids:
                if pid != self.self_pid and not self.follow:
                    self.attach_mapped(pid)

    def attach_mapped(self, pid: int) -> int:
        """Probe the CUDA libraries *pid* has mapped now; returns how many are settled
        (see :meth:`attach_library`)."""
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            return 0  # gone, or a kernel thread: nothing mapped
        settled = 0
        libs = cuda_libraries_in_maps(maps)
        if libs:
            self.learn_python(pid)
        cgroup = _cgroup_v2_id(pid)
        for lib in libs:
            if lib.deleted:
                self._note(
                    "deleted", f"{lib.path} (pid {pid}) was deleted after mapping: not probed"
                )
                continue
            # Through the process's root, so a library in a container's file system is found.
            if self.attach_library(f"/proc/{pid}/root{lib.path}", lib.path):
                if cgroup is not None:
                    self._mark_known(lib.path, cgroup)
                settled += 1
        return settled

    def attach_library(self, path: str, shown: str | None = None) -> bool:
        """Attach the probed symbols *path* exports. True when the file is settled: probed
        (now or before) or known to export none of them; False when it could not be read
        or attached (noted), so a later open tries again. *shown* is the name used in
        notes (the path as the process sees it)."""
        assert self._bpf is not None, "attach() first"
        shown = shown or path
        try:
            st = os.stat(path)
            key = (st.st_dev, st.st_ino)
            if key in self.attached_files:
                return True
            symbols = probed_symbols(exported_functions(path))
        except (OSError, ValueError) as exc:
            self._note("unreadable", f"{shown}: cannot read ({first_line(exc, 120)}): not probed")
            return False
        if not symbols:
            self._note("no_symbols", f"{shown} exports none of the probed CUDA APIs: not probed")
            self.attached_files[key] = path  # do not look at it again
            return True
        lib = path.encode()
        try:
            for sym in symbols:
                name = sym.encode()
                self._bpf.attach_uprobe(name=lib, sym=name, fn_name=b"zt_gpu_enter_" + name, pid=-1)
                self._bpf.attach_uretprobe(
                    name=lib, sym=name, fn_name=b"zt_gpu_return_" + name, pid=-1
                )
        except Exception as exc:
            for sym in symbols:
                for detach in (self._bpf.detach_uprobe, self._bpf.detach_uretprobe):
                    with contextlib.suppress(Exception):
                        detach(name=lib, sym=sym.encode(), pid=-1)
            self._note("attach_failed", f"uprobe on {shown} failed ({first_line(exc, 120)})")
            return False
        self.attached_files[key] = path
        self._counts["libraries"] += 1
        return True

    def learn_python(self, pid: int) -> PythonProcess | None:
        """Let the BPF walker read *pid*'s Python frames, when it is a supported CPython.
        Looked at again when the pid's start time changed (a reused pid)."""
        assert self._bpf is not None, "attach() first"
        found = inspect(pid)
        if found is None:
            self.forget_python(pid)
            return None
        known = self.python.get(pid)
        if known is None or known.start_time != found.start_time:
            tell_python_walker(self._bpf[b"zt_py_procs"], found)
            self.python[pid] = found
            self._counts["python_processes"] += 1
        return self.python[pid]

    def add_thread_states(self, states: dict[int, int]) -> None:
        """See :func:`~.bcc_loader.tell_thread_states`."""
        assert self._bpf is not None, "attach() first"
        tell_thread_states(self._bpf[b"zt_py_tstates"], states)

    def forget_python(self, pid: int) -> None:
        """Drop *pid* from the walker (it exited, or is no longer that interpreter)."""
        if self.python.pop(pid, None) is not None and self._bpf is not None:
            table = self._bpf[b"zt_py_procs"]
            with contextlib.suppress(KeyError):
                del table[table.Key(pid)]

    def _note(self, counter: str, line: str) -> None:
        self._counts[counter] += 1
        if len(self.notes) < 100:
            self.notes.append(line)

    def follow_pid(self, pid: int) -> None:
        """Trace *pid* and what it forks from now on (needs follow=True), probe the CUDA
        libraries it has mapped already, and read its Python frames if it is CPython."""
        if self._bpf is None or not self.follow:
            raise RuntimeError("follow_pid() needs follow=True and attach() first")
        table = self._bpf[b"zt_gpu_follow"]
        table[table.Key(pid)] = table.Leaf(1)
        self.learn_python(pid)
        if self.scan_proc:
            self.attach_mapped(pid)

    def close(self) -> None:
        """Resume any process still stopped for us, detach, free. Safe to call twice."""
        if self._bpf is None:
            return
        with contextlib.suppress(Exception):
            self._bpf.ring_buffer_consume()
        for lib in self._libs:
            if lib.stopped:
                self._resume(lib.pid)
        if self._guard is not None:
            stop_guard.stop(self._guard)
            self._guard = None
        self._libs.clear()
        self._final_stats = self._stats()
        bpf, self._bpf = self._bpf, None
        release(bpf)

    # -- events --------------------------------------------------------------

    def _on_ring_event(self, _ctx: Any, data: int, size: int) -> int:
        try:
            sample = decode_gpu_event(ctypes.string_at(data, size), self.py_depth)
        except MalformedEvent:
            self._counts["malformed"] += 1
            return 0
        if isinstance(sample, GpuLibSample):
            self._libs.append(sample)
        else:
            self._calls.append(sample)
        return 0

    def poll(self, timeout_ms: int) -> list[GpuCallSample]:
        """Wait up to *timeout_ms* (-1 = forever) for events; probe newly opened CUDA
        libraries (resuming their processes) and return the calls."""
        if self._bpf is None:
            raise RuntimeError("poll() before attach()")
        self._bpf.ring_buffer_poll(timeout_ms)
        libs, self._libs = self._libs, []
        for lib in libs:
            self._on_library_open(lib)
        calls, self._calls = self._calls, []
        return calls

    def _on_library_open(self, lib: GpuLibSample) -> None:
        fd_path = f"/proc/{lib.pid}/fd/{lib.fd}"
        try:
            # The fd names the file the process opened, whatever path or namespace it used.
            shown = os.readlink(fd_path)
        except OSError:
            self._counts["vanished"] += 1  # exited (or closed the fd) before we looked
        else:
            try:
                # Known only once settled: after a failure the next opener is stopped again.
                if self.attach_library(fd_path, shown):
                    self._mark_known(lib.path, lib.cgroup_id)
                self.learn_python(lib.pid)
            except Exception as exc:  # bcc raises bare Exception (a map update refused, ...)
                self._note("attach_failed", f"{shown}: probing failed ({first_line(exc, 120)})")
        # Whatever happened above, a process stopped for us is never left stopped.
        if lib.stopped:
            self._resume(lib.pid)
            # The pause the late-load design costs: from the open to SIGCONT.
            pause = max(0, time.monotonic_ns() - lib.open_mono_ns)
            self._counts["pause_ns_total"] += pause
            self._counts["pause_ns_max"] = max(self._counts["pause_ns_max"], pause)

    def _mark_known(self, path: str, cgroup_id: int) -> None:
        """Opening *path* (spelt so) in that cgroup stops nobody from now on: the file it
        names there is attached, or hopeless."""
        table = self._bpf[b"zt_gpu_known"]
        key = table.Key()
        key.cgroup_id = cgroup_id
        raw = path.encode()[:255]
        ctypes.memmove(ctypes.addressof(key) + 8, raw, len(raw))  # p follows the u64
        table[key] = ctypes.c_uint8(1)

    def _resume(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGCONT)
            self._counts["resumed"] += 1
        except ProcessLookupError:
            self._counts["vanished"] += 1

    def user_stack(self, call: GpuCallSample) -> list[int]:
        """The calling user stack's addresses, leaf first: the API's own entry, its
        immediate caller (read at entry), then what the frame-pointer walk found past it.
        Empty when no stack was taken (counted as stack_missing)."""
        walked: list[int] = []
        if call.stack_id >= 0 and self._bpf is not None:
            with contextlib.suppress(KeyError):
                walked = [int(a) for a in self._bpf[b"zt_gpu_stacks"].walk(call.stack_id)]
        if not walked:
            self._counts["stack_missing"] += 1
            return []
        if call.caller and (len(walked) < 2 or walked[1] != call.caller):
            walked.insert(1, call.caller)
        return walked

    def _stats(self) -> dict[str, int]:
        if self._bpf is None:
            return dict(getattr(self, "_final_stats", {}))
        table = self._bpf[b"zt_gpu_stats"]
        return {name: int(table[table.Key(i)].value) for i, name in enumerate(_STATS)}

    def counters(self) -> dict[str, int]:
        """lost, inflight_full, nested, stops (kernel side); malformed, libraries,
        resumed, vanished, stack_missing, no_symbols, unreadable, deleted, attach_failed,
        python_processes (made known to the frame walker); pause_ns_total and
        pause_ns_max: how long processes stayed stopped at a library open."""
        out = dict.fromkeys(
            ("malformed", "libraries", "resumed", "vanished", "stack_missing", "no_symbols",
             "unreadable", "deleted", "attach_failed", "python_processes"), 0
        )  # fmt: skip
        out.update(self._counts)
        out.update(self._stats())
        return out


def _cgroup_v2_id(pid: int) -> int | None:
    """What bpf_get_current_cgroup_id() returns for *pid*: its cgroup v2 directory's inode."""
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return os.stat("/sys/fs/cgroup" + line[3:]).st_ino
    except OSError:
        return None
    return None


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]
