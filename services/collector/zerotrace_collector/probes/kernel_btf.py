"""Byte offsets of kernel struct members, from the running kernel's BTF.

bcc compiles against the kernel headers Debian ships (6.1), not the running kernel's (6.18),
so a probe must not dereference kernel structs by the headers' layout. The kernel describes
its own layout in /sys/kernel/btf/vmlinux; a probe that needs a member's offset gets it from
there and receives it as a -D flag.

Pure Python, no bcc. Format: https://docs.kernel.org/bpf/btf.html (header, then the type
section, then the string section; type ids count from 1 in the order types appear).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

VMLINUX: Final = Path("/sys/kernel/btf/vmlinux")

_MAGIC: Final = 0xEB9F
_HEADER: Final = struct.Struct("<HBBIIIII")  # magic, version, flags, hdr_len, 4 offsets/lengths
_TYPE: Final = struct.Struct("<III")  # name_off, info, size_or_type
_MEMBER: Final = struct.Struct("<III")  # name_off, type, offset

_STRUCT, _UNION = 4, 5
# Bytes each kind appends after struct btf_type: a fixed part and a part per vlen item.
_EXTRA: Final[dict[int, tuple[int, int]]] = {
    1: (4, 0),  # INT
    2: (0, 0),  # PTR
    3: (12, 0),  # ARRAY
    4: (0, 12),  # STRUCT
    5: (0, 12),  # UNION
    6: (0, 8),  # ENUM
    7: (0, 0),  # FWD
    8: (0, 0),  # TYPEDEF
    9: (0, 0),  # VOLATILE
    10: (0, 0),  # CONST
    11: (0, 0),  # RESTRICT
    12: (0, 0),  # FUNC
    13: (0, 8),  # FUNC_PROTO
    14: (4, 0),  # VAR
    15: (0, 12),  # DATASEC
    16: (0, 0),  # FLOAT
    17: (4, 0),  # DECL_TAG
    18: (0, 0),  # TYPE_TAG
    19: (0, 12),  # ENUM64
}


class BtfError(Exception):
    """The BTF is unreadable, or lacks a struct or member asked for. One line."""


@dataclass(frozen=True, slots=True)
class _Member:
    name: str
    type_id: int
    bit_offset: int


@dataclass(frozen=True, slots=True)
class _Composite:
    name: str
    members: tuple[_Member, ...]


class KernelBtf:
    """The structs and unions of one BTF blob, by name; members with their offsets."""

    def __init__(self, blob: bytes) -> None:
        if len(blob) < _HEADER.size:
            raise BtfError(f"BTF too short: {len(blob)} bytes")
        magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = (
            _HEADER.unpack_from(blob, 0)
        )
        if magic != _MAGIC:
            raise BtfError(f"not BTF: magic 0x{magic:04x}")
        types_at, strings_at = hdr_len + type_off, hdr_len + str_off
        if types_at + type_len > len(blob) or strings_at + str_len > len(blob):
            raise BtfError("BTF sections run past the end of the data")
        self._strings = blob[strings_at : strings_at + str_len]
        self._composites: dict[int, _Composite] = {}
        self._by_name: dict[str, int] = {}
        self._read_types(blob, types_at, types_at + type_len)

    @classmethod
    def running_kernel(cls, path: Path = VMLINUX) -> KernelBtf:
        try:
            return cls(path.read_bytes())
        except OSError as exc:
            raise BtfError(f"cannot read {path}: {exc.strerror}") from exc

    def _string(self, offset: int) -> str:
        end = self._strings.find(b"\0", offset)
        return self._strings[offset : end if end >= 0 else None].decode("ascii", "replace")

    def _read_types(self, blob: bytes, at: int, end: int) -> None:
        type_id = 1
        while at < end:
            name_off, info, _size = _TYPE.unpack_from(blob, at)
            kind, vlen, kind_flag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
            if kind not in _EXTRA:
                raise BtfError(f"unknown BTF kind {kind} at type {type_id}")
            fixed, per_item = _EXTRA[kind]
            body = at + _TYPE.size
            if kind in (_STRUCT, _UNION):
                members = []
                for i in range(vlen):
                    m_name, m_type, m_offset = _MEMBER.unpack_from(blob, body + i * _MEMBER.size)
                    # With kind_flag the offset's top 8 bits are a bitfield's size.
                    bits = m_offset & 0xFFFFFF if kind_flag else m_offset
                    members.append(_Member(self._string(m_name), m_type, bits))
                name = self._string(name_off)
                self._composites[type_id] = _Composite(name, tuple(members))
                if name and kind == _STRUCT:
                    self._by_name.setdefault(name, type_id)
            at = body + fixed + per_item * vlen
            type_id += 1

    def member_offset(self, struct_name: str, member: str) -> int:
        """Byte offset of *member* in struct *struct_name*, looking inside anonymous
        structs and unions as C does; a dotted path (``thread.fsbase``) goes through nested
        structs held by value. Raises :class:`BtfError` when any part is missing."""
        type_id = self._by_name.get(struct_name)
        if type_id is None:
            raise BtfError(f"the kernel's BTF has no struct {struct_name}")
        total, where = 0, struct_name
        for part in member.split("."):
            found = self._find(type_id, part, depth=0)
            if found is None:
                raise BtfError(f"struct {where} has no member {part}")
            bits, type_id = found
            total += bits
            where = f"{where}.{part}"
        if total % 8:
            raise BtfError(f"{struct_name}.{member} is a bitfield")
        return total // 8

    def _find(self, type_id: int, member: str, depth: int) -> tuple[int, int] | None:
        """(bit offset, type id) of *member* in composite *type_id*."""
        composite = self._composites.get(type_id)
        if composite is None or depth > 8:
            return None
        for m in composite.members:
            if m.name == member:
                return m.bit_offset, m.type_id
            if not m.name:  # an anonymous struct or union: its members are ours
                inner = self._find(m.type_id, member, depth + 1)
                if inner is not None:
                    return m.bit_offset + inner[0], inner[1]
        return None

    def offsets(self, wanted: Iterable[tuple[str, str, str]]) -> Mapping[str, int]:
        """{macro: offset} for (macro, struct, member) triples."""
        return {macro: self.member_offset(s, m) for macro, s, m in wanted}


def offset_cflags(
    members: tuple[tuple[str, str, str], ...], btf_path: Path = VMLINUX
) -> tuple[list[str], str | None]:
    """``-D<macro>=<offset>`` for (macro, struct, member) triples of the running kernel (bcc
    compiles against other headers, so a BPF program reads kernel structs at these), or no
    flags and one line saying why not."""
    flags, why = _offset_flags(members, btf_path)
    return list(flags), why


@functools.lru_cache(maxsize=16)
def _offset_flags(
    members: tuple[tuple[str, str, str], ...], btf_path: Path
) -> tuple[tuple[str, ...], str | None]:
    # Once per set and process: a parse takes ~0.4 s, and the parsed BTF (~15 MB) is not kept.
    try:
        offsets = KernelBtf.running_kernel(btf_path).offsets(members)
    except BtfError as exc:
        return (), str(exc)
    return tuple(f"-D{macro}={offset}" for macro, offset in offsets.items()), None
