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
Not thread-safe: one sampler thread owns it.
"""

from __future__ import annotations

import os
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence

from zerotrace_collector.symbols.elf_cache import ElfCache, file_key
from zerotrace_collector.symbols.elf_symbols import ElfImage
from zerotrace_collector.symbols.kallsyms import KernelSymbols, parse_kallsyms
from zerotrace_collector.symbols.proc_maps import (
    MapIndex,
    Mapping,
    map_files_path,
    parse_proc_maps,
    parse_start_time,
    read_proc_text,
)
from zerotrace_collector.symbols.process_state import ProcessState

__all__ = ["Symbolizer"]

# Pseudo mappings that are code with a stable name; [heap], [stack] and anonymous memory are
# not worth a module name (executable code there is a JIT's).
_NAMED_PSEUDO = frozenset(("[vdso]", "[vsyscall]"))


class Symbolizer:
    """Symbolizes user and kernel addresses with bounded, identity-keyed caches.

    Per-process state is keyed by (pid, start time), so a pid reused by a new process gets
    fresh maps; it is also dropped by :meth:`forget` and by LRU eviction past
    *max_processes*. An address outside every known mapping re-reads the maps (a library
    loaded by dlopen since), at most once per *maps_reread_s* seconds of *clock* per process,
    because broken unwinds produce such addresses in every stack.
    """

    def __init__(
        self,
        proc_root: str = "/proc",
        kallsyms_path: str = "/proc/kallsyms",
        *,
        clock: Callable[[], float] = time.monotonic,
        max_processes: int = 512,
        max_files: int = 512,
        max_file_bytes: int = 512 << 20,
        maps_reread_s: float = 0.5,
        debug_root: str = "/usr/lib/debug",
    ) -> None:
        self._proc_root = proc_root
        self._kallsyms_path = kallsyms_path
        self._clock = clock
        self._max_processes = max_processes
        self._maps_reread_s = maps_reread_s
        # pidfds only watch processes of the live /proc; a copied or fake tree is checked by
        # reading stat each time.
        self._use_pidfd = os.path.realpath(proc_root) == "/proc"
        self._counts: Counter[str] = Counter()
        self._elves = ElfCache(
            self._counts, max_files=max_files, max_bytes=max_file_bytes, debug_root=debug_root
        )
        self._procs: OrderedDict[int, ProcessState] = OrderedDict()
        self._kernel: KernelSymbols | None = None

    # -- public API --------------------------------------------------------------------

    def user_frames(self, pid: int, addresses: Sequence[int]) -> list[str]:
        """One frame per address, in the same order."""
        proc = self._process(pid)
        if proc is None:
            self._counts["process_gone"] += 1
            return [f"native:[unknown]+0x{a:x}" for a in addresses]
        frames = proc.frames
        return [frames.get(a) or self._frame(proc, a) for a in addresses]

    def kernel_frames(self, addresses: Sequence[int]) -> list[str]:
        table = self._kernel_table()
        out: list[str] = []
        for address in addresses:
            name = table.lookup(address)
            if name is None:
                self._counts["kernel_unknown"] += 1
                out.append("kernel:[unknown]")
            else:
                out.append("kernel:" + name)
        return out

    def module_of(self, pid: int, address: int) -> str | None:
        """Basename of the file mapped at *address* in *pid* (or [vdso]), else None."""
        proc = self._process(pid)
        if proc is None:
            return None
        mapping = self._mapping(proc, address)
        return _module(mapping) if mapping is not None else None

    def forget(self, pid: int) -> None:
        proc = self._procs.pop(pid, None)
        if proc is not None:
            proc.close()

    def counters(self) -> dict[str, int]:
        out = dict(self._counts)
        out["processes"] = len(self._procs)
        out["elf_files"] = len(self._elves)
        return out

    # -- processes -----------------------------------------------------------------------

    def _process(self, pid: int) -> ProcessState | None:
        proc = self._procs.get(pid)
        if proc is not None:
            self._procs.move_to_end(pid)
            exited = proc.exited()
            if exited is False:
                return proc
            start = self._start_time(pid)
            # Gone (or a zombie with the same start): the cached maps are still the truth
            # for samples taken before it exited.
            if start is None or start == proc.start_time:
                return proc
            self._counts["pid_reused"] += 1
            self.forget(pid)
        return self._new_process(pid)

    def _new_process(self, pid: int) -> ProcessState | None:
        pidfd = self._open_pidfd(pid)
        start = self._start_time(pid)
        text = read_proc_text(self._path(pid, "maps"))
        if start is None or not text:
            if pidfd is not None:
                os.close(pidfd)
            return None
        self._counts["maps_read"] += 1
        proc = ProcessState(pid, start, MapIndex(parse_proc_maps(text)), self._clock())
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

    def _start_time(self, pid: int) -> int | None:
        text = read_proc_text(self._path(pid, "stat"))
        return None if text is None else parse_start_time(text)

    def _path(self, pid: int, name: str) -> str:
        return os.path.join(self._proc_root, str(pid), name)

    def _mapping(self, proc: ProcessState, address: int) -> Mapping | None:
        mapping = proc.maps.find(address)
        if mapping is not None:
            return mapping
        now = self._clock()
        if now - proc.maps_read_at < self._maps_reread_s:
            return None
        text = read_proc_text(self._path(proc.pid, "maps"))
        proc.maps_read_at = now
        if text:
            self._counts["maps_reread"] += 1
            proc.replace_maps(MapIndex(parse_proc_maps(text)), now)
        return proc.maps.find(address)

    # -- frames ----------------------------------------------------------------------------

    def _frame(self, proc: ProcessState, address: int) -> str:
        mapping = self._mapping(proc, address)
        module = _module(mapping) if mapping is not None else None
        if mapping is None or module is None:
            self._counts["unmapped_address"] += 1
            frame = f"native:[unknown]+0x{address:x}"
        else:
            offset = mapping.file_offset(address)
            image = proc.image(mapping, lambda m: self._image(proc.pid, m))
            symbol = image.symbol_at(offset) if image is not None else None
            if symbol is None:
                self._counts["no_symbol"] += 1
                frame = f"native:{module}+0x{offset:x}".replace(";", ":")
            else:
                frame = f"native:{symbol} [{module}]".replace(";", ":")
        proc.remember(address, frame)
        return frame

    def _image(self, pid: int, mapping: Mapping) -> ElfImage | None:
        """The ELF image of a mapped file, opened through a path that reaches the very file
        the process mapped: its root (containers), or map_files (deleted or replaced)."""
        if not mapping.is_file:
            return None
        candidates: list[str] = []
        if mapping.deleted:
            self._counts["deleted_file"] += 1
        else:
            candidates.append(os.path.join(self._proc_root, str(pid), "root") + mapping.path)
            candidates.append(mapping.path)
        candidates.append(map_files_path(self._proc_root, pid, mapping))
        for path in candidates:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if st.st_ino != mapping.inode:
                self._counts["file_replaced"] += 1
                continue
            return self._elves.get(file_key(st), path, mapping.path)
        self._counts["unreadable_file"] += 1
        return None

    def _kernel_table(self) -> KernelSymbols:
        if self._kernel is None:
            text = read_proc_text(self._kallsyms_path)
            self._kernel = parse_kallsyms(text or "")
            if len(self._kernel) == 0:
                self._counts["kallsyms_unavailable"] += 1
        return self._kernel


def _module(mapping: Mapping) -> str | None:
    if mapping.is_file or mapping.path in _NAMED_PSEUDO:
        return mapping.module
    return None
