"""bcc shell around ``bpf/profile.c``: on-CPU samples and off-CPU intervals as
:class:`~.profile_decode.ProfileSample`.

Decoding lives in :mod:`.profile_decode`, Python process facts in
:mod:`zerotrace_collector.python_procs`; this module compiles, attaches the perf event and the
tracepoints, fills the ``zt_py_procs`` and ``zt_follow`` maps, polls and tears down. bcc is
imported lazily so the module imports (and ``program_text()`` works) without it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path
from typing import Any, Final

from ..errors import MalformedEvent, ProbeUnavailable
from ..python_procs import PythonProcess
from .bcc_loader import (
    AttachedProbe,
    bcc_for,
    compile_program,
    read_program,
    release,
    tell_python_walker,
    tell_thread_states,
)
from .event_layout import DEFAULT_PY_DEPTH, DEFAULT_STACK_DEPTH
from .profile_decode import ProcessNews, ProfileLayout, ProfileSample
from .python_stack import PYTHON_STACK_FILE, python_stack_cflags

__all__ = ["DEFAULT_RATE_HZ", "ProfileProbe", "program_text"]

PROGRAM_FILE: Final = "profile.c"
# A prime near 100: a sampler at exactly 100 Hz (or 99, 50...) can fall into lock step with
# work driven by 100 Hz/10 ms timers and see the same phase of it every time; 97 does not.
DEFAULT_RATE_HZ: Final = 97
DEFAULT_OFFCPU_MIN_NS: Final = 1_000_000
_STAT_LOST: Final = 0
_STAT_OFFCPU_FULL: Final = 1
_STAT_NEWS_LOST: Final = 3
_STAT_SHED: Final = 4
_STAT_THINNED: Final = 5
_FLOW_TAKEN: Final = 1  # zt_profile_flow: bytes this reader took, told to the program
_MAPPING_TRACEPOINTS: Final = (("syscalls", "sys_enter_mmap"), ("syscalls", "sys_exit_mmap"))
_PERF_TYPE_SOFTWARE: Final = 1
_PERF_COUNT_SW_CPU_CLOCK: Final = 0


class ProfileProbe(AttachedProbe):
    """CPU profiler. ``pids=None`` profiles every process (but the collector); a set of pids
    profiles those and what they fork from then on.

    rate_hz: on-CPU samples per second per CPU (0: no on-CPU sampling); off_cpu: record
    blocked time from sched_switch, for blocks of at least off_cpu_min_ns, for at most
    off_cpu_threads threads off CPU at once; stack_depth: kernel and user frames kept each
    (power of two); py_depth: Python frames kept (1..128); ringbuf_pages: ring buffer size
    (power of two); self_pid: the process never profiled (default: this one).

    Usage::

        with ProfileProbe(Path("bpf"), pids={1234}) as probe:
            probe.add_python(python_procs.inspect(1234))
            samples = probe.poll(100)
    """

    program_file = PROGRAM_FILE

    def __init__(
        self,
        bpf_dir: Path,
        *,
        rate_hz: int = DEFAULT_RATE_HZ,
        off_cpu: bool = True,
        off_cpu_min_ns: int = DEFAULT_OFFCPU_MIN_NS,
        off_cpu_threads: int = 8192,
        pids: set[int] | None = None,
        stack_depth: int = DEFAULT_STACK_DEPTH,
        py_depth: int = DEFAULT_PY_DEPTH,
        ringbuf_pages: int = 512,
        self_pid: int | None = None,
    ) -> None:
        if rate_hz < 0 or off_cpu_min_ns < 0 or off_cpu_threads <= 0:
            raise ValueError("rate_hz, off_cpu_min_ns must be >= 0, off_cpu_threads > 0")
        for name, value in (("stack_depth", stack_depth), ("ringbuf_pages", ringbuf_pages)):
            if value <= 0 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, got {value}")
        if not 1 <= py_depth <= 128:
            raise ValueError(f"py_depth must be 1..128, got {py_depth}")
        self.bpf_dir = Path(bpf_dir).resolve()
        self.rate_hz = rate_hz
        self.off_cpu = off_cpu
        self.off_cpu_min_ns = off_cpu_min_ns
        # Each slot holds a whole event (about 1.3 KB) in preallocated kernel memory.
        self.off_cpu_threads = off_cpu_threads
        self.pids = None if pids is None else set(pids)
        self.layout = ProfileLayout(stack_depth, py_depth)
        self.ringbuf_pages = ringbuf_pages
        self.self_pid = os.getpid() if self_pid is None else self_pid
        self.malformed = 0
        # One line per thing that works only in part on this kernel (set by attach).
        self.notes: list[str] = []
        self._bpf: Any = None
        self._pending: list[ProfileSample] = []
        self._news: list[ProcessNews] = []
        self._lost_at_close = 0
        self._shed_at_close = 0
        self._thinned_at_close = 0
        self._taken = 0  # ring bytes consumed: the program thins its samples when far behind
        # True when the last poll found an eighth of the ring or more waiting: this reader is
        # late (its CPU weight goes up until it keeps up; zerotrace.cpu_budget).
        self.backlog = False
        self._mappings = True  # announce executable mappings (set by attach)

    # -- program -------------------------------------------------------------

    def cflags(self) -> list[str]:
        return [
            f"-I{self.bpf_dir}",
            f"-DZT_SELF_PID={self.self_pid}",
            f"-DZT_FOLLOW={int(self.pids is not None)}",
            f"-DZT_OFFCPU={int(self.off_cpu)}",
            f"-DZT_OFFCPU_MIN_NS={self.off_cpu_min_ns}ULL",
            f"-DZT_OFFCPU_THREADS={self.off_cpu_threads}",
            f"-DZT_STACK_DEPTH={self.layout.stack_depth}",
            f"-DZT_PY_MAX_DEPTH={self.layout.py_depth}",
            f"-DZT_RINGBUF_PAGES={self.ringbuf_pages}",
            f"-DZT_NEWS_MAPPINGS={int(self._mappings)}",
            *python_stack_cflags()[0],
        ]

    def _source(self) -> str:
        return read_program(self.bpf_dir, PYTHON_STACK_FILE, self.program_file)

    # -- lifecycle -----------------------------------------------------------

    def attach(self) -> None:
        """Compile and attach; raise :class:`ProbeUnavailable` with one line on any failure."""
        if self._bpf is not None:
            return
        self._taken = 0  # a new program's ring: its flow counts start at 0
        tracepoints = [("sched", "sched_process_exec"), ("sched", "sched_process_exit")]
        if self.off_cpu:
            tracepoints.append(("sched", "sched_switch"))
        if self.pids is not None:
            tracepoints.append(("sched", "sched_process_fork"))
        bpf_class = bcc_for("CPU profiler", tracepoints)
        note = python_stack_cflags()[1]
        self.notes = [note] if note else []
        self._mappings = all(bpf_class.tracepoint_exists(*tp) for tp in _MAPPING_TRACEPOINTS)
        if not self._mappings:
            self.notes.append(
                "no syscalls tracepoints (CONFIG_FTRACE_SYSCALLS): a library loaded later is "
                "named when its samples come, and may be missed if the process exits first"
            )
        bpf = compile_program(bpf_class, self._source(), self.cflags(), self.source_path)
        try:
            if self.pids is not None:
                follow = bpf[b"zt_follow"]
                for pid in self.pids:
                    follow[follow.Key(pid)] = follow.Leaf(1)
            bpf[b"zt_profile_events"].open_ring_buffer(self._on_event)
            bpf[b"zt_profile_news"].open_ring_buffer(self._on_news)
            if self.rate_hz:
                bpf.attach_perf_event(
                    ev_type=_PERF_TYPE_SOFTWARE,
                    ev_config=_PERF_COUNT_SW_CPU_CLOCK,
                    fn_name=b"zt_profile_on_cpu",
                    sample_freq=self.rate_hz,
                )
        except Exception as exc:
            release(bpf)
            raise ProbeUnavailable(f"attaching the CPU profiler failed: {exc}") from exc
        self._bpf = bpf

    def close(self) -> None:
        """Detach and free the program. Safe to call more than once."""
        if self._bpf is None:
            return
        self._lost_at_close, self._shed_at_close = self.lost, self.shed
        self._thinned_at_close = self.thinned
        bpf, self._bpf = self._bpf, None
        release(bpf)

    # -- maps ----------------------------------------------------------------

    def _table(self, name: str) -> Any:
        if self._bpf is None:
            raise RuntimeError("attach() first")
        return self._bpf[name.encode()]

    def add_python(self, proc: PythonProcess) -> None:
        """Let the BPF walker read Python frames of *proc* (replaces an older entry)."""
        tell_python_walker(self._table("zt_py_procs"), proc)

    def add_thread_states(self, states: dict[int, int]) -> None:
        """See :func:`~.bcc_loader.tell_thread_states`."""
        tell_thread_states(self._table("zt_py_tstates"), states)

    def forget_python(self, pid: int) -> None:
        table = self._table("zt_py_procs")
        with contextlib.suppress(KeyError):
            del table[table.Key(pid)]

    def follow_pid(self, pid: int) -> None:
        """Profile *pid* and what it forks from now on (only when built with a pid set)."""
        if self.pids is None:
            raise RuntimeError("follow_pid() needs pids= (the probe profiles everything)")
        self.pids.add(pid)
        if self._bpf is not None:
            table = self._table("zt_follow")
            table[table.Key(pid)] = table.Leaf(1)

    # -- events --------------------------------------------------------------

    def _on_event(self, _ctx: Any, data: int, size: int) -> int:
        self._taken += size
        try:
            self._pending.append(self.layout.decode(ctypes.string_at(data, size)))
        except MalformedEvent:
            self.malformed += 1
        return 0

    def _on_news(self, _ctx: Any, data: int, size: int) -> int:
        try:
            self._news.append(ProcessNews.decode(ctypes.string_at(data, size)))
        except MalformedEvent:
            self.malformed += 1
        return 0

    def take_news(self) -> list[ProcessNews]:
        """Processes announced since the last call (read by the same polls as the samples;
        the news ring wakes a waiting poll at once), oldest first."""
        out, self._news = self._news, []
        return out

    def poll(self, timeout_ms: int) -> list[ProfileSample]:
        """Wait up to *timeout_ms* (-1 = until a batch is ready); return the samples received.

        The program wakes the reader once per batch of events, not per event, so this usually
        returns at the timeout: then whatever arrived meanwhile is consumed."""
        if self._bpf is None:
            raise RuntimeError("poll() before attach()")
        taken_before = self._taken
        self._bpf.ring_buffer_poll(timeout=timeout_ms)
        self._bpf.ring_buffer_consume()
        self.backlog = self._taken - taken_before >= self.ringbuf_pages * 4096 // 8
        flow = self._table("zt_profile_flow")
        flow[flow.Key(_FLOW_TAKEN)] = flow.Leaf(self._taken)
        out, self._pending = self._pending, []
        return out

    def _stat(self, index: int) -> int:
        table = self._table("zt_profile_stats")
        return int(table[table.Key(index)].value)

    @property
    def lost(self) -> int:
        """Samples dropped in the kernel (ring buffer full)."""
        return self._lost_at_close if self._bpf is None else self._stat(_STAT_LOST)

    @property
    def shed(self) -> int:
        """Samples not kept because this reader was far behind (profile.c "Shedding"), in no
        kept sample's weight: a decision, counted, never a random loss."""
        return self._shed_at_close if self._bpf is None else self._stat(_STAT_SHED)

    @property
    def thinned(self) -> int:
        """Samples not kept while the rate was lowered; each is in the weight of a kept one
        (totals stay right, the resolution drops)."""
        return self._thinned_at_close if self._bpf is None else self._stat(_STAT_THINNED)

    @property
    def news_lost(self) -> int:
        """Processes not announced because the news ring was full (named at their samples)."""
        return 0 if self._bpf is None else self._stat(_STAT_NEWS_LOST)

    @property
    def off_cpu_full(self) -> int:
        """Switch-outs not recorded because the per-thread map was full."""
        return 0 if self._bpf is None else self._stat(_STAT_OFFCPU_FULL)


def program_text(bpf_dir: Path, **options: Any) -> str:
    """The final program for the given options, as ``--ebpf`` would print it."""
    return ProfileProbe(bpf_dir, **options).program_text()
