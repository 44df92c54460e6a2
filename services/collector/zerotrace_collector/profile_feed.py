"""The CPU profiler as a collector feed: :class:`ProfileProbe` samples -> ``raw.stack`` records
(profile_type ON_CPU, weight 1 per sample; OFF_CPU, weight = ns blocked).

What this shell adds to the probe: it looks at a process when the probe announces it (first
seen, exec, a new executable mapping: :class:`ProcessNews`), while it surely lives: whether it
is CPython (``python_procs.inspect``, then the BPF walker gets that process's offsets, so
Python frames show from then on) and its memory maps (the symbolizer). It names frames (native
and kernel by the symbolizer, Python by :class:`PythonSymbols`), merges them
(:func:`merge_stack`) and drops what it holds for processes whose pid was reused at once, and
for processes that exited only *keep_exited_s* later: their last samples may still be in the
ring or in the batch being named (on a busy node, seconds behind), and must be named in full.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from zerotrace import names
from zerotrace_collector.cgroup import ContainerIds
from zerotrace_collector.feeds import RawRecord
from zerotrace_collector.probes.event_layout import NewsReason, PyStatus
from zerotrace_collector.probes.profile import ProfileProbe
from zerotrace_collector.probes.profile_decode import ProcessNews, ProfileSample
from zerotrace_collector.python_procs import PythonProcess, inspect, process_start_time
from zerotrace_collector.python_symbols import PythonSymbols
from zerotrace_collector.python_threads import ThreadStateRefill
from zerotrace_collector.service_cache import ServiceCache, service_of
from zerotrace_collector.stack_merge import call_sites, merge_stack

__all__ = ["FrameSymbolizer", "ProfileFeed"]


class FrameSymbolizer(Protocol):
    """What the feed needs of zerotrace_collector.symbols.Symbolizer."""

    def user_frames(self, pid: int, addresses: Sequence[int]) -> list[str]: ...
    def kernel_frames(self, addresses: Sequence[int]) -> list[str]: ...
    def forget(self, pid: int) -> None: ...
    def prepare(self, pid: int, *, reread: bool = False) -> bool: ...
    def counters(self) -> dict[str, int]: ...


class ProfileFeed:
    """Feed of on-CPU and off-CPU stack samples.

    *mono_to_epoch_ns*: add to CLOCK_MONOTONIC ns to get epoch ns (measured once by the
    collector). *clock*: monotonic seconds, only used to pace housekeeping. A pid found not to
    be Python is looked at again when its executable changes (a forked shell that execs
    python: checked at most every *exec_check_s*, a readlink) and every *recheck_s* in full
    (a program that loads libpython later; reading maps costs more, so less often). Every
    *sweep_s* the known processes are checked for exit, pid reuse and exec; what is known of
    one that exited is dropped *keep_exited_s* after its exit was noticed.
    """

    name = "profile"

    def __init__(
        self,
        probe: ProfileProbe,
        node_id: str,
        mono_to_epoch_ns: int,
        symbolizer: FrameSymbolizer,
        *,
        python_symbols: PythonSymbols | None = None,
        clock: Callable[[], float] = time.monotonic,
        recheck_s: float = 60.0,
        exec_check_s: float = 1.0,
        sweep_s: float = 5.0,
        keep_exited_s: float = 60.0,
        max_stacks: int = 16_384,
        thread_walk_s: float = 2.0,
        proc: str = "/proc",
        services: ServiceCache | None = None,
    ) -> None:
        self.probe = probe
        self.follows = probe.pids is not None
        self._node_id = node_id
        self._offset_ns = mono_to_epoch_ns
        self._symbolizer = symbolizer
        self._py = python_symbols or PythonSymbols(proc=proc)
        self._clock = clock
        self._recheck_s = recheck_s
        self._exec_check_s = exec_check_s
        self._sweep_s = sweep_s
        self._keep_exited_s = keep_exited_s
        self._proc = proc
        self._procs: dict[int, PythonProcess | None] = {}
        # pid -> (executable, when inspected, when the executable was last looked at)
        self._seen: dict[int, tuple[str, float, float]] = {}
        self._gone: dict[int, float] = {}  # pid -> when its exit was noticed
        self._swept_at = clock()
        self._containers = ContainerIds()
        self._services = services
        # Merged frames by everything they are made of: a busy program repeats a few stacks
        # (the same addresses, the same few instructions of a hot loop), and a hit skips the
        # symbolizers and the merge. Cleared whenever a process is forgotten.
        self._stacks: dict[tuple[Any, ...], list[str]] = {}
        self._max_stacks = max_stacks
        self._thread_states = ThreadStateRefill(
            probe.add_thread_states, every_s=thread_walk_s, clock=clock, proc=proc
        )
        self.counts: Counter[str] = Counter()

    @property
    def behind(self) -> bool:
        """The last poll found an eighth of the ring or more waiting."""
        return self.probe.backlog

    def attach(self) -> None:
        self.probe.attach()
        # The kernel's symbols now (kallsyms: about a second), not amid the first samples.
        self._symbolizer.kernel_frames([])

    def close(self) -> None:
        self.probe.close()
        self._py.close()

    def follow_pid(self, pid: int) -> None:
        """Profile *pid* and its children from now on; a Python process is told to the probe
        at once, so its very first samples (and off-CPU waits) carry Python frames."""
        self.probe.follow_pid(pid)
        self.python_process(pid)

    # -- processes -----------------------------------------------------------

    def _exe(self, pid: int) -> str:
        try:
            return os.readlink(f"{self._proc}/{pid}/exe")
        except OSError:
            return ""  # gone, or a kernel thread

    def python_process(self, pid: int) -> PythonProcess | None:
        """What is known of *pid* as a CPython process, looking (again) when due: its
        executable is read again every exec_check_s (a readlink; an exec makes it another
        program, Python or not), a non-Python one inspected again every recheck_s."""
        now = self._clock()
        if pid in self._procs:
            known = self._procs[pid]
            exe, inspected, exe_checked = self._seen[pid]
            settled = known is not None or now - inspected < self._recheck_s
            if now - exe_checked < self._exec_check_s and settled:
                return known
            if self._exe(pid) == exe:
                self._seen[pid] = (exe, inspected, now)
                if settled:
                    return known
            else:
                # It exec'd: another program at the same pid, whose addresses mean other
                # symbols (fork then exec is how every command starts).
                self.counts["process_exec"] += 1
                self._forget(pid)
        exe = self._exe(pid)
        found = inspect(pid, self._proc)
        self._procs[pid], self._seen[pid] = found, (exe, now, now)
        if found is not None:
            self.probe.add_python(found)
        return found

    def _forget(self, pid: int) -> None:
        if pid in self._procs:  # (an exec of a pid never seen leaves the named stacks be)
            self._stacks.clear()
        self._gone.pop(pid, None)
        self._procs.pop(pid, None)
        self._seen.pop(pid, None)
        self._thread_states.forget(pid)
        self._containers.forget(pid)
        if self._services is not None:
            self._services.forget(pid)
        self._py.forget(pid)
        self._symbolizer.forget(pid)
        with contextlib.suppress(RuntimeError):  # probe already closed
            self.probe.forget_python(pid)

    def _start_time(self, pid: int) -> int | None:
        try:
            with open(f"{self._proc}/{pid}/stat") as f:
                return process_start_time(f.read())
        except (OSError, ValueError, IndexError):
            return None

    def _sweep(self) -> None:
        now = self._clock()
        for pid, known in list(self._procs.items()):
            start = self._start_time(pid)
            if start is None:
                if pid not in self._gone:
                    self.counts["process_exited"] += 1
                    self._gone[pid] = now
                elif now - self._gone[pid] >= self._keep_exited_s:
                    self._forget(pid)
                continue
            if known is not None and known.start_time != start:
                self.counts["pid_reused"] += 1
                self._forget(pid)
            elif known is not None and self._exe(pid) != self._seen[pid][0]:
                self.counts["process_exec"] += 1  # no longer that interpreter
                self._forget(pid)

    def take_news(self, news: list[ProcessNews]) -> None:
        """Look at the announced processes now, each once however often it was announced:
        after an exec it is another program (everything known of it is dropped); a new
        executable mapping may be libpython of a shared build or a library whose symbols are
        wanted (maps read again); a process not Python so far is inspected again."""
        latest: dict[int, NewsReason] = {}
        for item in news:
            if latest.get(item.pid) != NewsReason.EXEC:
                latest[item.pid] = item.reason
        for pid, reason in latest.items():
            self.counts[f"news_{reason.name.lower()}"] += 1
            if reason == NewsReason.EXEC or self._reused(pid):
                self.counts["process_exec" if reason == NewsReason.EXEC else "pid_reused"] += 1
                self._forget(pid)
            elif pid in self._procs and self._procs[pid] is None:
                # Not Python so far: libpython may be mapped since, or the pid is another
                # process's now (announced again after its holder's exit). Look again.
                del self._procs[pid], self._seen[pid]
            self.python_process(pid)
            self._symbolizer.prepare(pid, reread=reason == NewsReason.EXEC_MAPPING)

    def _reused(self, pid: int) -> bool:
        """Known under this pid, but another process has it now."""
        if pid in self._gone:
            return True
        known = self._procs.get(pid)
        return known is not None and self._start_time(pid) not in (None, known.start_time)

    # -- samples -------------------------------------------------------------

    def _count_python(self, sample: ProfileSample) -> None:
        if sample.py_status == PyStatus.NO_THREAD:
            self.counts["py_no_thread"] += 1
            # Past the walker's reach (64 threads): tell it where every thread's state is.
            if self._thread_states.no_thread(self._procs.get(sample.pid)):
                self.counts["py_thread_walks"] += 1
        elif sample.py_status == PyStatus.READ_FAIL:
            self.counts["py_read_fail"] += 1
        if sample.py_truncated:
            self.counts["py_truncated"] += 1

    def _python_frames(self, sample: ProfileSample, proc: PythonProcess | None) -> list[str]:
        self._count_python(sample)
        if proc is None or not sample.py_frames:
            return []
        return self._py.frames(proc, sample.py_frames)

    def frames(self, sample: ProfileSample) -> list[str]:
        """The sample's merged frames, root first."""
        proc = self._procs.get(sample.pid)
        user = sample.user_stack
        # A Python thread sampled inside the interpreter keeps none of its native frames (the
        # merge rule); knowing that from the address alone spares the symbolizer, and keeps
        # the walk's garbage past the leaf (different every time) out of the cache key.
        has_python = any(code for code, _ in sample.py_frames)
        if proc is not None and has_python and user and proc.in_interpreter(user[0]):
            user = ()
        key = (sample.pid, sample.tid, sample.py_frames, user, sample.kernel_stack)
        cached = self._stacks.get(key)
        if cached is not None:
            self._count_python(sample)
            return cached
        frames = self._merged(sample, proc, user)
        if len(self._stacks) >= self._max_stacks:
            self._stacks.clear()  # cheaper than an LRU; refilled within seconds
        self._stacks[key] = frames
        return frames

    def _merged(
        self, sample: ProfileSample, proc: PythonProcess | None, user: tuple[int, ...]
    ) -> list[str]:
        python = self._python_frames(sample, proc)
        kstack = sample.kernel_stack
        native = self._symbolizer.user_frames(sample.pid, call_sites(user)) if user else []
        kernel = self._symbolizer.kernel_frames(call_sites(kstack)) if kstack else []
        return merge_stack(sample.tid, python, native, kernel, proc.module_name if proc else None)

    def record(self, sample: ProfileSample) -> RawRecord:
        ts_ns = sample.ts_mono_ns + self._offset_ns
        kind = "OFF_CPU" if sample.off_cpu else "ON_CPU"
        datum: dict[str, Any] = {
            # pid, tid, time and kind name one sample on one node.
            "event_id": f"{self._node_id}/{sample.pid}/{sample.tid}/{ts_ns}/{kind.lower()}",
            "node_id": self._node_id,
            "pid": sample.pid,
            "tid": sample.tid,
            "process_name": sample.comm,
            "service": service_of(self._services, sample.pid, sample.comm),
            "container_id": self._containers.of(sample.pid),
            "ts_ns": ts_ns,
            "profile_type": kind,
            "weight": sample.weight,
            "frames": list(self.frames(sample)),
        }
        return RawRecord(
            names.RAW_STACK.name, str(sample.pid).encode(), names.RAW_STACK.record, datum
        )

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        samples = self.probe.poll(timeout_ms)
        self.take_news(self.probe.take_news())
        for pid in {s.pid for s in samples}:
            self.python_process(pid)
        for sample in samples:  # Python code objects first, while their processes live
            proc = self._procs.get(sample.pid)
            if proc is not None and sample.py_frames:
                self._py.read_ahead(proc, sample.py_frames)
        out = [self.record(s) for s in samples]
        if self._clock() - self._swept_at >= self._sweep_s:
            self._swept_at = self._clock()
            self._sweep()
        return out

    def counters(self) -> dict[str, int]:
        out = {
            "lost": self.probe.lost,
            "shed": self.probe.shed,
            "thinned": self.probe.thinned,  # in kept samples' weights: not lost
            "malformed": self.probe.malformed,
            "off_cpu_full": self.probe.off_cpu_full,
            "news_lost": self.probe.news_lost,
            "python_processes": sum(1 for p in self._procs.values() if p is not None),
        }
        out.update(self.counts)
        out.update(self._py.counts)
        out.update({f"symbols_{k}": v for k, v in self._symbolizer.counters().items()})
        return out
