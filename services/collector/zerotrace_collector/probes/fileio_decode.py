"""Decode raw ``struct zt_file_open_event`` records (see ``bpf/zerotrace_events.h``).

Pure Python: no bcc import, safe to use in unit tests and offline tools.

Wire layout (host byte order, little-endian; no implicit padding)::

    off  size  field
      0     4  u32 type         ZT_EVENT_FILE_OPEN (1)
      4     4  u32 pid          tgid
      8     4  u32 tid
     12     4  s32 open_flags
     16     8  u64 cgroup_id
     24     8  u64 start_ns     CLOCK_MONOTONIC
     32     8  u64 end_ns       CLOCK_MONOTONIC
     40     8  s64 ret          fd or -errno
     48    16  char comm[16]    NUL-terminated
     64   256  char path[256]   NUL-terminated
    320        total
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from ..errors import MalformedEvent
from .event_layout import COMM_LEN, MAX_TRAILING, PATH_MAX, ZT_EVENT_FILE_OPEN, RawEvent

__all__ = [
    "EVENT_SIZE",
    "EVENT_STRUCT",
    "FileOpenSample",
    "decode_file_open",
]

EVENT_STRUCT: Final = struct.Struct(f"<IIIiQQQq{COMM_LEN}s{PATH_MAX}s")
EVENT_SIZE: Final = EVENT_STRUCT.size

if EVENT_SIZE != 320:  # pragma: no cover - guards edits to the format string
    raise ImportError("zt_file_open_event layout drifted from bpf/zerotrace_events.h")


@dataclass(frozen=True, slots=True)
class FileOpenSample:
    """One completed ``openat(2)`` call observed in the kernel."""

    pid: int
    tid: int
    cgroup_id: int
    start_mono_ns: int
    end_mono_ns: int
    ret: int
    """New file descriptor, or ``-errno`` on failure."""
    flags: int
    """``openat`` flags argument (``os.O_*`` bits)."""
    comm: str
    path: str
    """As passed by the caller (may be relative); truncated at 255 bytes. Bytes that are
    not UTF-8 appear as ``\\xNN`` escapes, so the string always re-encodes as UTF-8
    (Avro, JSON) -- unlike :func:`os.fsdecode`'s lone surrogates."""

    @property
    def duration_ns(self) -> int:
        return self.end_mono_ns - self.start_mono_ns

    @property
    def ok(self) -> bool:
        return self.ret >= 0


def _cstr(raw: bytes, field: str) -> bytes:
    end = raw.find(b"\0")
    if end < 0:
        raise MalformedEvent(f"{field} is not NUL-terminated")
    return raw[:end]


def decode_file_open(buf: RawEvent) -> FileOpenSample:
    """Decode one raw event; raise :class:`MalformedEvent` if it is not valid."""
    size = len(buf)
    if size < EVENT_SIZE:
        raise MalformedEvent(f"file-open event too short: {size} bytes, need {EVENT_SIZE}")
    if size > EVENT_SIZE + MAX_TRAILING:
        raise MalformedEvent(f"file-open event too long: {size} bytes, expected {EVENT_SIZE}")
    (
        tag,
        pid,
        tid,
        open_flags,
        cgroup_id,
        start_ns,
        end_ns,
        ret,
        comm_raw,
        path_raw,
    ) = EVENT_STRUCT.unpack_from(buf, 0)
    if tag != ZT_EVENT_FILE_OPEN:
        raise MalformedEvent(
            f"wrong event type tag {tag}, expected {ZT_EVENT_FILE_OPEN} (file-open)"
        )
    if end_ns < start_ns:
        raise MalformedEvent(f"end_ns {end_ns} precedes start_ns {start_ns}")
    comm = _cstr(comm_raw, "comm").decode("utf-8", "backslashreplace")
    path = _cstr(path_raw, "path").decode("utf-8", "backslashreplace")
    return FileOpenSample(
        pid=pid,
        tid=tid,
        cgroup_id=cgroup_id,
        start_mono_ns=start_ns,
        end_mono_ns=end_ns,
        ret=ret,
        flags=open_flags,
        comm=comm,
        path=path,
    )
