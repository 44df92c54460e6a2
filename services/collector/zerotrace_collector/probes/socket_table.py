"""The socket program's tables of sockets (``bpf/socket.c``): what the loader writes there and
what it clears. Functions over the compiled bcc program (no bcc import).

``zt_socket_fds`` holds the connections the program follows, (pid, fd) -> zt_sock_info; the
kernel adds one at connect and accept, the loader adds those that existed before attach (read
from /proc). ``zt_socket_family`` holds the listeners' address families, so an accept on a
listener opened before attach knows its own. A process that exits closes its fds without
close(2): the sweep finds its entries, drops them and says which connections ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable
from typing import Any, Final

from .event_layout import ConnKind
from .socket_decode import ConnSample

__all__ = [
    "FAMILY_MAP",
    "SOCKETS_MAP",
    "family_of",
    "holds",
    "note_listener",
    "sweep",
    "track",
    "untrack",
]

SOCKETS_MAP: Final = b"zt_socket_fds"
FAMILY_MAP: Final = b"zt_socket_family"
# zt_sock_info.origin for entries the loader writes (ZT_ORIGIN_PROC).
ORIGIN_PROC: Final = 3
AF_INET: Final = 2
AF_INET6: Final = 10


def family_of(local_addr: str) -> int:
    """The address family of an address as /proc shows it."""
    return AF_INET6 if ":" in local_addr else AF_INET


def track(bpf: Any, pid: int, fd: int, family: int = 0) -> int:
    """Follow (pid, fd), a connection opened before attach. Returns its conn_start_ns
    (CLOCK_MONOTONIC now), which names the connection from here on."""
    table = bpf[SOCKETS_MAP]
    now = time.monotonic_ns()
    table[table.Key(pid=pid, fd=fd)] = table.Leaf(
        conn_start_ns=now, family=family, origin=ORIGIN_PROC, tls=0
    )
    return now


def holds(bpf: Any, pid: int, fd: int, conn_start_ns: int) -> bool:
    """Is (pid, fd) still the connection that began at *conn_start_ns*? Not once it closed,
    nor once the fd was handed to another socket: what /proc shows at that fd is then another
    socket's, not this connection's."""
    table = bpf[SOCKETS_MAP]
    try:
        return int(table[table.Key(pid=pid, fd=fd)].conn_start_ns) == conn_start_ns
    except KeyError:
        return False


def untrack(bpf: Any, pid: int, fd: int) -> None:
    table = bpf[SOCKETS_MAP]
    with contextlib.suppress(KeyError):
        del table[table.Key(pid=pid, fd=fd)]


def note_listener(bpf: Any, pid: int, fd: int, family: int) -> None:
    """A listener that existed before attach: its accepts learn their family from it."""
    families = bpf[FAMILY_MAP]
    families[families.Key(pid=pid, fd=fd)] = ctypes.c_uint16(family)


def sweep(bpf: Any, alive: Callable[[int], bool]) -> list[ConnSample]:
    """Drop the entries of processes that are not *alive*; a CLOSE for each connection among
    them, so that the correlator learns the conversation is over (else it waits for its idle
    timeout)."""
    closed: list[ConnSample] = []
    now = time.monotonic_ns()
    for name in (SOCKETS_MAP, FAMILY_MAP):
        table = bpf[name]
        dead = [(k, v) for k, v in table.items() if not alive(k.pid)]
        for key, leaf in dead:
            if name == SOCKETS_MAP:
                closed.append(
                    ConnSample(
                        pid=key.pid,
                        tid=key.pid,
                        fd=key.fd,
                        cgroup_id=0,
                        start_mono_ns=now,
                        end_mono_ns=now,
                        ret=0,
                        conn_start_ns=int(leaf.conn_start_ns),
                        kind=ConnKind.CLOSE,
                        family=int(leaf.family),
                        comm="",
                        remote=None,
                    )
                )
            with contextlib.suppress(KeyError):
                del table[key]
    return closed
