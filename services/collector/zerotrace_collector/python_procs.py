"""CPython processes: which version, where its ``_PyRuntime`` is, and the struct offsets the BPF
frame walker (``bpf/python_stack.h``) and the code-object reader (:mod:`.python_symbols`) need.

Supported: CPython 3.10 to 3.13 on x86-64. 3.11 and later keep ``_PyInterpreterFrame``s; 3.10
keeps a chain of ``PyFrameObject``s whose instruction is ``f_lasti`` (a code-unit index, not a
pointer), has no ``co_qualname`` (frames show ``co_name``), and, having no
``native_thread_id``, knows its threads only by ``pthread_self()``: the walker matches those
against the thread's FS base (see ``TID_PTHREAD``). 3.9 and older show native stacks only.
Offsets are fixed per minor version (CPython keeps struct layouts stable
within one) and were checked on live interpreters by ``tests/unit/python_layout_probe.py``,
which finds each field by the value it must hold; ``tests/unit/test_python_procs.py`` runs it
for every interpreter on the machine and compares. 3.13 publishes its own offsets at the start
of ``_PyRuntime`` (``_Py_DebugOffsets``, for debuggers): for 3.13 they are read from the
process and used instead of the table, and a free-threaded build (other object layout) is
refused rather than misread.

A process is recognised from ``/proc/<pid>/maps``: the module named ``python3.X`` or
``libpython3.X.so*`` that defines ``_PyRuntime`` (a static binary, or the shared library of a
``--enable-shared`` build).  ``parse_maps`` and ``interpreter_module`` are pure; ``inspect``
reads /proc and the ELF file.
"""

from __future__ import annotations

import os
import re
import struct
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "LAYOUTS",
    "OWNED_BY_GENERATOR",
    "TID_NATIVE",
    "TID_PTHREAD",
    "CodeLayout",
    "Layout",
    "Mapping",
    "PyOffsets",
    "PythonProcess",
    "inspect",
    "interpreter_module",
    "layout_from_debug_offsets",
    "parse_maps",
    "pid_namespace",
    "process_start_time",
    "python_pids",
]

NO_CFRAME: Final = 0xFFFFFFFF  # ZT_PY_NO_CFRAME in python_stack.h
NO_SHIM: Final = 0xFFFFFFFF  # ZT_PY_NO_SHIM
# How the walker recognises the sampled thread's PyThreadState (ZT_PY_TID_* in python_stack.h).
TID_NATIVE: Final = 0  # tstate_native_tid holds native_thread_id, the tid (3.11+)
TID_PTHREAD: Final = 1  # it holds thread_id, pthread_self(): on x86-64 the thread's FS base (3.10)
# How the task-key walk (zt_python_task) tells a frame a generator or coroutine owns: 3.11+ by
# its owner byte (FRAME_OWNED_BY_GENERATOR, 1 in 3.11 to 3.13), 3.10 by its f_gen pointer
# (PyOffsets.gen_field/gen_size/gen_value).
OWNED_BY_GENERATOR: Final = 1
CODE_FLAGS: Final = 48  # PyCodeObject.co_flags in 3.11 to 3.13 (after the var head and 3 refs)


