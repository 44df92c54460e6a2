"""The raw event layout the decoders share: Python's side of the records the BPF programs
write (STYLE.md rule 8: event structs in one shared header, so one layout module here).

Every decoder (fileio_decode, socket_decode, profile_decode, gpu_decode) takes type tags,
lengths, enums and flags from this module, never from another decoder; each keeps only the
``struct.Struct`` of its own records. tests/unit/test_event_layout.py parses the C text and
fails when a value here and its C counterpart differ, on either side.

Where the C side declares what is mirrored here::

    bpf/zerotrace_events.h  ZT_COMM_LEN, ZT_PATH_MAX, enum zt_event_type (file open,
                            socket), ZT_DIR_*, ZT_SRC_*, ZT_OP_*, ZT_SOCK_F_*, ZT_CONN_*
    bpf/python_stack.h      ZT_PY_MAX_DEPTH, enum zt_py_status, struct zt_py_stack
    bpf/profile.c           ZT_EVENT_ON_CPU, ZT_EVENT_OFF_CPU, ZT_EVENT_PROCESS_NEWS,
                            ZT_NEWS_*, ZT_STACK_DEPTH
    bpf/gpu_calls.c         ZT_EVENT_GPU_CALL, ZT_EVENT_GPU_LIB
    bpf/socket.c            ZT_PAYLOAD_MAX

A type tag is unique within one ring buffer, not across them: ZT_EVENT_ON_CPU (profile.c)
and ZT_EVENT_GPU_CALL (gpu_calls.c) are both 0x10.

Integers are little-endian (host order on every supported target) and records have no
implicit padding, so the decoders' formats start with ``<`` and spell out every pad byte.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final, TypeAlias

from ..errors import MalformedEvent

__all__ = [
    "COMM_LEN",
    "DEFAULT_PAYLOAD_MAX",
    "DEFAULT_PY_DEPTH",
    "DEFAULT_STACK_DEPTH",
    "F_CIPHERTEXT",
    "F_FD_GUESSED",
    "F_FD_UNKNOWN",
    "F_PY_NO_THREAD",
    "F_TCP_SEQ",
    "F_WAITED",
    "MAX_TRAILING",
    "PATH_MAX",
    "PY_STACK_HEAD",
    "ZT_EVENT_FILE_OPEN",
    "ZT_EVENT_FILE_RW",
    "ZT_EVENT_GPU_CALL",
    "ZT_EVENT_GPU_LIB",
    "ZT_EVENT_OFF_CPU",
    "ZT_EVENT_ON_CPU",
    "ZT_EVENT_PROCESS_NEWS",
    "ZT_EVENT_SOCK_CONN",
    "ZT_EVENT_SOCK_DATA",
    "ConnKind",
    "Direction",
    "NewsReason",
    "PyStatus",
    "RawEvent",
    "SockOp",
    "Source",
    "peek_type",
    "py_stack_size",
]

RawEvent: TypeAlias = bytes | bytearray | memoryview

# ---- type tags: the u32 every record starts with --------------------------------------

ZT_EVENT_FILE_OPEN: Final = 1
ZT_EVENT_SOCK_DATA: Final = 2
ZT_EVENT_SOCK_CONN: Final = 3
ZT_EVENT_FILE_RW: Final = 4
ZT_EVENT_ON_CPU: Final = 0x10
ZT_EVENT_OFF_CPU: Final = 0x11
ZT_EVENT_PROCESS_NEWS: Final = 0x12
ZT_EVENT_GPU_CALL: Final = 0x10
ZT_EVENT_GPU_LIB: Final = 0x11

# ---- lengths ----------------------------------------------------------------------------

COMM_LEN: Final = 16
"""ZT_COMM_LEN: a task's comm with its NUL (the kernel's TASK_COMM_LEN)."""
PATH_MAX: Final = 256
"""ZT_PATH_MAX: bytes of a user path kept, NUL included; a longer path is cut."""
DEFAULT_PAYLOAD_MAX: Final = 16384
"""ZT_PAYLOAD_MAX unless the loader passes another: payload bytes one socket record holds."""
DEFAULT_STACK_DEPTH: Final = 32
"""ZT_STACK_DEPTH unless the loader passes another: kernel and user frames, each."""
DEFAULT_PY_DEPTH: Final = 48
"""ZT_PY_MAX_DEPTH unless the loader passes another: Python frames in a zt_py_stack."""
MAX_TRAILING: Final = 7
"""Bytes a record may have past its size, ignored: perf buffers pad samples to 8 bytes."""

# ---- zt_sock_data_hdr fields ------------------------------------------------------------


class Direction(IntEnum):
    """``direction``: ZT_DIR_*."""

    INGRESS = 1
    EGRESS = 2


class Source(IntEnum):
    """``source``: ZT_SRC_*."""

    SYSCALL = 1
    TLS = 2


class SockOp(IntEnum):
    """``op``, the call that moved the bytes: ZT_OP_*."""

    READ = 1
    WRITE = 2
    READV = 3
    WRITEV = 4
    RECVFROM = 5
    SENDTO = 6
    RECVMSG = 7
    SENDMSG = 8
    SSL_READ = 9
    SSL_WRITE = 10
    SSL_READ_EX = 11
    SSL_WRITE_EX = 12


# ``flags`` bits: ZT_SOCK_F_*.
F_CIPHERTEXT: Final = 0x01
"""Syscall bytes of a TLS connection; the payload was not copied."""
F_FD_GUESSED: Final = 0x02
"""TLS: the SSL* -> fd binding came from the memory-BIO heuristic."""
F_FD_UNKNOWN: Final = 0x04
"""TLS: no fd known for this SSL* (``fd`` is -1)."""
F_TCP_SEQ: Final = 0x08
"""``tcp_seq`` is the TCP sequence number of the call's first byte."""
F_WAITED: Final = 0x10
"""``waited_us`` is how long the bytes of a read waited in the socket before the call."""
F_PY_NO_THREAD: Final = 0x20
"""An egress call of a known CPython process whose thread state the walker did not find:
``py_task`` is 0 for want of it, not because no coroutine ran."""


