"""The memory map of a process: /proc/PID/maps and the start time in /proc/PID/stat.

``parse_proc_maps`` and ``parse_start_time`` are pure; ``read_proc_text`` is the one read
both go through. :class:`MapIndex` finds the mapping that covers an address by bisection
over the sorted start addresses (a process has hundreds of mappings, not millions).
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MapIndex",
    "Mapping",
    "map_files_path",
    "parse_proc_maps",
    "parse_start_time",
    "parse_stat",
    "read_proc_memory",
    "read_proc_text",
]

_DELETED: Final = " (deleted)"


@dataclass(frozen=True, slots=True)
class Mapping:
    """One line of /proc/PID/maps: [start, end) mapped from *offset* of *path*."""

    start: int
    end: int
    perms: str
    offset: int
    dev: tuple[int, int]
    """(major, minor) of the file's device; (0, 0) for anonymous memory."""
    inode: int
    path: str
    """The file, a pseudo name such as ``[vdso]`` or ``[heap]``, or '' when anonymous.
    A ``(deleted)`` suffix is taken off and reported by :attr:`deleted`."""
    deleted: bool = False

    @property
    def is_file(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")

    @property
    def module(self) -> str:
        """Basename of the mapped file (or the pseudo name); '' for anonymous memory."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def range_name(self) -> str:
        """The entry's name under /proc/PID/map_files/ (lower-case hex, no leading zeros)."""
        return f"{self.start:x}-{self.end:x}"

    def file_offset(self, address: int) -> int:
        """Offset into the mapped file of an address inside this mapping."""
        return address - self.start + self.offset


def _parse_line(line: str) -> Mapping | None:
    # The path is everything after the inode and may contain spaces, so split at most 5 times.
    cols = line.split(maxsplit=5)
    if len(cols) < 5:
        return None
    try:
        lo, _, hi = cols[0].partition("-")
        major, _, minor = cols[3].partition(":")
        start, end = int(lo, 16), int(hi, 16)
        offset = int(cols[2], 16)
        dev = (int(major, 16), int(minor, 16))
        inode = int(cols[4])
    except ValueError:
        return None
    if end <= start:
        return None
    path = cols[5].strip() if len(cols) == 6 else ""
    deleted = path.endswith(_DELETED) and inode != 0
    if deleted:
        path = path[: -len(_DELETED)]
    return Mapping(start, end, cols[1], offset, dev, inode, path, deleted)


def parse_proc_maps(text: str) -> list[Mapping]:
    """Mappings of /proc/PID/maps text, sorted by start; malformed lines are skipped."""
    out = [m for m in map(_parse_line, text.splitlines()) if m is not None]
    out.sort(key=lambda m: m.start)
    return out


def parse_stat(stat_text: str) -> tuple[str, int] | None:
    """(state, start time) from /proc/PID/stat text: field 3 (R, S, D, Z, ...) and field 22
    (start time in clock ticks after boot), or None when malformed.

    The command name (field 2) is in parentheses and may itself hold spaces and ')', so the
    fields are counted from the last ')'.
    """
    _, paren, rest = stat_text.rpartition(")")
    if not paren:
        return None
    fields = rest.split()
    # rest starts at field 3 (state); field 22 is therefore index 19.
    if len(fields) < 20:
        return None
    try:
        return fields[0], int(fields[19])
    except ValueError:
        return None


def parse_start_time(stat_text: str) -> int | None:
    """Field 22 of /proc/PID/stat, or None (see :func:`parse_stat`)."""
    stat = parse_stat(stat_text)
    return None if stat is None else stat[1]


def read_proc_text(path: str) -> str | None:
    """The text of a /proc file, or None when it cannot be read (process gone, no right)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except (OSError, ValueError):
        return None


def read_proc_memory(path: str, address: int, length: int) -> bytes | None:
    """*length* bytes at *address* of a process, through its /proc/PID/mem, or None."""
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(address)
            return f.read(length)
    except (OSError, ValueError, OverflowError):
        return None


class MapIndex:
    """The mappings of one process, searchable by address.

    Mappings do not overlap (the kernel splits them), so the last one starting at or below
    an address is the only candidate.
    """

    __slots__ = ("_starts", "mappings")

    def __init__(self, mappings: list[Mapping]) -> None:
        self.mappings = sorted(mappings, key=lambda m: m.start)
        self._starts = [m.start for m in self.mappings]

    def find(self, address: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            return None
        m = self.mappings[i]
        return m if address < m.end else None

    def __len__(self) -> int:
        return len(self.mappings)


def map_files_path(proc_root: str, pid: int, mapping: Mapping) -> str:
    """/proc/PID/map_files/START-END: opens the very file mapped, deleted or in another
    mount namespace (root only)."""
    return os.path.join(proc_root, str(pid), "map_files", mapping.range_name)
