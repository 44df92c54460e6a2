"""Decode raw socket-probe records (``bpf/socket.c``, ``bpf/tls.c``; ``bpf/zerotrace_events.h``).

Pure Python: no bcc import. Two records share the ring buffer, told apart by the
leading u32 type tag:

``struct zt_sock_data_hdr`` (96 bytes) followed by ``payload_len`` payload bytes::

    off size field            off size field
      0    4 u32 type (2)      48    8 u64 conn_start_ns
      4    4 u32 pid           56    1 u8  direction
      8    4 u32 tid           57    1 u8  source
     12    4 s32 fd            58    1 u8  op
     16    8 u64 cgroup_id     59    1 u8  flags
     24    8 u64 start_ns      60    4 u32 payload_len
     32    8 u64 end_ns        64   16 char comm[16]
     40    8 s64 ret           80    4 u32 tcp_seq (with F_TCP_SEQ)
                                 84    4 u32 waited_us (with F_WAITED)
                                 88    8 u64 py_task (egress: asyncio task key, 0 none)
                               96      payload

``struct zt_sock_conn_event`` (168 bytes)::

      0..48 as above (ret = syscall result), 48 u64 conn_start_ns, 56 u32 kind,
      60 u16 family, 62 u16 pad, 64 char comm[16], 80 u8 addr[28] (connect's
      struct sockaddr), 108 pad[4], 112 u8 local[28], 140 u8 peer[28] (TCP connect,
      ESTABLISHED, accept: the socket's own and peer's address from the kernel as
      struct sockaddr, family 0 when not read)
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, NoReturn, TypeAlias, TypeVar

from ..errors import MalformedEvent
from .event_layout import (
    COMM_LEN,
    F_CIPHERTEXT,
    F_FD_GUESSED,
    F_FD_UNKNOWN,
    F_PY_NO_THREAD,
    F_TCP_SEQ,
    F_WAITED,
    MAX_TRAILING,
    ZT_EVENT_SOCK_CONN,
    ZT_EVENT_SOCK_DATA,
    ConnKind,
    Direction,
    RawEvent,
    SockOp,
    Source,
    peek_type,
)

__all__ = [
    "CONN_EVENT",
    "CONN_EVENT_SIZE",
    "DATA_HEADER",
    "DATA_HEADER_SIZE",
    "ConnSample",
    "SocketDataSample",
    "SocketSample",
    "decode_conn",
    "decode_socket_data",
    "decode_socket_event",
    "parse_sockaddr",
]

_KNOWN_FLAGS: Final = (
    F_CIPHERTEXT | F_FD_GUESSED | F_FD_UNKNOWN | F_TCP_SEQ | F_WAITED | F_PY_NO_THREAD
)

DATA_HEADER: Final = struct.Struct(f"<IIIiQQQqQBBBBI{COMM_LEN}sIIQ")
DATA_HEADER_SIZE: Final = DATA_HEADER.size
CONN_EVENT: Final = struct.Struct(f"<IIIiQQQqQIHH{COMM_LEN}s28s4x28s28s")
CONN_EVENT_SIZE: Final = CONN_EVENT.size

if DATA_HEADER_SIZE != 96 or CONN_EVENT_SIZE != 168:  # pragma: no cover - guards edits
    raise ImportError("socket event layout drifted from bpf/zerotrace_events.h")

_AF_INET: Final = 2
_E = TypeVar("_E", bound=IntEnum)
_AF_INET6: Final = 10


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which made
# building one sample cost ~4 us, most of this decoder's time (bench.collector_stages).
# Nothing changes a sample after decoding.
@dataclass(slots=True)
class SocketDataSample:
    """Bytes moved by one syscall or SSL call on a tracked socket."""

    pid: int
    tid: int
    fd: int
    """Socket fd; -1 for a TLS call whose SSL* is not bound to an fd yet."""
    cgroup_id: int
    start_mono_ns: int
    end_mono_ns: int
    nbytes: int
    """Bytes the call transferred (> 0)."""
    conn_start_ns: int
    """CLOCK_MONOTONIC time tracking of (pid, fd) began: with them, names the connection.
    A TLS call with no socket yet (fd -1, F_FD_UNKNOWN): the SSL* address, which names the
    TLS session until `tls_placement` places it on its socket."""
    direction: Direction
    source: Source
    op: SockOp
    flags: int
    comm: str
    payload: bytes
    """The first ``min(bytes, capture size)`` bytes; empty for ciphertext events."""
    tcp_seq: int | None = None
    """TCP sequence number of the first byte, where the probe could read it (syscalls)."""
    waited_us: int | None = None
    """Reads: microseconds from the socket's last received segment to the call's entry (how
    long a request waited for a busy server to read it), where the probe could read it."""
    py_task: int = 0
    """Egress calls of a CPython process: the thread's asyncio task key (the address of the
    outermost coroutine frame on its stack: one value per task while it lives, another for
    each task alive beside it); 0 when it ran no coroutine, is not Python, or for reads."""

    @property
    def truncated(self) -> bool:
        return len(self.payload) < self.nbytes

    @property
    def ciphertext(self) -> bool:
        return bool(self.flags & F_CIPHERTEXT)

    @property
    def fd_guessed(self) -> bool:
        return bool(self.flags & F_FD_GUESSED)


@dataclass(frozen=True, slots=True)
class ConnSample:
    """A tracked socket appeared (connect, accept) or went (close)."""

    pid: int
    tid: int
    fd: int
    cgroup_id: int
    start_mono_ns: int
    end_mono_ns: int
    ret: int
    """Syscall result: connect 0 or -EINPROGRESS (-115), accept the fd, close 0/-errno."""
    conn_start_ns: int
    kind: ConnKind
    family: int
    """AF_INET (2), AF_INET6 (10), or 0 when unknown."""
    comm: str
    remote: tuple[str, int] | None
    """CONNECT only: the address the caller passed, else None."""
    dgram: bool = False
    """A UDP socket (socket.c "Datagrams"): its CONNECT is its connect() or first send."""
    local_end: tuple[str, int] | None = None
    """TCP CONNECT, ESTABLISHED, ACCEPT: the socket's own (address, port) as the kernel had it
    when the call returned (IPv4 in IPv6 as plain IPv4, as /proc is read), else None."""
    peer_end: tuple[str, int] | None = None
    """The same for its peer."""


SocketSample: TypeAlias = SocketDataSample | ConnSample


def _comm(raw: bytes) -> str:
    end = raw.find(b"\0")
    if end < 0:
        raise MalformedEvent("comm is not NUL-terminated")
    return raw[:end].decode("utf-8", "backslashreplace")


def parse_sockaddr(raw: bytes) -> tuple[str, int] | None:
    """(address, port) of a ``struct sockaddr_in``/``sockaddr_in6`` in *raw*, else None."""
    if len(raw) < 2:
        return None
    family = int.from_bytes(raw[:2], "little")
    if family == _AF_INET and len(raw) >= 8:
        return str(ipaddress.IPv4Address(raw[4:8])), int.from_bytes(raw[2:4], "big")
    if family == _AF_INET6 and len(raw) >= 24:
        return str(ipaddress.IPv6Address(raw[8:24])), int.from_bytes(raw[2:4], "big")
    return None


def _enum(kind: type[IntEnum], value: int, field: str) -> int:
    try:
        return int(kind(value))
    except ValueError:
        raise MalformedEvent(f"unknown {field} {value}") from None


# Members by value, looked up per event: an IntEnum call costs ~1 us, a dict lookup ~30 ns,
# and this decoder runs for every call a busy server makes (bench.collector_stages).
_DIRECTIONS: Final = {m.value: m for m in Direction}
_SOURCES: Final = {m.value: m for m in Source}
_OPS: Final = {m.value: m for m in SockOp}
_COMMS: dict[bytes, str] = {}  # a node runs few distinct thread names; bounded below
_COMMS_MAX: Final = 4096


def _member(members: dict[int, _E], value: int, field: str) -> _E:
    member = members.get(value)
    if member is None:
        raise MalformedEvent(f"unknown {field} {value}")
    return member


def _cached_comm(raw: bytes) -> str:
    comm = _COMMS.get(raw)
    if comm is None:
        comm = _comm(raw)
        if len(_COMMS) >= _COMMS_MAX:
            _COMMS.clear()
        _COMMS[raw] = comm
    return comm


def decode_socket_data(buf: RawEvent) -> SocketDataSample:
    """Decode one data record (header + payload); raise :class:`MalformedEvent` if invalid."""
    size = len(buf)
    if size < DATA_HEADER_SIZE:
        raise MalformedEvent(f"socket-data event too short: {size} bytes, need {DATA_HEADER_SIZE}")
    (
        tag,
        pid,
        tid,
        fd,
        cgroup_id,
        start_ns,
        end_ns,
        ret,
        conn_start_ns,
        direction,
        source,
        op,
        flags,
        payload_len,
        comm_raw,
        tcp_seq,
        waited_us,
        py_task,
    ) = DATA_HEADER.unpack_from(buf, 0)
    end = DATA_HEADER_SIZE + payload_len
    # One test for the common case, the reasons only when it fails: this runs per event.
    if (
        tag != ZT_EVENT_SOCK_DATA
        or size < end
        or size > end + MAX_TRAILING
        or end_ns < start_ns
        or ret <= 0
        or payload_len > ret
        or flags & ~_KNOWN_FLAGS
    ):
        _refuse_data(tag, size, end, start_ns, end_ns, ret, payload_len, flags)
    direction_member = _DIRECTIONS.get(direction)
    source_member = _SOURCES.get(source)
    op_member = _OPS.get(op)
    if direction_member is None or source_member is None or op_member is None:
        _member(_DIRECTIONS, direction, "direction")  # each raises if its value is unknown
        _member(_SOURCES, source, "source")
        _member(_OPS, op, "op")
        raise AssertionError("unreachable: one of the three is unknown")
    comm = _COMMS.get(comm_raw) or _cached_comm(comm_raw)
    return SocketDataSample(  # positional, in field order: ~0.3 us less than by keyword
        pid,
        tid,
        fd,
        cgroup_id,
        start_ns,
        end_ns,
        ret,
        conn_start_ns,
        direction_member,
        source_member,
        op_member,
        flags,
        comm,
        buf[DATA_HEADER_SIZE:end] if type(buf) is bytes else bytes(buf[DATA_HEADER_SIZE:end]),
        tcp_seq if flags & F_TCP_SEQ else None,
        waited_us if flags & F_WAITED else None,
        py_task,
    )


def _refuse_data(
    tag: int,
    size: int,
    end: int,
    start_ns: int,
    end_ns: int,
    ret: int,
    payload_len: int,
    flags: int,
) -> NoReturn:
    """Raise MalformedEvent saying what is wrong with a data record's header."""
    if tag != ZT_EVENT_SOCK_DATA:
        raise MalformedEvent(f"wrong event type tag {tag}, expected {ZT_EVENT_SOCK_DATA}")
    if size < end or size > end + MAX_TRAILING:
        raise MalformedEvent(f"socket-data event is {size} bytes, header says {end}")
    if end_ns < start_ns:
        raise MalformedEvent(f"end_ns {end_ns} precedes start_ns {start_ns}")
    if ret <= 0:
        raise MalformedEvent(f"socket-data event with {ret} bytes")
    if payload_len > ret:
        raise MalformedEvent(f"payload of {payload_len} bytes exceeds the {ret} transferred")
    raise MalformedEvent(f"unknown flags 0x{flags:02x}")