class ConnKind(IntEnum):
    """zt_sock_conn_event ``kind``: ZT_CONN_*."""

    CONNECT = 1
    ACCEPT = 2
    CLOSE = 3
    SHED = 4  # shed from here on: the exchange in progress is cut (socket.c "Shedding")
    TLS_BOUND = 5  # tls.c: ret holds an SSL* now bound to this socket (tls_placement)
    TLS_HANDSHAKE = 6  # tls.c: a handshake completed; start..end its SSL_do_handshake calls
    ESTABLISHED = 7  # a non-blocking connect got there; start..end connect() entry..the change


# ---- struct zt_py_stack, the tail of profile and GPU call records -----------------------


class NewsReason(IntEnum):
    """ZT_NEWS_*: why profile.c announces a process (struct zt_process_news.reason)."""

    FIRST_SEEN = 1  # its first sample or switch-out
    EXEC = 2  # it became another program
    EXEC_MAPPING = 3  # it mapped executable code (a library)


class PyStatus(IntEnum):
    """enum zt_py_status: how the walk of a thread's Python frames went."""

    NONE = 0  # not a known CPython process
    OK = 1
    NO_THREAD = 2  # no thread state for this tid
    READ_FAIL = 3  # a user-memory read failed; frames are the leaf side only
    TOO_DEEP = 4  # zt_python_task only: longer frame chain than it follows, no task key


PY_STACK_HEAD: Final = struct.Struct("<IIII")
"""status, depth, truncated, reserved; then u64 code[D] and u64 instr[D]."""


def py_stack_size(depth: int) -> int:
    """Bytes of a zt_py_stack built with ZT_PY_MAX_DEPTH = *depth*."""
    return PY_STACK_HEAD.size + 16 * depth


def peek_type(buf: RawEvent) -> int:
    """The u32 type tag at the start of *buf*; :class:`MalformedEvent` if it has none."""
    if len(buf) < 4:
        raise MalformedEvent(f"event too short for a type tag: {len(buf)} bytes")
    tag: int = struct.unpack_from("<I", buf, 0)[0]
    return tag
