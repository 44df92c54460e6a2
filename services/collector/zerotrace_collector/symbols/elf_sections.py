"""ELF section headers and the two small sections symbolization reads besides the tables.

pyelftools' ``iter_sections`` builds a typed object per section, and for a GNU hash
section that means parsing the whole hash table: about 0.8 s for libclang-cpp alone, for
nothing we use. The headers are fixed-size records, so they are unpacked here with
``struct`` from the offsets in the ELF header pyelftools already read.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Final, NamedTuple

__all__ = [
    "SHF_EXECINSTR",
    "SHT_DYNSYM",
    "SHT_NOTE",
    "SHT_SYMTAB",
    "Section",
    "parse_build_id",
    "parse_debuglink",
    "read_section",
    "read_sections",
]

SHT_SYMTAB: Final = 2
SHT_NOTE: Final = 7
SHT_NOBITS: Final = 8
SHT_DYNSYM: Final = 11
SHF_EXECINSTR: Final = 0x4
_NT_GNU_BUILD_ID: Final = 3
# More sections than this in one file is a corrupt header, not a real object.
_MAX_SECTIONS: Final = 1 << 16


class Section(NamedTuple):
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int


def _file_size(stream: BinaryIO) -> int:
    here = stream.tell()
    size = stream.seek(0, 2)
    stream.seek(here)
    return size


def read_section(stream: BinaryIO, section: Section) -> bytes:
    """The bytes of a section (empty for SHT_NOBITS). Raises ValueError when the header
    points outside the file, rather than trying to allocate what a corrupt size says."""
    if section.type == SHT_NOBITS or section.size == 0:
        return b""
    if section.offset + section.size > _file_size(stream):
        raise ValueError(f"section {section.name!r} runs past the end of the file")
    stream.seek(section.offset)
    return stream.read(section.size)


def read_sections(
    stream: BinaryIO, *, elfclass: int, little_endian: bool, shoff: int, shnum: int, shstrndx: int
) -> list[Section]:
    """Every section header, named. *shnum* 0 with a table present means the real count is
    in the first header's size field (files with 65280 sections or more)."""
    if shoff == 0:
        return []
    if elfclass == 64:
        fmt, entsize = "IIQQQQIIQQ", 64
    else:
        fmt, entsize = "IIIIIIIIII", 40
    unpack = struct.Struct(("<" if little_endian else ">") + fmt).unpack
    if shoff + entsize > _file_size(stream):
        raise ValueError("section headers past the end of the file")
    stream.seek(shoff)
    first = unpack(stream.read(entsize))
    count = shnum or first[5]
    if count > _MAX_SECTIONS or shoff + count * entsize > _file_size(stream):
        raise ValueError(f"{count} section headers do not fit the file")
    stream.seek(shoff)
    raw = stream.read(count * entsize)
    rows = [unpack(raw[i : i + entsize]) for i in range(0, len(raw), entsize)]
    # name, type, flags, addr, offset, size, link
    unnamed = [Section("", r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]
    if not 0 < shstrndx < len(unnamed):
        return unnamed
    names = read_section(stream, unnamed[shstrndx])
    out = []
    for r, sec in zip(rows, unnamed, strict=True):
        end = names.find(b"\0", r[0])
        name = names[r[0] : end if end >= 0 else len(names)].decode("utf-8", "replace")
        out.append(sec._replace(name=name))
    return out


def parse_build_id(notes: bytes, little_endian: bool) -> str | None:
    """The GNU build id (hex) among the notes of one SHT_NOTE section, else None."""
    order = "<" if little_endian else ">"
    pos = 0
    while pos + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from(order + "III", notes, pos)
        name_at = pos + 12
        desc_at = name_at + (namesz + 3) // 4 * 4
        pos = desc_at + (descsz + 3) // 4 * 4
        if desc_at + descsz > len(notes):
            return None
        if kind == _NT_GNU_BUILD_ID and notes[name_at : name_at + namesz] == b"GNU\0":
            return notes[desc_at : desc_at + descsz].hex() or None
    return None


def parse_debuglink(data: bytes) -> str | None:
    """The file name in a .gnu_debuglink section (a CRC follows it; not checked)."""
    name = data.split(b"\0", 1)[0]
    return name.decode("utf-8", "replace") or None