# Conn kinds whose addr is connect()'s sockaddr (ESTABLISHED: its non-blocking connect's).
_WITH_ADDR: Final = (ConnKind.CONNECT, ConnKind.ESTABLISHED)


def decode_conn(buf: RawEvent) -> ConnSample:
    """Decode one connect/accept/close record; raise :class:`MalformedEvent` if invalid."""
    size = len(buf)
    if size < CONN_EVENT_SIZE or size > CONN_EVENT_SIZE + MAX_TRAILING:
        raise MalformedEvent(f"conn event is {size} bytes, expected {CONN_EVENT_SIZE}")
    (
        tag,
        pid,
        tid,
        fd,
        cgroup_id,
        start_ns,
        end_ns,
        ret,
        conn_start_ns,
        kind,
        family,
        dgram,
        comm_raw,
        addr,
        local_raw,
        peer_raw,
    ) = CONN_EVENT.unpack_from(buf, 0)
    if tag != ZT_EVENT_SOCK_CONN:
        raise MalformedEvent(f"wrong event type tag {tag}, expected {ZT_EVENT_SOCK_CONN}")
    if end_ns < start_ns:
        raise MalformedEvent(f"end_ns {end_ns} precedes start_ns {start_ns}")
    conn_kind = ConnKind(_enum(ConnKind, kind, "conn kind"))
    return ConnSample(
        pid=pid,
        tid=tid,
        fd=fd,
        cgroup_id=cgroup_id,
        start_mono_ns=start_ns,
        end_mono_ns=end_ns,
        ret=ret,
        conn_start_ns=conn_start_ns,
        kind=conn_kind,
        family=family,
        comm=_comm(comm_raw),
        remote=parse_sockaddr(addr) if conn_kind in _WITH_ADDR else None,
        dgram=dgram == 1,
        local_end=_kernel_end(local_raw),
        peer_end=_kernel_end(peer_raw),
    )


def _kernel_end(raw: bytes) -> tuple[str, int] | None:
    """A sockaddr socket.c read from a sock_common, IPv4 in IPv6 as plain IPv4; None when the
    kernel left it zeroed."""
    end = parse_sockaddr(raw)
    if end is None:
        return None
    address, port = end
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped), port
    return address, port


def decode_socket_event(buf: RawEvent) -> SocketSample:
    """Dispatch on the type tag; raise :class:`MalformedEvent` for anything else."""
    tag = peek_type(buf)
    if tag == ZT_EVENT_SOCK_DATA:
        return decode_socket_data(buf)
    if tag == ZT_EVENT_SOCK_CONN:
        return decode_conn(buf)
    raise MalformedEvent(f"unknown socket event type tag {tag}")
