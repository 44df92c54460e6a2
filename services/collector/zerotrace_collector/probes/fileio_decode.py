"""Decode raw ``struct zt_file_open_event`` and ``struct zt_file_rw_event`` records (see
``bpf/zerotrace_events.h``); :func:`decode_file_event` picks by the type tag.

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

``zt_file_rw_event`` (ZT_EVENT_FILE_RW, 4): type, pid, tid, s32 fd, cgroup_id, start_ns,
end_ns, s64 ret (bytes or -errno), u32 op (1 read, 2 write), u32 pad, comm[16], path[256];
328 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from ..errors import MalformedEvent
from .event_layout import (
    COMM_LEN,
    MAX_TRAILING,
    PATH_MAX,
    ZT_EVENT_FILE_OPEN,
    ZT_EVENT_FILE_RW,
    RawEvent,
)

__all__ = [
    "EVENT_SIZE",
    "EVENT_STRUCT",
    "FileOpenSample",
    "FileRwSample",
    "decode_file_event",
    "decode_file_open",
]

EVENT_STRUCT: Final = struct.Struct(f"<IIIiQQQq{COMM_LEN}s{PATH_MAX}s")
EVENT_SIZE: Final = EVENT_STRUCT.size

if EVENT_SIZE != 320:  # pragma: no cover - guards edits to the format string
    raise ImportError("zt_file_open_event layout drifted from bpf/zerotrace_events.h")

RW_STRUCT: Final = struct.Struct(f"<IIIiQQQqII{COMM_LEN}s{PATH_MAX}s")
if RW_STRUCT.size != 328:  # pragma: no cover - guards edits to the format string
    raise ImportError("zt_file_rw_event layout drifted from bpf/zerotrace_events.h")
# zt_file_rw_event.op (ZT_FILE_OP_*) -> raw.fileio's FileOp
RW_OPS: Final = {1: "READ", 2: "WRITE"}


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


@dataclass(frozen=True, slots=True)
class FileRwSample:
    """One completed read or write on a file descriptor whose open the probe saw."""

    pid: int
    tid: int
    fd: int
    cgroup_id: int
    start_mono_ns: int
    end_mono_ns: int
    ret: int
    """Bytes moved, or ``-errno``."""
    op: str
    """``READ`` or ``WRITE``."""
    comm: str
    path: str
    """The path the fd was opened with (as :attr:`FileOpenSample.path`); empty when the fd
    was closed by another thread during the call."""

    @property
    def duration_ns(self) -> int:
        return self.end_mono_ns - self.start_mono_ns


def decode_file_event(buf: RawEvent) -> FileOpenSample | FileRwSample:
    """Decode one event of the file-I/O ring, by its type tag."""
    if len(buf) >= 4 and struct.unpack_from("<I", buf, 0)[0] == ZT_EVENT_FILE_RW:
        return decode_file_rw(buf)
    return decode_file_open(buf)


def decode_file_rw(buf: RawEvent) -> FileRwSample:
    size = len(buf)
    if size < RW_STRUCT.size or size > RW_STRUCT.size + MAX_TRAILING:
        raise MalformedEvent(f"file read/write event of {size} bytes, expected {RW_STRUCT.size}")
    tag, pid, tid, fd, cgroup_id, start_ns, end_ns, ret, op, _pad, comm_raw, path_raw = (
        RW_STRUCT.unpack_from(buf, 0)
    )
    if tag != ZT_EVENT_FILE_RW:
        raise MalformedEvent(f"wrong event type tag {tag}, expected {ZT_EVENT_FILE_RW}")
    if end_ns < start_ns:
        raise MalformedEvent(f"end_ns {end_ns} precedes start_ns {start_ns}")
    if op not in RW_OPS:
        raise MalformedEvent(f"unknown file op {op}")
    return FileRwSample(
        pid=pid,
        tid=tid,
        fd=fd,
        cgroup_id=cgroup_id,
        start_mono_ns=start_ns,
        end_mono_ns=end_ns,
        ret=ret,
        op=RW_OPS[op],
        comm=_cstr(comm_raw, "comm").decode("utf-8", "backslashreplace"),
        path=_cstr(path_raw, "path").decode("utf-8", "backslashreplace"),
    )


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
