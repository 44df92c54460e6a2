"""Function symbols of an ELF file, and the map from file offsets to its virtual addresses.

A sampled address becomes an offset into the mapped file (the mapping says where the file
was mapped); the ELF program headers (PT_LOAD) turn that file offset into the address the
symbols are written in. That one rule serves position-dependent executables, PIE
executables and shared objects alike, whatever base address the loader chose.

pyelftools reads the headers; the symbol entries themselves are unpacked with
``struct.iter_unpack`` in one pass, because pyelftools builds a Container per symbol and a
large library (libtorch_cuda: ~10^6 symbols) would take minutes that way. Names stay in the
string table's bytes and are decoded only for the symbols that are hit.

``parse_elf`` is pure over a seekable stream; ``load_elf`` is the one function that opens a
file. Both raise :class:`ElfError` for a file that is not a usable ELF.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from dataclasses import dataclass
from typing import BinaryIO, Final

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from zerotrace_collector.symbols.demangle import demangle

__all__ = ["ElfError", "ElfImage", "LoadSegment", "SymbolTable", "load_elf", "parse_elf"]

_STT_NOTYPE: Final = 0
_STT_FUNC: Final = 2
_STT_GNU_IFUNC: Final = 10
_CODE_TYPES: Final = frozenset((_STT_NOTYPE, _STT_FUNC, _STT_GNU_IFUNC))
_SHF_EXECINSTR: Final = 0x4
_BIND_RANK: Final = {1: 0, 2: 1, 0: 2}  # GLOBAL, WEAK, LOCAL


class ElfError(Exception):
    """The file is not an ELF object this module can read (truncated, not ELF, corrupt)."""


@dataclass(frozen=True, slots=True)
class LoadSegment:
    """A PT_LOAD program header: *filesz* bytes at file *offset* are mapped at *vaddr*."""

    offset: int
    filesz: int
    vaddr: int


class SymbolTable:
    """Code symbols as three parallel sorted arrays; :meth:`lookup` is one bisection.

    Each symbol covers [start, end). A symbol without a size (hand-written assembly) is
    taken to run up to the next symbol or the end of its section, as perf does.
    """

    __slots__ = ("_ends", "_names", "_offs", "_starts", "_strtab")

    def __init__(self, starts: array[int], ends: array[int], offs: array[int], strtab: bytes):
        self._starts = starts
        self._ends = ends
        self._offs = offs
        self._strtab = strtab
        self._names: dict[int, str] = {}

    def lookup(self, vaddr: int) -> str | None:
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0 or vaddr >= self._ends[i]:
            return None
        name = self._names.get(i)
        if name is None:
            off = self._offs[i]
            end = self._strtab.find(b"\0", off)
            raw = self._strtab[off : end if end >= 0 else len(self._strtab)]
            name = demangle(raw.decode("utf-8", "replace")).replace(";", ":")
            self._names[i] = name
        return name

    def __len__(self) -> int:
        return len(self._starts)

    @property
    def weight(self) -> int:
        """Approximate bytes held, for the cache's budget."""
        return len(self._strtab) + 24 * len(self._starts)


EMPTY_TABLE: Final = SymbolTable(array("Q"), array("Q"), array("Q"), b"")


@dataclass(frozen=True, slots=True)
class ElfImage:
    """What symbolization needs from one ELF file."""

    segments: tuple[LoadSegment, ...]
    symbols: SymbolTable
    source: str
    """Which table the symbols come from: 'symtab', 'dynsym' or 'none'."""
    build_id: str | None = None
    debuglink: str | None = None

    def vaddr_of(self, file_offset: int) -> int | None:
        """The virtual address of a file offset, or None if no loaded segment holds it."""
        for seg in self.segments:
            if seg.offset <= file_offset < seg.offset + seg.filesz:
                return file_offset - seg.offset + seg.vaddr
        return None

    def symbol_at(self, file_offset: int) -> str | None:
        vaddr = self.vaddr_of(file_offset)
        return None if vaddr is None else self.symbols.lookup(vaddr)

    def with_symbols(self, other: ElfImage) -> ElfImage:
        """This file's segments with another file's symbols (a separate debug file)."""
        return ElfImage(self.segments, other.symbols, other.source, self.build_id, self.debuglink)


