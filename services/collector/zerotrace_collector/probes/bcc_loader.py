"""What every bcc-based probe does before and around its own program: check that this host
can run it (root, bcc, kernel headers, tracepoints), compile it, and say in one line why not.

bcc is imported lazily, so the probe modules import on hosts without it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from ..errors import ProbeUnavailable


def first_line(exc: BaseException, limit: int = 200) -> str:
    """bcc's errors are compiler output, many lines long; the first one says what broke."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:limit]


def bcc_for(what: str, tracepoints: Iterable[tuple[str, str]]) -> Any:
    """bcc's BPF class, once root, bcc, kernel headers and every tracepoint are there."""
    if os.geteuid() != 0:
        raise ProbeUnavailable(f"{what} needs root (running as uid {os.geteuid()})")
    try:
        bpf_class: Any = importlib.import_module("bcc").BPF  # untyped; keep it lazy
    except ImportError as exc:
        raise ProbeUnavailable(
            f"bcc is not importable ({exc}); run scripts/setup-ebpf.sh <venv> as root"
        ) from exc
    release = os.uname().release
    if not Path(f"/lib/modules/{release}/build").exists():
        raise ProbeUnavailable(
            f"kernel headers missing for {release} (/lib/modules/{release}/build); "
            "run scripts/setup-ebpf.sh as root"
        )
    for category, event in tracepoints:
        if not bpf_class.tracepoint_exists(category, event):
            raise ProbeUnavailable(
                f"tracepoint {category}:{event} not found (tracefs not mounted or "
                "CONFIG_FTRACE_SYSCALLS unset); run scripts/setup-ebpf.sh as root"
            )
    return bpf_class


# Where tracefs is mounted: its own mount point, or under debugfs on older systems.
TRACEFS_ROOTS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))


def tracepoint_exists(category: str, event: str) -> bool:
    """Whether this kernel has the tracepoint (without bcc, for the choice of cflags)."""
    return any((root / "events" / category / event).is_dir() for root in TRACEFS_ROOTS)


def compile_program(bpf_class: Any, text: str, cflags: list[str], source: Path) -> Any:
    """Compile, load and auto-attach the program (bcc raises bare Exception for all three)."""
    try:
        return bpf_class(text=text.encode(), cflags=cflags)
    except Exception as exc:
        raise ProbeUnavailable(f"loading {source} failed: {first_line(exc)}") from exc


# Detaches run side by side, at most this many at once (see `release`).
_DETACH_THREADS = 32


def release(bpf: Any) -> None:
    """Detach every probe of a bcc program and free it: bcc's ``cleanup``, its tracepoints and
    uprobes detached side by side first. Why: closing a tracepoint's perf event waits for an
    RCU grace period in the kernel (perf_trace_event_unreg), 30-70 ms each, one after another
    in ``cleanup``: the socket probe's 51 took 3.3 s at every stop. Each wait happens in a
    ctypes call, which lets go of the GIL, so the waits overlap. A detach that fails is left to
    ``cleanup``, which tries it again and raises as before."""
    detaches = [(bpf.detach_tracepoint, tp) for tp in list(bpf.tracepoint_fds)]
    detaches += [(bpf.detach_uprobe_event, ev) for ev in list(bpf.uprobe_fds)]
    if len(detaches) > 1:
        with ThreadPoolExecutor(min(_DETACH_THREADS, len(detaches))) as pool:
            for future in [pool.submit(detach, key) for detach, key in detaches]:
                with contextlib.suppress(Exception):
                    future.result()
    bpf.cleanup()


def read_program(bpf_dir: Path, *names: str) -> str:
    """The C text of these files of bpf/, in order, as one unit. Shared parts (python_stack.h,
    tls.c) are joined, not #included: bcc rewrites map calls only in the text it is given."""
    parts: list[str] = []
    for name in names:
        path = bpf_dir / name
        try:
            text = path.read_text()
        except OSError as exc:
            raise ProbeUnavailable(f"cannot read BPF program {path}: {exc.strerror}") from exc
        parts.append(text if not parts else f"\n/* ---- {name} ---- */\n{text}")
    return "".join(parts)


def annotated(cflags: Iterable[str], text: str) -> str:
    """A program as handed to bcc, preceded by a comment with its cflags (the `--ebpf` view)."""
    return f"/* bcc cflags: {' '.join(cflags)} */\n{text}"


class AttachedProbe:
    """A probe compiled from files of bpf/ and attached with bcc; a context manager: attach
    on entry, close (idempotent) on exit. A subclass names its main file (*program_file*),
    sets ``bpf_dir`` and ``_bpf`` (None until attached) and gives its cflags."""

    program_file: ClassVar[str]
    bpf_dir: Path
    _bpf: Any

    @property
    def source_path(self) -> Path:
        return self.bpf_dir / self.program_file

    @property
    def attached(self) -> bool:
        return self._bpf is not None

    def cflags(self) -> list[str]:
        raise NotImplementedError

    def _source(self) -> str:
        """The text handed to bcc; probes that join shared parts say which."""
        return read_program(self.bpf_dir, self.program_file)

    def program_text(self) -> str:
        """The exact C text handed to bcc, preceded by a comment with its cflags."""
        return annotated(self.cflags(), self._source())

    def attach(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.attach()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def tell_thread_states(table: Any, states: dict[int, int]) -> None:
    """{kernel-wide tid: PyThreadState address} into a program's zt_py_tstates map: where
    the walker finds threads past the ones it walks itself (python_threads.py). Each entry
    is checked against the thread's id on use."""
    for tid, tstate in states.items():
        table[table.Key(tid)] = table.Leaf(tstate)


def tell_python_walker(table: Any, proc: Any) -> None:
    """Put a CPython process's walker facts (bpf/python_stack.h) into a program's zt_py_procs
    map: its _PyRuntime address, pid namespace and version offsets, packed as the map's leaf."""
    leaf = table.Leaf()
    packed = proc.layout.walker.pack(proc.runtime_addr, proc.pidns)
    ctypes.memmove(ctypes.addressof(leaf), packed, len(packed))
    table[table.Key(proc.pid)] = leaf
