"""Python frames as text: (code object address, instruction pointer) from the BPF walker ->
``'py:<qualname> (<file>:<line>)'``.

The code object is read from the target's memory (``/proc/<pid>/mem``, which needs the same
ptrace access as py-spy's ``process_vm_readv``). What a code object says (name, file, first
line, line table) is cached per (pid, process start time, code address): the start time keeps
a reused pid from inheriting the names of the process that had it before. A code object is
immutable while it lives; one freed and another allocated at the same address in the same
process would be misnamed until forgotten, which this cache accepts as py-spy does.

The line comes from the instruction offset and ``co_linetable`` (3.11+ location table,
CPython's Objects/locations.md; 3.10's (byte delta, line delta) pairs, its
Objects/lnotab_notes.txt); decoding is pure and lives in :func:`line_for` and
:func:`line_for_pairs`.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from .python_procs import CodeLayout, PythonProcess

__all__ = [
    "CodeInfo",
    "PythonSymbols",
    "decode_str",
    "line_for",
    "line_for_pairs",
    "python_frame",
]

_MAX_TEXT: Final = 4096
_MAX_LINETABLE: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class CodeInfo:
    qualname: str
    filename: str
    firstlineno: int
    linetable: bytes


def _varint(table: bytes, pos: int) -> tuple[int, int]:
    # 6-bit groups, least significant first; bit 6 says another group follows.
    b = table[pos]
    value, shift, pos = b & 63, 6, pos + 1
    while b & 64:
        b = table[pos]
        value |= (b & 63) << shift
        shift += 6
        pos += 1
    return value, pos


def line_for(linetable: bytes, firstlineno: int, lasti: int) -> int:
    """The source line of the instruction at code unit *lasti* (-1 = before the first one,
    which CPython reports as the first line); *firstlineno* when the table has no entry."""
    if lasti < 0:
        return firstlineno
    line, addr, pos = firstlineno, 0, 0
    try:
        while pos < len(linetable):
            first = linetable[pos]
            code, length = (first >> 3) & 15, (first & 7) + 1
            pos += 1
            delta: int | None = 0
            if code == 15:  # no location
                delta = None
            elif code == 14:  # long form: line delta, end line, start col, end col
                raw, pos = _varint(linetable, pos)
                delta = -(raw >> 1) if raw & 1 else raw >> 1
                for _ in range(3):
                    _, pos = _varint(linetable, pos)
            elif code == 13:  # no column: line delta only
                raw, pos = _varint(linetable, pos)
                delta = -(raw >> 1) if raw & 1 else raw >> 1
            elif code >= 10:  # one-line forms: delta in the code, two column bytes
                delta = code - 10
                pos += 2
            else:  # short forms: same line, one column byte
                pos += 1
            if delta is not None:
                line += delta
            if addr <= lasti < addr + length:
                return line if delta is not None else firstlineno
            addr += length
    except IndexError:
        pass
    return firstlineno


def line_for_pairs(linetable: bytes, firstlineno: int, lasti: int) -> int:
    """3.10: the source line of the instruction at code unit *lasti* from a table of
    (byte-offset delta: unsigned, line delta: signed, -128 = no line) pairs; *firstlineno*
    before the first instruction, for an instruction with no line, and past the table."""
    if lasti < 0:
        return firstlineno
    offset, start, line = lasti * 2, 0, firstlineno
    for pos in range(0, len(linetable) - 1, 2):
        end = start + linetable[pos]
        delta = linetable[pos + 1] - 256 if linetable[pos + 1] > 127 else linetable[pos + 1]
        if delta != -128:
            line += delta
        if start <= offset < end:
            return line if delta != -128 else firstlineno
        start = end
    return firstlineno


def decode_str(
    header: bytes, read: Callable[[int, int], bytes], addr: int, code: CodeLayout
) -> str:
    """Text of a compact str object whose first bytes (>= 40) are *header*; '?' if not compact.

    PyASCIIObject: length at 16, state bits at 32 (interned:2, kind:3, compact:1, ascii:1)."""
    length = struct.unpack_from("<q", header, 16)[0]
    state = struct.unpack_from("<I", header, 32)[0]
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or not 0 <= length <= _MAX_TEXT or kind not in (1, 2, 4):
        return "?"
    if ascii_:
        return read(addr + code.ascii_data, length).decode("ascii", "replace")
    data = read(addr + code.compact_data, length * kind)
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
    return data.decode(codec, "replace")


def _held(info: CodeInfo | None) -> int:
    """About what a cached code object costs: its texts and line table, plus the entry."""
    if info is None:
        return 64
    return 160 + len(info.linetable) + len(info.filename) + len(info.qualname)


def python_frame(info: CodeInfo, line: int) -> str:
    """The frame text; ';' would split a folded stack, so it becomes ':'."""
    return f"py:{info.qualname} ({info.filename}:{line})".replace(";", ":")


# A frame whose code object could not be read (gone, or not a code object): kept, so the
# stack's depth and the frames around it stay right.
UNREADABLE_PY_FRAME: Final = "py:<unreadable> (?:0)"


class PythonSymbols:
    """Names Python frames of live processes. Not thread-safe; one per collector loop.

    Counters: py_code_unreadable (memory gone or not a code object), py_process_gone."""

    def __init__(
        self, *, max_codes: int = 65_536, max_code_bytes: int = 64 << 20, proc: str = "/proc"
    ) -> None:
        self._proc = proc
        self._max_codes = max_codes
        # Line tables may be large (and a garbage code address may name a large "table"):
        # the cache is bounded in bytes too.
        self._max_code_bytes = max_code_bytes
        self._code_bytes = 0
        self._codes: OrderedDict[tuple[int, int, int], CodeInfo | None] = OrderedDict()
        # Finished frame texts by (pid, start time, code, instruction): a hot loop is sampled
        # at the same few instructions, and decoding a line table costs more than a lookup.
        self._texts: OrderedDict[tuple[int, int, int, int], str] = OrderedDict()
        self._fds: dict[int, tuple[int, int]] = {}  # pid -> (start_time, fd)
        self.counts: Counter[str] = Counter()

    def _fd(self, proc: PythonProcess) -> int | None:
        held = self._fds.get(proc.pid)
        if held is not None and held[0] == proc.start_time:
            return held[1]
        self.forget(proc.pid)
        try:
            fd = os.open(f"{self._proc}/{proc.pid}/mem", os.O_RDONLY)
        except OSError:
            self.counts["py_process_gone"] += 1
            return None
        self._fds[proc.pid] = (proc.start_time, fd)
        return fd

    def _read_code(self, fd: int, proc: PythonProcess, addr: int) -> CodeInfo | None:
        lay = proc.layout.code

        def read(at: int, size: int) -> bytes:
            data = os.pread(fd, size, at)
            if len(data) != size:
                raise OSError("short read")
            return data

        def text(at: int) -> str:
            return decode_str(read(at, 40), read, at, lay)

        try:
            head = read(addr, lay.head_size)
            filename = text(struct.unpack_from("<Q", head, lay.filename)[0])
            qualname = text(struct.unpack_from("<Q", head, lay.qualname)[0])
            firstlineno = struct.unpack_from("<i", head, lay.firstlineno)[0]
            table_addr = struct.unpack_from("<Q", head, lay.linetable)[0]
            size = struct.unpack("<q", read(table_addr + 16, 8))[0]  # PyBytesObject.ob_size
            table = read(table_addr + 32, size) if 0 <= size <= _MAX_LINETABLE else b""
        except (OSError, OverflowError, struct.error, ValueError):
            return None
        return CodeInfo(qualname, filename, firstlineno, table)

    def frame(self, proc: PythonProcess, code_addr: int, instr: int) -> str | None:
        """The frame text, or None when the code object cannot be read (counted)."""
        at = (proc.pid, proc.start_time, code_addr, instr)
        text = self._texts.get(at)
        if text is not None:
            self._texts.move_to_end(at)
            return text
        key = (proc.pid, proc.start_time, code_addr)
        if key in self._codes:
            self._codes.move_to_end(key)
            info = self._codes[key]
        else:
            fd = self._fd(proc)
            if fd is None:
                return None
            info = self._remember(key, self._read_code(fd, proc, code_addr))
        if info is None:
            self.counts["py_code_unreadable"] += 1
            return None
        lay = proc.layout.code
        if lay.lasti_index:
            line = line_for_pairs(info.linetable, info.firstlineno, ctypes.c_int32(instr).value)
        else:
            lasti = (instr - code_addr - lay.code_adaptive) // 2
            line = line_for(info.linetable, info.firstlineno, lasti)
        text = python_frame(info, line)
        self._texts[at] = text
        if len(self._texts) > 4 * self._max_codes:
            self._texts.popitem(last=False)
        return text

    def read_ahead(self, proc: PythonProcess, leaf_first: Iterable[tuple[int, int]]) -> None:
        """Read the code objects of these frames now, into the cache (nothing counted: the
        naming that follows counts): a batch's native and kernel symbols can take long the
        first time (ELF files, kallsyms), and a short-lived process may be gone by then."""
        fd = None
        for code, _ in leaf_first:
            key = (proc.pid, proc.start_time, code)
            if not code or key in self._codes:
                continue
            fd = fd if fd is not None else self._fd(proc)
            if fd is None:
                return
            self._remember(key, self._read_code(fd, proc, code))

    def _remember(self, key: tuple[int, int, int], info: CodeInfo | None) -> CodeInfo | None:
        self._codes[key] = info
        self._code_bytes += _held(info)
        while self._codes and (
            len(self._codes) > self._max_codes or self._code_bytes > self._max_code_bytes
        ):
            self._code_bytes -= _held(self._codes.popitem(last=False)[1])
        return info

    def frames(self, proc: PythonProcess, leaf_first: Iterable[tuple[int, int]]) -> list[str]:
        """The frames the BPF walker recorded, (code, instruction) leaf first, named root
        first; code 0 is a shim frame of a C -> Python call and is left out."""
        return [
            self.frame(proc, code, instr) or UNREADABLE_PY_FRAME
            for code, instr in reversed(list(leaf_first))
            if code
        ]

    def forget(self, pid: int) -> None:
        """Drop what is held for *pid* (call when it exits or its start time changed)."""
        held = self._fds.pop(pid, None)
        if held is not None:
            os.close(held[1])
        for key in [k for k in self._codes if k[0] == pid]:
            self._code_bytes -= _held(self._codes.pop(key))
        for at in [k for k in self._texts if k[0] == pid]:
            del self._texts[at]

    def close(self) -> None:
        for pid in list(self._fds):
            self.forget(pid)