def _exec_sections(elf: ELFFile) -> dict[int, int]:
    """Section index -> end address, for sections holding code."""
    out: dict[int, int] = {}
    for idx, sec in enumerate(elf.iter_sections()):
        if sec["sh_flags"] & _SHF_EXECINSTR:
            out[idx] = sec["sh_addr"] + sec["sh_size"]
    return out


def _symbol_table(elf: ELFFile, sec_type: str, code: dict[int, int]) -> SymbolTable | None:
    for sec in elf.iter_sections():
        if sec["sh_type"] == sec_type:
            break
    else:
        return None
    strtab = bytes(elf.get_section(sec["sh_link"]).data())
    data = sec.data()
    if elf.elfclass == 64:
        fmt, size, order = "IBBHQQ", 24, (0, 4, 5, 1, 3)
    else:
        fmt, size, order = "IIIBBH", 16, (0, 1, 2, 3, 5)
    fmt = ("<" if elf.little_endian else ">") + fmt
    rows: list[tuple[int, int, int, int, int]] = []  # start, rank, size, name, shndx
    n_name, n_value, n_size, n_info, n_shndx = order
    for entry in struct.iter_unpack(fmt, data[: len(data) - len(data) % size]):
        info, shndx, name = entry[n_info], entry[n_shndx], entry[n_name]
        if (info & 0xF) not in _CODE_TYPES or shndx not in code or name == 0:
            continue
        first = strtab[name : name + 1]
        if first in (b"$", b".", b""):  # mapping symbols and local labels, not functions
            continue
        # Aliases (getpid, __getpid): a function over a label, then the plainer name,
        # then global over weak over local.
        plain = 0 if first != b"_" else 1 if strtab[name + 1 : name + 2] != b"_" else 2
        rank = (0 if info & 0xF else 64) + plain * 8 + _BIND_RANK.get(info >> 4, 3)
        rows.append((entry[n_value], rank, entry[n_size], name, shndx))
    rows.sort()
    unique = [r for i, r in enumerate(rows) if i == 0 or rows[i - 1][0] != r[0]]  # best alias
    starts, ends, offs = array("Q"), array("Q"), array("Q")
    for i, (start, _rank, sym_size, name, shndx) in enumerate(unique):
        end = start + sym_size
        if sym_size == 0:
            section_end = code[shndx]
            end = min(unique[i + 1][0], section_end) if i + 1 < len(unique) else section_end
        starts.append(start)
        ends.append(max(end, start + 1))
        offs.append(name)
    return SymbolTable(starts, ends, offs, strtab)


def _build_id(elf: ELFFile) -> str | None:
    sec = elf.get_section_by_name(".note.gnu.build-id")
    if sec is None:
        return None
    for note in sec.iter_notes():  # type: ignore[attr-defined]
        if note["n_type"] == "NT_GNU_BUILD_ID":
            return str(note["n_desc"])
    return None


def _debuglink(elf: ELFFile) -> str | None:
    sec = elf.get_section_by_name(".gnu_debuglink")
    if sec is None:
        return None
    name = bytes(sec.data()).split(b"\0", 1)[0]
    return name.decode("utf-8", "replace") or None


def parse_elf(stream: BinaryIO) -> ElfImage:
    """Segments and code symbols of the ELF in *stream* (.symtab, else .dynsym)."""
    try:
        elf = ELFFile(stream)
        segments = tuple(
            LoadSegment(seg["p_offset"], seg["p_filesz"], seg["p_vaddr"])
            for seg in elf.iter_segments()
            if seg["p_type"] == "PT_LOAD"
        )
        code = _exec_sections(elf)
        table, source = _symbol_table(elf, "SHT_SYMTAB", code), "symtab"
        if table is None or len(table) == 0:
            table, source = _symbol_table(elf, "SHT_DYNSYM", code), "dynsym"
        if table is None or len(table) == 0:
            table, source = EMPTY_TABLE, "none"
        return ElfImage(segments, table, source, _build_id(elf), _debuglink(elf))
    except (ELFError, struct.error, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ElfError(str(exc) or type(exc).__name__) from exc


def load_elf(path: str) -> ElfImage:
    """Open and parse one file. Raises OSError (unreadable) or ElfError (not usable)."""
    with open(path, "rb") as f:
        return parse_elf(f)
