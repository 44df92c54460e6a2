"""Addresses of sampled stacks to frame strings: native (user space) and kernel.

Frames, as every other part of the profiler writes them:
    native:<symbol> [<module>]        a symbol of the mapped file covers the address
    native:<module>+0x<file offset>   the file is mapped there but no symbol covers it
    native:[unknown]+0x<address>      no file mapping covers it (JIT, garbage, process gone)
    kernel:<symbol> | kernel:[unknown]

Never raises for bad input: every way an address can fail to resolve is counted in
:meth:`Symbolizer.counters` instead. Blocking: the first stack of a process reads its
/proc files and parses each ELF file it hits (milliseconds to a second for huge libraries);
after that a stack costs microseconds (see :meth:`Symbolizer.user_frames`).
Thread-safe: the CPU sampler and the CUDA probes may share one instance (one lock; the
cached path holds it for microseconds, a first sight of a large library for up to a second).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence

from zerotrace_collector.symbols.elf_cache import ElfCache, file_key, load_own_vdso
from zerotrace_collector.symbols.elf_symbols import ElfImage
from zerotrace_collector.symbols.kallsyms import KernelSymbols, parse_kallsyms
from zerotrace_collector.symbols.proc_maps import (
    MapIndex,
    Mapping,
    map_files_path,
    parse_proc_maps,
    parse_stat,
    read_proc_text,
)
from zerotrace_collector.symbols.process_state import ProcessState

__all__ = ["Symbolizer"]

# Pseudo mappings that are code with a stable name; [heap], [stack] and anonymous memory are
# not worth a module name (executable code there is a JIT's).
_NAMED_PSEUDO = frozenset(("[vdso]", "[vsyscall]"))
_VDSO = "[vdso]"
_MAX_REREAD_WAIT_S = 60.0


class Symbolizer:
    """Symbolizes user and kernel addresses with bounded, identity-keyed caches.

    Per-process state is keyed by (pid, start time), so a pid reused by a new process gets
    fresh maps; it is also dropped by :meth:`forget` and by LRU eviction past
    *max_processes*. An address outside every known mapping re-reads the maps (a library
    loaded by dlopen since), at most once per *maps_reread_s* seconds of *clock* per process
    (longer after re-reads that did not help), because broken unwinds produce such addresses
    in every stack.
    """

    def __init__(
        self,
        proc_root: str = "/proc",
        kallsyms_path: str = "/proc/kallsyms",
        *,
        clock: Callable[[], float] = time.monotonic,
        max_processes: int = 512,
        max_frames: int = 1 << 18,
        max_files: int = 512,
        max_file_bytes: int = 256 << 20,
        maps_reread_s: float = 0.5,
        kallsyms_reread_s: float = 120.0,
        debug_root: str = "/usr/lib/debug",
    ) -> None:
        self._proc_root = proc_root
        self._kallsyms_path = kallsyms_path
        self._clock = clock
        self._max_processes = max_processes
        # Frames remembered over all processes (~100 bytes each): shared out per process.
        self._max_frames = max_frames
        self._lock = threading.Lock()
        self._maps_reread_s = maps_reread_s
        self._kallsyms_reread_s = kallsyms_reread_s
        # pidfds only watch processes of the live /proc; a copied or fake tree is checked by
        # reading stat each time.
        self._use_pidfd = os.path.realpath(proc_root) == "/proc"
        self._counts: Counter[str] = Counter()
        self._elves = ElfCache(
            self._counts, max_files=max_files, max_bytes=max_file_bytes, debug_root=debug_root
        )
        self._procs: OrderedDict[int, ProcessState] = OrderedDict()
        self._kernel: KernelSymbols | None = None
        self._kernel_read_at = 0.0
        # The vdso is one image per kernel, the same in every (64-bit) process: read once,
        # from this process's own memory. False: not tried yet.
        self._vdso: ElfImage | bool | None = False

    # -- public API --------------------------------------------------------------------

    def user_frames(self, pid: int, addresses: Sequence[int]) -> list[str]:
        """One frame per address, in the same order.

        Cost, measured here (2 shared cores, CPython 3.11): a 20-frame stack of a known
        process 2-6 us when its addresses were seen before (one dict hit each), 35-65 us
        when they are new to the process but its files are parsed (two bisections each);
        the first stack of a process ~50 ms (maps, stat and each new ELF file).
        Stacks from BPF hold return addresses: a caller may pass ``address - 1`` for every
        frame but the innermost, so a call at the very end of a function is not named after
        the next one."""
        with self._lock:
            proc = self._process(pid)
            if proc is None:
                self._counts["process_gone"] += 1
                return [_unknown(a) for a in addresses]
            frames = proc.frames
            return [frames.get(a) or self._frame(proc, a) for a in addresses]

    def prepare(self, pid: int, *, reread: bool = False) -> bool:
        """Read *pid*'s memory maps now, while it surely lives (reread: again, it mapped a
        library since), so that its samples are named even if they are read after it exited:
        cached maps stay the truth for a process that is gone, and its files are then opened
        by their plain paths. False when it is already gone."""
        with self._lock:
            known = pid in self._procs
            proc = self._process(pid)
            if proc is None:
                return False
            if reread and known:
                text = read_proc_text(self._path(pid, "maps"))
                if text:
                    self._counts["maps_reread"] += 1
                    proc.replace_maps(MapIndex(parse_proc_maps(text)), self._clock())
            return True

    def kernel_frames(self, addresses: Sequence[int]) -> list[str]:
        """One frame per kernel address, in the same order (~0.8 us each once kallsyms is
        read; the first call reads it: ~0.25 s for 120,000 symbols)."""
        with self._lock:
            table = self._kernel_table()
            out: list[str] = []
            for address in addresses:
                name = table.lookup(address)
                if name is None:
                    table = self._kernel_miss(table)
                    name = table.lookup(address)
                if name is None:
                    self._counts["kernel_unknown"] += 1
                    out.append("kernel:[unknown]")
                else:
                    out.append("kernel:" + name)
            return out

    def module_of(self, pid: int, address: int) -> str | None:
        """Basename of the file mapped at *address* in *pid* (or [vdso]), else None."""
        with self._lock:
            proc = self._process(pid)
            if proc is None:
                return None
            mapping = self._mapping(proc, address)
            return _module(mapping) if mapping is not None else None

    def forget(self, pid: int) -> None:
        """Drop what is known of *pid*: call it when the process exits, and also when it
        calls exec (same pid, same start time, new image: nothing else reveals that)."""
        with self._lock:
            self._drop(pid)

    def counters(self) -> dict[str, int]:
        """Counts since creation, plus the current sizes 'processes' and 'elf_files'.

        process_gone: stacks of a pid with no /proc entry and no cached maps (frames are
        ``[unknown]``); pid_reused: a pid found to be another process; deleted_file:
        mappings of deleted files (opened through map_files when possible);
        file_replaced: a path now naming another inode; unreadable_file, bad_elf,
        no_symbols: files that could not be opened, parsed, or had no symbols;
        unmapped_address, no_symbol: frames given as [unknown]+address or module+offset;
        maps_read, maps_reread, elf_loaded, debug_file_used: the work done;
        process_evicted, elf_evicted: cache bounds at work; kernel_unknown,
        kallsyms_unavailable, kallsyms_reread: the same for the kernel; vdso_unreadable.
        """
        with self._lock:
            out = dict(self._counts)
            out["processes"] = len(self._procs)
            out["elf_files"] = len(self._elves)
            return out

    def _drop(self, pid: int) -> None:
        proc = self._procs.pop(pid, None)
        if proc is not None:
            proc.close()

    # -- processes -----------------------------------------------------------------------

    def _process(self, pid: int) -> ProcessState | None:
        proc = self._procs.get(pid)
        if proc is not None:
            self._procs.move_to_end(pid)
            exited = proc.exited()
            if exited is False:
                return proc
            stat = self._stat(pid)
            # Gone: the cached maps are still the truth for samples taken before it exited.
            if stat is None:
                return proc
            state, start = stat
            # Start times count clock ticks (10 ms), so a pid reused within one tick has the
            # same start; a watched process known to have exited that is not a zombie is
            # therefore another process, whatever its start time.
            if start == proc.start_time and (exited is None or state in ("Z", "X")):
                return proc
            self._counts["pid_reused"] += 1
            self._drop(pid)
        return self._new_process(pid)

    def _new_process(self, pid: int) -> ProcessState | None:
        pidfd = self._open_pidfd(pid)
        stat = self._stat(pid)
        text = read_proc_text(self._path(pid, "maps"))
        if stat is None or not text:
            if pidfd is not None:
                os.close(pidfd)
            return None
        self._counts["maps_read"] += 1
        maps = MapIndex(parse_proc_maps(text))
        proc = ProcessState(pid, stat[1], maps, self._clock(), self._maps_reread_s)
        if pidfd is not None:
            proc.watch(pidfd)
        self._procs[pid] = proc
        while len(self._procs) > self._max_processes:
            _, old = self._procs.popitem(last=False)
            old.close()
            self._counts["process_evicted"] += 1
        return proc

    def _open_pidfd(self, pid: int) -> int | None:
        if not self._use_pidfd:
            return None
        try:
            return os.pidfd_open(pid)
        except OSError:
            return None

    def _stat(self, pid: int) -> tuple[str, int] | None:
        text = read_proc_text(self._path(pid, "stat"))
        return None if text is None else parse_stat(text)

    def _path(self, pid: int, name: str) -> str:
        return os.path.join(self._proc_root, str(pid), name)

    def _mapping(self, proc: ProcessState, address: int) -> Mapping | None:
        mapping = proc.maps.find(address)
        if mapping is not None:
            return mapping
        now = self._clock()
        if now - proc.maps_read_at < proc.reread_wait:
            return None
        text = read_proc_text(self._path(proc.pid, "maps"))
        proc.maps_read_at = now
        if text:
            self._counts["maps_reread"] += 1
            proc.replace_maps(MapIndex(parse_proc_maps(text)), now)
        mapping = proc.maps.find(address)
        # A re-read that still leaves the address outside was for garbage (a broken unwind,
        # common without frame pointers): wait twice as long before the next, up to a
        # minute, since a large process's maps cost milliseconds to read. A useful one
        # resets the wait.
        if mapping is None:
            proc.reread_wait = min(proc.reread_wait * 2, _MAX_REREAD_WAIT_S)
        else:
            proc.reread_wait = self._maps_reread_s
        return mapping

    # -- frames ----------------------------------------------------------------------------

    def _frame(self, proc: ProcessState, address: int) -> str:
        mapping = self._mapping(proc, address)
        if mapping is None:
            # Not remembered: a library mapped there later must still be found.
            self._counts["unmapped_address"] += 1
            return _unknown(address)
        module = _module(mapping)
        if module is None:
            self._counts["unmapped_address"] += 1
            frame = _unknown(address)
        else:
            offset = mapping.file_offset(address)
            image = proc.image(mapping, lambda m: self._image(proc.pid, m))
            symbol = image.symbol_at(offset) if image is not None else None
            if symbol is None:
                self._counts["no_symbol"] += 1
                frame = f"native:{module}+0x{offset:x}".replace(";", ":")
            else:  # [vdso] shows as 'native:clock_gettime [vdso]'
                frame = f"native:{symbol} [{module.strip('[]')}]".replace(";", ":")
        proc.remember(address, frame, max(1024, self._max_frames // len(self._procs)))
        return frame

    def _image(self, pid: int, mapping: Mapping) -> ElfImage | None:
        """The ELF image of a mapped file, opened through a path that reaches the very file
        the process mapped: its root (containers), or map_files (deleted or replaced)."""
        if mapping.path == _VDSO:
            return self._vdso_image()
        if not mapping.is_file:
            return None
        candidates: list[str] = []
        if mapping.deleted:
            self._counts["deleted_file"] += 1
        else:
            candidates.append(os.path.join(self._proc_root, str(pid), "root") + mapping.path)
            candidates.append(mapping.path)
        candidates.append(map_files_path(self._proc_root, pid, mapping))
        replaced = False
        for path in candidates:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if st.st_ino != mapping.inode:  # another file under that name now
                replaced = True
                continue
            return self._elves.get(file_key(st), path, mapping.path)
        self._counts["file_replaced" if replaced else "unreadable_file"] += 1
        return None

    def _kernel_table(self) -> KernelSymbols:
        if self._kernel is None:
            self._kernel = self._read_kallsyms()
            if len(self._kernel) == 0:
                self._counts["kallsyms_unavailable"] += 1
        return self._kernel

    def _kernel_miss(self, table: KernelSymbols) -> KernelSymbols:
        """Re-read kallsyms after a miss, rarely: modules and BPF programs (bpf_prog_*) come
        and go, but a re-read costs ~0.25 s of CPU."""
        if len(table) == 0 or self._clock() - self._kernel_read_at < self._kallsyms_reread_s:
            return table
        self._counts["kallsyms_reread"] += 1
        self._kernel = self._read_kallsyms()
        return self._kernel

    def _read_kallsyms(self) -> KernelSymbols:
        self._kernel_read_at = self._clock()
        return parse_kallsyms(read_proc_text(self._kallsyms_path) or "")

    def _vdso_image(self) -> ElfImage | None:
        if self._vdso is False:
            self._vdso = load_own_vdso()
            if self._vdso is None:
                self._counts["vdso_unreadable"] += 1
        return self._vdso if isinstance(self._vdso, ElfImage) else None


def _unknown(address: int) -> str:
    return f"native:[unknown]+0x{address & 0xFFFFFFFFFFFFFFFF:x}"


def _module(mapping: Mapping) -> str | None:
    if mapping.is_file or mapping.path in _NAMED_PSEUDO:
        return mapping.module
    return None