@dataclass(frozen=True)
class PyOffsets:
    """What the BPF walker reads; field order and widths mirror ``struct zt_py_offsets``."""

    runtime_interp_head: int
    interp_threads_head: int
    tstate_next: int
    tstate_native_tid: int
    tstate_frame: int
    cframe_current: int
    frame_code: int
    frame_previous: int
    frame_instr: int
    frame_owner: int
    owner_shim: int
    tid_match: int = TID_NATIVE
    # A frame a generator or coroutine owns: its field at gen_field (0: frame_owner) of
    # gen_size bytes equals gen_value, or, gen_value 0, is not 0 (python_stack.h).
    gen_field: int = 0
    gen_size: int = 1
    gen_value: int = OWNED_BY_GENERATOR
    code_flags: int = CODE_FLAGS
    # PyThreadState.context, the entered contextvars.Context (python_stack.h "Tasks made by
    # tasks"); 0: not known, the task key is the thread's own coroutine frame only.
    tstate_context: int = 0

    def task_window(self) -> tuple[int, int, int, int, int, int]:
        """What zt_python_task reads of a frame, as packed: (window start, size, offset of
        `previous` in it, offset of the 8-byte word holding the generator field in it, bits
        to shift that word left, then right, to leave the field); all 0 when the two fields
        are not 8-byte words within ZT_PY_WINDOW (128) bytes of each other, which no known
        layout does (then no task keys)."""
        field = self.gen_field or self.frame_owner
        word = field & ~7
        start = min(self.frame_previous, word)
        size = max(self.frame_previous, word) + 8 - start
        if self.frame_previous % 8 or size >= 128 or field % 8 + self.gen_size > 8:
            return (0, 0, 0, 0, 0, 0)
        above = (8 - self.gen_size - field % 8) * 8
        below = (8 - self.gen_size) * 8
        return (start, size, self.frame_previous - start, word - start, above, below)

    def pack(self, runtime_addr: int, pidns: tuple[int, int] = (0, 0)) -> bytes:
        """*pidns*: (kernel dev_t, inode) of the process's pid namespace, (0, 0) for the
        initial one."""
        return struct.pack(
            "<Q22I2Q",
            runtime_addr,
            self.runtime_interp_head,
            self.interp_threads_head,
            self.tstate_next,
            self.tstate_native_tid,
            self.tstate_frame,
            self.cframe_current,
            self.frame_code,
            self.frame_previous,
            self.frame_instr,
            self.frame_owner,
            self.owner_shim,
            self.tid_match,
            *self.task_window(),
            self.gen_value,
            self.code_flags,
            self.tstate_context,
            0,  # reserved
            *pidns,
        )


@dataclass(frozen=True)
class CodeLayout:
    """Where user space finds names and lines in a code object and its strings."""

    filename: int
    qualname: int
    linetable: int
    firstlineno: int
    code_adaptive: int  # start of the bytecode inside the code object (0: not used, 3.10)
    ascii_data: int  # sizeof(PyASCIIObject): compact ASCII text starts here
    compact_data: int  # sizeof(PyCompactUnicodeObject): other compact text starts here
    # 3.10: the walker's instruction word is f_lasti (an int, code units) with f_lineno above
    # it, and co_linetable holds (byte delta, line delta) pairs instead of a location table.
    lasti_index: bool = False

    @property
    def head_size(self) -> int:
        """Bytes of the code object to read to reach every field used here."""
        return max(self.filename, self.qualname, self.linetable, self.firstlineno) + 8


@dataclass(frozen=True)
class Layout:
    walker: PyOffsets
    code: CodeLayout


# 3.11/3.12: tstate->cframe->current_frame; the 3.11 _PyCFrame starts with use_tracing, 3.12's
# does not. 3.12 and 3.13 push shim frames (owner FRAME_OWNED_BY_CSTACK = 3) when C calls into
# Python; they have no code of their own. 3.11 marks those by is_entry instead, and its frames
# are all real. 3.11's PyASCIIObject still has the wstr pointer (48 bytes, not 40).
# 3.10: tstate->frame is the innermost PyFrameObject (f_back, f_code, f_lasti); the walker
# reads 8 bytes at f_lasti, f_lineno comes along in the upper half. No owner byte: 108 is
# f_state, read and ignored (owner_shim NO_SHIM). "qualname" is co_name. A 3.10 frame that a
# generator or coroutine owns has f_gen (88) set; its code's co_flags is at 36 (3.11+: 48).
LAYOUTS: Final[dict[tuple[int, int], Layout]] = {
    (3, 10): Layout(
        PyOffsets(
            32,
            8,
            8,
            176,
            24,
            NO_CFRAME,
            32,
            24,
            96,
            108,
            NO_SHIM,
            TID_PTHREAD,
            gen_field=88,  # f_gen: the generator, or NULL
            gen_size=8,
            gen_value=0,
            code_flags=36,
            tstate_context=240,
        ),
        CodeLayout(104, 112, 120, 40, 0, 48, 72, lasti_index=True),
    ),
    (3, 11): Layout(
        PyOffsets(40, 16, 8, 160, 56, 8, 32, 48, 56, 69, NO_SHIM, tstate_context=224),
        CodeLayout(112, 128, 136, 72, 184, 48, 72),
    ),
    (3, 12): Layout(
        PyOffsets(40, 72, 8, 144, 56, 0, 0, 8, 56, 70, 3, tstate_context=208),
        CodeLayout(112, 128, 136, 68, 192, 40, 56),
    ),
    (3, 13): Layout(
        PyOffsets(632, 7344, 8, 160, 72, NO_CFRAME, 0, 8, 56, 70, 3, tstate_context=208),
        CodeLayout(112, 128, 136, 68, 200, 40, 56),
    ),
}


