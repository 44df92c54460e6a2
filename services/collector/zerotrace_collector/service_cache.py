"""Service names of the processes events come from: /proc/PID/cmdline and /proc/PID/cgroup
read once per process (the collector's I/O shell) and named by the pure
`zerotrace.service_identity.service_name`.

Cached by pid and thread name (a process's threads may carry several names: each is one
entry) and read again every *recheck_s* of *clock*: a pid reused by a new process (another
process) or a process that exec'd (another command line) is named
anew within that time; reading is two small /proc files per process and thread name every
*recheck_s*, not per event. Bounded: cleared past *max_entries* (cheap to read again). A
process gone keeps the name it had; one gone before it was read, its comm."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from zerotrace.service_identity import ServiceRule, service_name, split_cmdline

__all__ = ["ProcFacts", "ServiceCache", "read_proc", "service_of"]


ProcFacts = tuple[list[str], str]  # argv, /proc/PID/cgroup text


def read_proc(pid: int) -> ProcFacts | None:
    """What naming needs of a live process; None when it is gone. A zombie's (or a kernel
    thread's) argv is empty."""
    try:
        argv = split_cmdline(Path(f"/proc/{pid}/cmdline").read_bytes())
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return argv, cgroup


class ServiceCache:
    def __init__(
        self,
        rules: Sequence[ServiceRule] = (),
        *,
        read: Callable[[int], ProcFacts | None] = read_proc,
        clock: Callable[[], float] = time.monotonic,
        recheck_s: float = 2.0,
        max_entries: int = 65_536,
    ) -> None:
        self._rules = tuple(rules)
        self._read = read
        self._clock = clock
        self._recheck_s = recheck_s
        self._max = max_entries
        self._names: dict[tuple[int, str], tuple[str, float]] = {}  # -> (name, when read)
        self.reads = 0

    def of(self, pid: int, comm: str) -> str:
        """The service of the process *pid* whose thread *comm* made an event. Reads /proc
        on the first event of a (pid, comm) and again *recheck_s* later (a pid reused, or a
        process that exec'd, is named anew); never raises."""
        key = (pid, comm)
        now = self._clock()
        entry = self._names.get(key)
        if entry is not None and now - entry[1] < self._recheck_s:
            return entry[0]
        if entry is None and len(self._names) >= self._max:
            self._names.clear()
        self.reads += 1
        facts = self._read(pid)
        if entry is not None and (facts is None or not facts[0]):
            name = entry[0]  # gone (or a zombie): its late events keep the name it had
        elif facts is None:
            name = service_name(comm, rules=self._rules)  # gone before it was read
        else:
            name = service_name(comm, facts[0], facts[1], self._rules)
        self._names[key] = (name, now)
        return name

    def forget(self, pid: int) -> None:
        for key in [k for k in self._names if k[0] == pid]:
            del self._names[key]


def service_of(services: ServiceCache | None, pid: int, comm: str) -> str | None:
    """What a feed puts in a record's ``service``: None where the feed names no services (a
    feed made without a cache, as tests and benchmarks make them)."""
    return services.of(pid, comm) if services is not None else None
