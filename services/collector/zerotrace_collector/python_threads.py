"""Where each thread's PyThreadState lives, read from user space for the BPF walker.

The walker (bpf/python_stack.h) finds a thread's state by walking the interpreter's thread list
from its head, at most ZT_PY_MAX_THREADS (64) entries per sample: the verifier bounds the loop,
and a sample must stay cheap. CPython puts new threads at the head, so in a process with more
threads the oldest ones (often the main thread and the workers started first) are never
reached. The walker also keeps a map tid -> PyThreadState* that it checks before walking (and
verifies against native_thread_id on every use): user space fills it here, with a walk of the
whole list, when samples of a known Python process say "no thread state". Not for CPython
3.10: it has no native_thread_id, and its pthread_self() values cannot be mapped to tids.

Pure core (`thread_states`, `kernel_tids`) over a memory reader; the shell reads /proc;
`ThreadStateRefill` paces the reads for a feed (the CPU profiler's and the CUDA calls').
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterable
from typing import Final

from zerotrace_collector.python_procs import TID_NATIVE, PyOffsets, PythonProcess

MAX_THREADS: Final = 4096
"""Thread states read per walk: a list longer than this (or a cycle) stops there."""

ReadPointer = Callable[[int], int | None]
"""Reads the 8-byte value at an address of the target, None when unreadable."""


def thread_states(
    read: ReadPointer, offsets: PyOffsets, runtime_addr: int, limit: int = MAX_THREADS
) -> dict[int, int]:
    """{native_thread_id: PyThreadState address} of the main interpreter's threads."""
    out: dict[int, int] = {}
    interp = read(runtime_addr + offsets.runtime_interp_head)
    if not interp:
        return out
    tstate = read(interp + offsets.interp_threads_head)
    seen: set[int] = set()
    while tstate and tstate not in seen and len(seen) < limit:
        seen.add(tstate)
        native = read(tstate + offsets.tstate_native_tid)
        if native is None:
            break
        out[native & 0xFFFFFFFF] = tstate
        tstate = read(tstate + offsets.tstate_next)
    return out


def kernel_tids(nspid_lines: Iterable[tuple[int, str]]) -> dict[int, int]:
    """{tid as the process knows it: kernel-wide tid} from (tid, "NSpid:" line of its
    /proc/PID/task/TID/status) pairs; in the initial pid namespace the two are the same."""
    out: dict[int, int] = {}
    for tid, line in nspid_lines:
        ids = line.split()[1:]
        if ids:
            out[int(ids[-1])] = tid
    return out


def read_thread_states(proc: PythonProcess, root: str = "/proc") -> dict[int, int]:
    """{kernel-wide tid: PyThreadState address} of a live process; empty when unreadable,
    and for CPython 3.10, which keeps pthread_self() values that /proc cannot map to tids (its
    threads past the walker's reach show native stacks)."""
    if proc.layout.walker.tid_match != TID_NATIVE:
        return {}
    try:
        fd = os.open(f"{root}/{proc.pid}/mem", os.O_RDONLY)
    except OSError:
        return {}
    try:

        def read(address: int) -> int | None:
            try:
                data = os.pread(fd, 8, address)
            except OSError:
                return None
            return struct.unpack("<Q", data)[0] if len(data) == 8 else None

        states = thread_states(read, proc.layout.walker, proc.runtime_addr)
    finally:
        os.close(fd)
    tids = kernel_tids(_nspid_lines(proc.pid, root))
    return {tids.get(native, native): tstate for native, tstate in states.items()}


def _nspid_lines(pid: int, root: str) -> Iterable[tuple[int, str]]:
    try:
        tasks = os.listdir(f"{root}/{pid}/task")
    except OSError:
        return
    for name in tasks:
        try:
            with open(f"{root}/{pid}/task/{name}/status") as status:
                line = next((ln for ln in status if ln.startswith("NSpid:")), "")
        except OSError:
            continue
        yield int(name), line


class ThreadStateRefill:
    """When the walker finds no thread state for a thread of a known Python process, the
    whole list is read and handed to *tell* (a probe's ``add_thread_states``), at most once
    per *every_s* seconds of *clock* per process: a thread that never runs Python asks again
    on every sample and finds none."""

    def __init__(
        self,
        tell: Callable[[dict[int, int]], None],
        *,
        every_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        proc: str = "/proc",
        read: Callable[[PythonProcess, str], dict[int, int]] = read_thread_states,
    ) -> None:
        self._tell = tell
        self._every_s = every_s
        self._clock = clock
        self._proc = proc
        self._read = read
        self._walked: dict[int, float] = {}  # pid -> when its thread list was read

    def no_thread(self, proc: PythonProcess | None) -> bool:
        """A sample of *proc* found no thread state; True when its list was read now (never
        for 3.10, whose thread ids cannot be mapped: see read_thread_states)."""
        now = self._clock()
        if proc is None or proc.layout.walker.tid_match != TID_NATIVE:
            return False
        if now - self._walked.get(proc.pid, -1e18) < self._every_s:
            return False
        self._walked[proc.pid] = now
        states = self._read(proc, self._proc)
        if states:
            self._tell(states)
        return True

    def forget(self, pid: int) -> None:
        self._walked.pop(pid, None)