_DEBUG_COOKIE: Final = b"xdebugpy"
DEBUG_OFFSETS_SIZE: Final = 352  # the part of 3.13's _Py_DebugOffsets read here


def layout_from_debug_offsets(raw: bytes) -> Layout | None:
    """The 3.13 layout from the first DEBUG_OFFSETS_SIZE bytes of ``_PyRuntime``, or None when
    they are not the debug offsets of a 3.13 default (GIL) build.

    3.13's _Py_DebugOffsets: cookie, version (PY_VERSION_HEX), free_threaded, then one u64 per
    field in groups (runtime state at 24, interpreter state at 48, thread state at 152,
    interpreter frame at 224, code object at 272), each group starting with its size."""
    if len(raw) < DEBUG_OFFSETS_SIZE or raw[:8] != _DEBUG_COOKIE:
        return None
    words = struct.unpack_from(f"<{DEBUG_OFFSETS_SIZE // 8}Q", raw)
    version, free_threaded = words[1], words[2]
    if version >> 16 != 0x030D or free_threaded:
        return None

    def at(offset: int) -> int:
        return int(words[offset // 8])

    walker = PyOffsets(
        runtime_interp_head=at(40),
        interp_threads_head=at(72),
        tstate_next=at(168),
        tstate_native_tid=at(200),
        tstate_frame=at(184),  # current_frame
        cframe_current=NO_CFRAME,
        frame_code=at(240),  # f_executable
        frame_previous=at(232),
        frame_instr=at(248),
        frame_owner=at(264),
        owner_shim=3,  # FRAME_OWNED_BY_CSTACK
        # gen_*, code_flags: not in the table; the defaults hold (the owner byte, co_flags 48);
        # nor is PyThreadState.context: the fixed table's
        tstate_context=LAYOUTS[(3, 13)].walker.tstate_context,
    )
    strings = LAYOUTS[(3, 13)].code  # the str layout is not in 3.13's table
    code = CodeLayout(
        filename=at(280),
        qualname=at(296),
        linetable=at(304),
        firstlineno=at(312),
        code_adaptive=at(344),
        ascii_data=strings.ascii_data,
        compact_data=strings.compact_data,
    )
    return Layout(walker, code)


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    offset: int
    inode: int
    path: str


_MAPS_LINE = re.compile(
    r"^([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ (\d+)[ \t]*(.*)$", re.MULTILINE
)
_INTERPRETER = re.compile(r"^(?:lib)?python(\d)\.(\d+)[a-z]*(?:\.so(?:\.[\d.]+)?)?$")


def parse_maps(text: str) -> list[Mapping]:
    """The file-backed mappings of a /proc/<pid>/maps text."""
    out = []
    for m in _MAPS_LINE.finditer(text):
        path = m.group(5).strip()
        if int(m.group(4)) and path.startswith("/"):
            out.append(
                Mapping(
                    int(m.group(1), 16),
                    int(m.group(2), 16),
                    int(m.group(3), 16),
                    int(m.group(4)),
                    path,
                )
            )
    return out


def interpreter_module(maps: Sequence[Mapping]) -> tuple[str, tuple[int, int], int] | None:
    """(path, version, load address of its file offset 0) of the CPython module, if any.

    A shared build maps both ``python3.X`` and ``libpython3.X.so``; the library is the one
    defining ``_PyRuntime``, so it wins."""
    found: dict[str, tuple[tuple[int, int], int]] = {}
    for m in maps:
        if m.path in found and m.offset:
            continue
        name = os.path.basename(m.path.removesuffix(" (deleted)"))
        match = _INTERPRETER.match(name)
        if match and m.offset == 0:
            found[m.path] = ((int(match.group(1)), int(match.group(2))), m.start)
    if not found:
        return None
    path = max(found, key=lambda p: os.path.basename(p).startswith("lib"))
    version, base = found[path]
    return path, version, base


def process_start_time(stat_text: str) -> int:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): with the pid, names one process
    for its whole life, since a reused pid gets a later start time."""
    # comm (field 2) may hold spaces and parentheses; everything after the last ')' is fixed.
    return int(stat_text.rsplit(")", 1)[1].split()[19])


@dataclass(frozen=True)
class PythonProcess:
    pid: int
    start_time: int
    version: tuple[int, int]
    module: str  # path of the interpreter module (executable or libpython)
    runtime_addr: int
    layout: Layout
    # Where the interpreter module is mapped, (start, end) pairs: a leaf address inside is the
    # evaluation loop itself, whose native frames the merge drops (stack_merge).
    module_ranges: tuple[tuple[int, int], ...] = ()
    pidns: tuple[int, int] = (0, 0)  # see pid_namespace()

    @property
    def module_name(self) -> str:
        return os.path.basename(self.module)

    def in_interpreter(self, address: int) -> bool:
        return any(lo <= address < hi for lo, hi in self.module_ranges)


# PROC_PID_INIT_INO: the inode of the initial pid namespace, the same on every kernel.
_INIT_PIDNS_INO: Final = 0xEFFFFFFC


def pid_namespace(st_dev: int, st_ino: int) -> tuple[int, int]:
    """(dev, inode) of a pid namespace as bpf_get_ns_current_pid_tgid wants them, from a stat
    of /proc/<pid>/ns/pid; (0, 0) for the initial namespace, where no translation is needed.
    The kernel compares dev in its own encoding (major << 20 | minor), not glibc's."""
    if st_ino == _INIT_PIDNS_INO:
        return (0, 0)
    return ((os.major(st_dev) << 20) | os.minor(st_dev), st_ino)


# (dev, inode, size, mtime) of an interpreter file -> what _read_runtime_symbol found. Keyed by
# the file, not its path: every process reaches it through its own /proc/<pid>/root.
_RUNTIME_SYMBOLS: OrderedDict[tuple[int, int, int, int], tuple[int, int] | None] = OrderedDict()
_RUNTIME_SYMBOLS_MAX: Final = 256


def _runtime_symbol(path: str, st: os.stat_result) -> tuple[int, int] | None:
    """(st_value of _PyRuntime, vaddr of the first PT_LOAD) of an ELF file, or None; read once
    per file identity, so an upgraded interpreter is read again."""
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if identity in _RUNTIME_SYMBOLS:
        _RUNTIME_SYMBOLS.move_to_end(identity)
        return _RUNTIME_SYMBOLS[identity]
    found = _read_runtime_symbol(path)
    _RUNTIME_SYMBOLS[identity] = found
    while len(_RUNTIME_SYMBOLS) > _RUNTIME_SYMBOLS_MAX:
        _RUNTIME_SYMBOLS.popitem(last=False)
    return found


def defined_symbol(symtab: bytes, strtab: bytes, name: bytes, elfclass: int = 64) -> int | None:
    """The value of the defined symbol *name* in a raw little-endian symbol table section and
    its string table, or None. A straight scan of the fixed-size records: pyelftools' lookup
    by name builds a dict of every symbol first (0.2 s for python3.11), and the first Python
    process must be read at once, while its first samples are being taken."""
    offsets = {0} if strtab.startswith(name + b"\0") else set()
    at = strtab.find(b"\0" + name + b"\0")
    while at >= 0:
        offsets.add(at + 1)
        at = strtab.find(b"\0" + name + b"\0", at + 1)
    if not offsets:
        return None
    fmt, size = ("<IBBHQQ", 24) if elfclass == 64 else ("<IIIBBH", 16)
    for row in struct.iter_unpack(fmt, symtab[: len(symtab) - len(symtab) % size]):
        st_name, st_value, st_shndx = (
            (row[0], row[4], row[3]) if elfclass == 64 else (row[0], row[1], row[5])
        )
        # A module that only imports the symbol lists it undefined (section 0), at value 0.
        if st_name in offsets and st_shndx != 0 and st_value:
            return int(st_value)
    return None


def _read_runtime_symbol(path: str) -> tuple[int, int] | None:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    from .symbols.elf_sections import SHT_DYNSYM, SHT_SYMTAB, read_section, read_sections

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if not elf.little_endian:
                return None
            first_load = min(
                (s["p_vaddr"] & ~0xFFF for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"),
                default=0,
            )
            head = elf.header
            sections = read_sections(
                f,
                elfclass=elf.elfclass,
                little_endian=True,
                shoff=head["e_shoff"],
                shnum=head["e_shnum"],
                shstrndx=head["e_shstrndx"],
            )
            for kind in (SHT_DYNSYM, SHT_SYMTAB):
                for table in (s for s in sections if s.type == kind and s.link < len(sections)):
                    strings = read_section(f, sections[table.link])
                    value = defined_symbol(
                        read_section(f, table), strings, b"_PyRuntime", elf.elfclass
                    )
                    if value is not None:
                        return value, int(first_load)
    except (OSError, ELFError, ValueError, struct.error):
        return None
    return None


def inspect(pid: int, proc: str = "/proc") -> PythonProcess | None:
    """The CPython facts of *pid*, or None when it is not a supported CPython (or is gone).

    Reads /proc/<pid>/maps and /proc/<pid>/stat, and the interpreter's ELF file through
    /proc/<pid>/root so a process in another mount namespace is read from its own files."""
    try:
        with open(f"{proc}/{pid}/maps") as f:
            maps_text = f.read()
        with open(f"{proc}/{pid}/stat") as f:
            start_time = process_start_time(f.read())
    except (OSError, ValueError, IndexError):
        return None
    maps = parse_maps(maps_text)
    found = interpreter_module(maps)
    if found is None:
        return None
    path, version, base = found
    layout = LAYOUTS.get(version)
    if layout is None:
        return None
    file = f"{proc}/{pid}/root{path}"
    try:
        st = os.stat(file)
    except OSError:
        return None
    symbol = _runtime_symbol(file, st)
    if symbol is None:
        return None
    value, first_load = symbol
    runtime = base - first_load + value
    if version >= (3, 13):
        try:
            with open(f"{proc}/{pid}/mem", "rb") as mem:
                mem.seek(runtime)
                published = layout_from_debug_offsets(mem.read(DEBUG_OFFSETS_SIZE))
        except (OSError, ValueError, OverflowError):
            return None
        if published is None:
            return None  # free-threaded, or not the layout this reader knows
        layout = published
    ranges = tuple((m.start, m.end) for m in maps if m.path == path)
    try:
        ns = os.stat(f"{proc}/{pid}/ns/pid")
    except OSError:
        return None
    pidns = pid_namespace(ns.st_dev, ns.st_ino)
    return PythonProcess(pid, start_time, version, path, runtime, layout, ranges, pidns)


def python_pids(pids: Iterable[int], proc: str = "/proc") -> list[PythonProcess]:
    """The supported CPython processes among *pids* (those gone or not Python are skipped)."""
    return [p for p in (inspect(pid, proc) for pid in pids) if p is not None]
