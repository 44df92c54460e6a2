"""bcc shell around ``bpf/fileio.c``: one :class:`FileOpenSample` per ``openat(2)``, and
with ``rw=True`` one :class:`FileRwSample` per read or write on a file so opened.

All decoding lives in :mod:`.fileio_decode`; this module only compiles, attaches,
polls and tears down.  bcc is imported lazily inside :meth:`FileOpenProbe.attach`
so the module imports (and ``program_text()`` works) on hosts without bcc.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path
from typing import Any, Final

from ..errors import MalformedEvent, ProbeUnavailable
from .bcc_loader import (
    AttachedProbe,
    bcc_for,
    compile_program,
    release,
)
from .fileio_decode import FileOpenSample, FileRwSample, decode_file_event

__all__ = ["FileOpenProbe"]

PROGRAM_FILE: Final = "fileio.c"
EVENTS_MAP: Final = b"zt_fileio_events"
STATS_MAP: Final = b"zt_fileio_stats"
# Indexes into zt_fileio_stats; mirror the ZT_STAT_* defines in bpf/fileio.c.
STAT_LOST: Final = 0
STAT_INFLIGHT_FULL: Final = 1

_TRACEPOINTS: Final = (("syscalls", "sys_enter_openat"), ("syscalls", "sys_exit_openat"))
_RW_CALLS: Final = ("read", "write", "pread64", "pwrite64", "readv", "writev")
_RW_TRACEPOINTS: Final = (
    ("syscalls", "sys_enter_close"),
    *(("syscalls", f"sys_{edge}_{call}") for call in _RW_CALLS for edge in ("enter", "exit")),
)
_FOLLOW_TRACEPOINTS: Final = (("sched", "sched_process_fork"), ("sched", "sched_process_exit"))
_RINGBUF_MIN_KERNEL: Final = (5, 8)


def _kernel_version() -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


class FileOpenProbe(AttachedProbe):
    """Trace completed ``openat`` calls via syscall tracepoints.

    Usage::

        probe = FileOpenProbe(Path("bpf"))
        probe.attach()
        try:
            while running:
                for sample in probe.poll(100):
                    ...
        finally:
            probe.close()
    """

    program_file = PROGRAM_FILE

    def __init__(
        self,
        bpf_dir: Path,
        pid_filter: int = 0,
        *,
        self_pid: int | None = None,
        ringbuf_pages: int = 256,
        rw: bool = False,
        follow: bool = False,
    ) -> None:
        """rw: also report reads and writes (bpf/fileio.c ZT_FILE_RW): one event per call on
        a file whose open was seen, for span_timings' per-span file I/O. follow: only the
        processes given to :meth:`follow_pid` and those they fork."""
        if pid_filter < 0:
            raise ValueError(f"pid_filter must be >= 0, got {pid_filter}")
        if ringbuf_pages <= 0 or ringbuf_pages & (ringbuf_pages - 1):
            raise ValueError(f"ringbuf_pages must be a power of two, got {ringbuf_pages}")
        self.bpf_dir = Path(bpf_dir).resolve()
        self.pid_filter = pid_filter
        self.self_pid = os.getpid() if self_pid is None else self_pid
        self.ringbuf_pages = ringbuf_pages
        self.rw = rw
        self.follow = follow
        self.use_perfbuf = _kernel_version() < _RINGBUF_MIN_KERNEL
        self.malformed = 0
        """Events received but rejected by the decoder."""
        self._perf_lost = 0
        self._lost_base = 0
        self._lost_at_close = 0
        self._bpf: Any = None
        self._pending: list[FileOpenSample | FileRwSample] = []

    # -- program -------------------------------------------------------------

    def cflags(self) -> list[str]:
        return [
            f"-I{self.bpf_dir}",
            f"-DZT_FILTER_PID={self.pid_filter}",
            f"-DZT_SELF_PID={self.self_pid}",
            f"-DZT_RINGBUF_PAGES={self.ringbuf_pages}",
            f"-DZT_USE_PERFBUF={int(self.use_perfbuf)}",
            f"-DZT_FILE_RW={int(self.rw)}",
            f"-DZT_FOLLOW={int(self.follow)}",
        ]

    # -- lifecycle -----------------------------------------------------------

    def attach(self) -> None:
        """Compile ``fileio.c`` and attach it; raise :class:`ProbeUnavailable` on any failure."""
        if self._bpf is not None:
            return
        bpf = compile_program(
            bcc_for(
                "file-open probe",
                _TRACEPOINTS
                + (_RW_TRACEPOINTS if self.rw else ())
                + (_FOLLOW_TRACEPOINTS if self.follow else ()),
            ),
            self._source(),
            self.cflags(),
            self.source_path,
        )
        try:
            events = bpf[EVENTS_MAP]
            if self.use_perfbuf:
                events.open_perf_buffer(
                    self._on_perf_event, page_cnt=self.ringbuf_pages, lost_cb=self._on_perf_lost
                )
            else:
                events.open_ring_buffer(self._on_ring_event)
        except Exception as exc:
            release(bpf)
            raise ProbeUnavailable(f"opening {EVENTS_MAP.decode()} failed: {exc}") from exc
        self._bpf = bpf
        # Perf-buffer mode: events between the tracepoints' auto-attach (inside BPF())
        # and open_perf_buffer fail to submit; nobody was listening yet, so not "lost".
        self._lost_base = self._stat(STAT_LOST) + self._stat(STAT_INFLIGHT_FULL)

    def follow_pid(self, pid: int) -> None:
        """Trace `pid` and, from now on, every process it forks (needs follow=True)."""
        if self._bpf is None or not self.follow:
            raise RuntimeError("follow_pid() needs follow=True and attach() first")
        table = self._bpf[b"zt_follow"]
        table[table.Key(pid)] = table.Leaf(1)

    def close(self) -> None:
        """Detach and free the BPF program. Safe to call more than once."""
        if self._bpf is None:
            return
        self._lost_at_close = self.lost
        bpf, self._bpf = self._bpf, None
        release(bpf)

    # -- events --------------------------------------------------------------

    def _accept(self, data: int, size: int) -> None:
        raw = ctypes.string_at(data, size)
        try:
            self._pending.append(decode_file_event(raw))
        except MalformedEvent:
            self.malformed += 1

    def _on_ring_event(self, _ctx: Any, data: int, size: int) -> int:
        self._accept(data, size)
        return 0

    def _on_perf_event(self, _cpu: int, data: int, size: int) -> None:
        self._accept(data, size)

    def _on_perf_lost(self, count: int) -> None:
        self._perf_lost += count

    def poll(self, timeout_ms: int) -> list[FileOpenSample | FileRwSample]:
        """Wait up to *timeout_ms* (-1 = forever) and return the samples received."""
        if self._bpf is None:
            raise RuntimeError("poll() before attach()")
        if self.use_perfbuf:
            self._bpf.perf_buffer_poll(timeout=timeout_ms)
        else:
            self._bpf.ring_buffer_poll(timeout=timeout_ms)
        out, self._pending = self._pending, []
        return out

    def _stat(self, index: int) -> int:
        if self._bpf is None:
            return 0
        table = self._bpf[STATS_MAP]
        return int(table[table.Key(index)].value)

    @property
    def lost(self) -> int:
        """Events dropped in the kernel: output buffer full, or in-flight map full."""
        if self._bpf is None:
            return self._lost_at_close
        kernel = self._stat(STAT_LOST) + self._stat(STAT_INFLIGHT_FULL) - self._lost_base
        return kernel + self._perf_lost
