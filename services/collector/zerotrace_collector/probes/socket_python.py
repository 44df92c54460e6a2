"""The CPython processes the socket probe's frame walker knows (its ``zt_py_procs`` map), so
that their egress calls carry an asyncio task key (bpf/socket.c "Asyncio task keys").

The profiler and the CUDA feed tell their own programs' walkers; the socket probe has maps of
its own and learns processes itself, so task keys come whether --profile is on or not. A
process is looked at when the probe first sees it: followed (``follow_pid``), a connection
seeded from /proc, or any sample of a poll. What decides whether the facts still hold is its
identity, read from /proc in one go: start time (a reused pid is another process), the start
of its stack (a new one at every exec, stack randomization, even when a Python process execs
the same interpreter, whose ``_PyRuntime`` then moves) and its executable. A Python process
is checked again at most every *exec_check_s*; one that is not Python every
*first_recheck_s* (a followed command is a waiting shell until it execs python, which may be
the moment its first connection comes), and inspected again in full after that, then twice as long
each time up to *recheck_s*: a shared-library build maps libpython, which holds _PyRuntime,
only after the exec (the dynamic loader's work), so a process looked at right after its exec
is not CPython yet; and some programs load libpython late. The sweep drops processes that
exited or changed.

A followed process that execs is reported by the probe (``started``) and looked at from then
on at every ``watch`` (the pace above) until it is CPython or YOUNG_S has passed, so a server
started under ``zerotrace run`` is known before its first request even when the probe's ring
is seconds behind.

Limits: any other process is told to the walker only once user space has seen it, a poll after
its first connection event at the latest, so the first calls of a just-started Python process
that is not followed may carry no key. Threads past the walker's reach (ZT_PY_MAX_THREADS, the
newest first) are found through
:class:`~zerotrace_collector.python_threads.ThreadStateRefill` when calls say so
(``F_PY_NO_THREAD``).

Pure over injected readers (`identity`, `inspect`); the probe passes the map writers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ..python_procs import PythonProcess, inspect
from ..python_threads import ThreadStateRefill, read_thread_states

__all__ = ["Identity", "PythonProcesses", "identity_of", "parse_identity"]

Identity = tuple[int, int, str]
"""(start time, start of the stack, executable) of a process: see the module doc."""

EXEC_CHECK_S: Final = 1.0
FIRST_RECHECK_S: Final = 0.1
RECHECK_S: Final = 30.0
YOUNG_S: Final = 5.0


def parse_identity(stat_text: str, exe: str) -> Identity:
    """The identity of a process from its /proc/<pid>/stat text and its executable's path.
    Fields 22 (starttime) and 28 (startstack); comm (field 2) may hold spaces and parentheses,
    so the fields are counted from the last ')'."""
    fields = stat_text.rsplit(")", 1)[1].split()
    return int(fields[19]), int(fields[25]), exe


def identity_of(pid: int, proc: str = "/proc") -> Identity | None:
    """The identity of *pid*, or None when it is gone. An executable that cannot be read (a
    kernel thread, a sandbox's init) counts as ""."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    try:
        exe = os.readlink(f"{proc}/{pid}/exe")
    except OSError:
        exe = ""
    try:
        return parse_identity(stat, exe)
    except (ValueError, IndexError):
        return None


@dataclass(slots=True)
class _Seen:
    proc: PythonProcess | None
    identity: Identity
    inspected: float  # when inspected in full
    checked: float  # when its identity was last read
    wait: float  # not Python: how long after `inspected` to inspect it again


class PythonProcesses:
    """Which processes *tell* has put in the walker's map (and *forget* taken out).

    *tell_states*: the probe's writer of ``zt_py_tstates`` (thread states past the walker's
    reach). *clock*: monotonic seconds."""

    def __init__(
        self,
        tell: Callable[[PythonProcess], None],
        forget: Callable[[int], None],
        tell_states: Callable[[dict[int, int]], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        proc: str = "/proc",
        exec_check_s: float = EXEC_CHECK_S,
        first_recheck_s: float = FIRST_RECHECK_S,
        recheck_s: float = RECHECK_S,
        thread_walk_s: float = 2.0,
        young_s: float = YOUNG_S,
        identity: Callable[[int, str], Identity | None] = identity_of,
        inspect_pid: Callable[[int, str], PythonProcess | None] = inspect,
        read_states: Callable[[PythonProcess, str], dict[int, int]] = read_thread_states,
    ) -> None:
        self._tell = tell
        self._forget = forget
        self._clock = clock
        self._proc = proc
        self._exec_check_s = exec_check_s
        self._first_recheck_s = first_recheck_s
        self._recheck_s = recheck_s
        self._identity = identity
        self._inspect = inspect_pid
        self._seen: dict[int, _Seen] = {}
        self._young_s = young_s
        self._young: dict[int, float] = {}  # pid -> until when watch() looks at it
        self._threads = ThreadStateRefill(
            tell_states, every_s=thread_walk_s, clock=clock, proc=proc, read=read_states
        )
        self.thread_walks = 0
        """Times a process's thread list was read for the walker (F_PY_NO_THREAD)."""

    @property
    def known(self) -> dict[int, PythonProcess]:
        """The processes in the walker's map, by pid."""
        return {pid: s.proc for pid, s in self._seen.items() if s.proc is not None}

    def saw(self, pid: int) -> PythonProcess | None:
        """*pid* was seen now: make sure the walker knows it if it is CPython (see the module
        doc for when it is looked at again). Returns what is known of it."""
        now = self._clock()
        seen = self._seen.get(pid)
        if seen is not None:
            fresh_s = self._exec_check_s if seen.proc is not None else self._first_recheck_s
            if now - seen.checked < fresh_s:
                return seen.proc
        current = self._identity(pid, self._proc)
        if current is None:
            self._drop(pid)
            return None
        same = seen is not None and seen.identity == current
        if (
            seen is not None
            and same
            and (seen.proc is not None or now - seen.inspected < seen.wait)
        ):
            seen.checked = now
            return seen.proc
        wait = min(seen.wait * 2, self._recheck_s) if seen is not None and same else 0.0
        self._drop(pid)
        found = self._inspect(pid, self._proc)
        self._seen[pid] = _Seen(found, current, now, now, wait or self._first_recheck_s)
        if found is not None:
            self._tell(found)
        return found

    def started(self, pid: int) -> None:
        """*pid* has just exec'd: what was known of its old image goes, and it is looked at
        now and at every :meth:`watch` until it is CPython or young_s has passed."""
        self._drop(pid)
        self._young[pid] = self._clock() + self._young_s
        self.saw(pid)

    def watch(self) -> None:
        """Look again at the processes that exec'd lately, at saw()'s pace: a shared-library
        build maps libpython only after the exec, by the dynamic loader."""
        now = self._clock()
        for pid, until in list(self._young.items()):
            if self.saw(pid) is not None or now > until:
                del self._young[pid]

    def no_thread(self, pid: int) -> None:
        """A call of *pid* found no thread state: tell the walker where they all are (at most
        once per thread_walk_s per process)."""
        seen = self._seen.get(pid)
        if seen is not None and self._threads.no_thread(seen.proc):
            self.thread_walks += 1

    def sweep(self) -> None:
        """Drop what is held for processes that exited, exec'd or whose pid was reused."""
        for pid, seen in list(self._seen.items()):
            if self._identity(pid, self._proc) != seen.identity:
                self._drop(pid)

    def _drop(self, pid: int) -> None:
        seen = self._seen.pop(pid, None)
        self._threads.forget(pid)
        if seen is not None and seen.proc is not None:
            self._forget(pid)
