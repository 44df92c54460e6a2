"""Decode ``struct zt_profile_event`` (bpf/profile.c) from ring-buffer bytes (pure).

The layout depends on two compile-time depths (``ZT_STACK_DEPTH`` for the kernel and user
stacks, ``ZT_PY_MAX_DEPTH`` for Python frames), so a decoder is built for the depths the
program was compiled with: :class:`ProfileLayout`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from ..errors import MalformedEvent
from .event_layout import (
    COMM_LEN,
    DEFAULT_PY_DEPTH,
    DEFAULT_STACK_DEPTH,
    PY_STACK_HEAD,
    ZT_EVENT_OFF_CPU,
    ZT_EVENT_ON_CPU,
    ZT_EVENT_PROCESS_NEWS,
    NewsReason,
    PyStatus,
    py_stack_size,
)

__all__ = [
    "EVENT_HEAD",
    "NEWS_STRUCT",
    "ProcessNews",
    "ProfileLayout",
    "ProfileSample",
]

EVENT_HEAD: Final = struct.Struct(f"<IIIiiIQQ{COMM_LEN}s")  # type .. comm: 56 bytes
NEWS_STRUCT: Final = struct.Struct("<IIII")  # struct zt_process_news: type, pid, reason, pad


@dataclass(frozen=True, slots=True)
class ProcessNews:
    """A process to look at now: first seen, exec'd, or mapped executable code."""

    pid: int
    reason: NewsReason

    @classmethod
    def decode(cls, raw: bytes) -> ProcessNews:
        """Raise :class:`MalformedEvent` for a wrong size, type or reason."""
        if len(raw) < NEWS_STRUCT.size:
            raise MalformedEvent(f"process news of {len(raw)} bytes, want {NEWS_STRUCT.size}")
        kind, pid, reason, _ = NEWS_STRUCT.unpack_from(raw)
        if kind != ZT_EVENT_PROCESS_NEWS or reason not in NewsReason._value2member_map_:
            raise MalformedEvent(f"event type {kind} / reason {reason} is not process news")
        return cls(pid, NewsReason(reason))


@dataclass(frozen=True, slots=True)
class ProfileSample:
    off_cpu: bool
    pid: int
    tid: int
    comm: str
    ts_mono_ns: int  # sample time, or switch-out time for off-CPU
    weight: int  # 1 sample, or ns blocked
    kernel_stack: tuple[int, ...]  # leaf first
    user_stack: tuple[int, ...]  # leaf first
    kernel_error: bool  # bpf_get_stack failed for the kernel stack
    user_error: bool
    py_status: PyStatus
    py_frames: tuple[tuple[int, int], ...]  # (code object, instruction pointer), leaf first
    py_truncated: bool


@dataclass(frozen=True)
class ProfileLayout:
    stack_depth: int = DEFAULT_STACK_DEPTH
    py_depth: int = DEFAULT_PY_DEPTH

    @property
    def size(self) -> int:
        return EVENT_HEAD.size + 16 * self.stack_depth + py_stack_size(self.py_depth)

    def decode(self, raw: bytes) -> ProfileSample:
        """Raise :class:`MalformedEvent` for a wrong size, type or depth."""
        if len(raw) < self.size:
            raise MalformedEvent(f"profile event of {len(raw)} bytes, want {self.size}")
        kind, pid, tid, kbytes, ubytes, _, ts, weight, comm = EVENT_HEAD.unpack_from(raw)
        if kind not in (ZT_EVENT_ON_CPU, ZT_EVENT_OFF_CPU):
            raise MalformedEvent(f"event type {kind} is not a profile event")
        n, m = self.stack_depth, self.py_depth
        py_at = EVENT_HEAD.size + 16 * n
        status, depth, truncated, _ = PY_STACK_HEAD.unpack_from(raw, py_at)
        if depth > m or status > max(PyStatus):
            raise MalformedEvent(f"python depth {depth} / status {status} out of range")
        # Only the filled words are turned into ints: most of a 1.3 KB event is empty slots.
        words = memoryview(raw)[EVENT_HEAD.size : self.size].cast("Q")
        py = 2 * n + PY_STACK_HEAD.size // 8  # first code slot, in words
        return ProfileSample(
            off_cpu=kind == ZT_EVENT_OFF_CPU,
            pid=pid,
            tid=tid,
            comm=comm.split(b"\0", 1)[0].decode("utf-8", "replace"),
            ts_mono_ns=ts,
            weight=weight,
            kernel_stack=_filled(words[0:n], kbytes),
            user_stack=_filled(words[n : 2 * n], ubytes),
            kernel_error=kbytes < 0,
            user_error=ubytes < 0,
            py_status=PyStatus(status),
            py_frames=tuple(
                zip(words[py : py + depth], words[py + m : py + m + depth], strict=True)
            ),
            py_truncated=bool(truncated),
        )


def _filled(words: memoryview, nbytes: int) -> tuple[int, ...]:
    # bpf_get_stack returns the bytes it wrote (a multiple of 8) or a negative errno.
    if nbytes <= 0:
        return ()
    return tuple(w for w in words[: nbytes // 8].tolist() if w)
