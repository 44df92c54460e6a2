"""TCP endpoints of a (pid, fd) from /proc: read, then parse.

``parse_proc_net_tcp`` and ``parse_socket_link`` are pure; :class:`ProcNet` reads
``/proc/PID/fd/FD`` (a link ``socket:[INODE]``) and ``/proc/PID/net/tcp{,6}`` (the
tables of the process's own network namespace) and joins them by inode.

A miss (the process or fd is gone, the socket is not TCP) gives :data:`UNKNOWN`:
empty addresses and zero ports, never an exception. TCP sequence numbers are not in
these tables and the probe reads no kernel structs, so records carry none.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "UNKNOWN",
    "Endpoints",
    "ProcNet",
    "TcpSocket",
    "parse_proc_net_tcp",
    "parse_socket_link",
]

TCP_LISTEN: Final = 0x0A
TCP_ESTABLISHED: Final = 0x01
# pidfd_getfd(2), Linux 5.6+: the same number on every architecture with the generic table.
_SYS_PIDFD_GETFD: Final = 438


@dataclass(frozen=True, slots=True)
class Endpoints:
    """The 5-tuple of a TCP connection (protocol implied); empty strings when unknown."""

    local_addr: str
    local_port: int
    remote_addr: str
    remote_port: int

    @property
    def known(self) -> bool:
        return bool(self.local_addr)


UNKNOWN: Final = Endpoints("", 0, "", 0)


@dataclass(frozen=True, slots=True)
class TcpSocket:
    """One row of /proc/net/tcp or tcp6."""

    inode: int
    state: int
    """TCP state number (1 ESTABLISHED ... 10 LISTEN)."""
    endpoints: Endpoints


def _addr(hex_addr: str) -> str:
    # The kernel prints each 32-bit word of the address in host order (little-endian).
    raw = bytes.fromhex(hex_addr)
    if len(raw) not in (4, 16):
        raise ValueError(f"address of {len(raw)} bytes")
    swapped = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(swapped)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _endpoint(field: str) -> tuple[str, int]:
    hex_addr, _, hex_port = field.partition(":")
    return _addr(hex_addr), int(hex_port, 16)


def parse_proc_net_tcp(text: str) -> dict[int, TcpSocket]:
    """Rows of /proc/net/tcp or tcp6 by socket inode; malformed rows are skipped.

    IPv4-mapped IPv6 addresses (``::ffff:a.b.c.d``) are given in dotted IPv4 form.
    Rows with inode 0 (TIME_WAIT, orphans) belong to no fd and are left out.
    """
    out: dict[int, TcpSocket] = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10:
            continue
        try:
            local = _endpoint(cols[1])
            remote = _endpoint(cols[2])
            state = int(cols[3], 16)
            inode = int(cols[9])
        except ValueError:
            continue
        if inode == 0:
            continue
        out[inode] = TcpSocket(inode, state, Endpoints(local[0], local[1], remote[0], remote[1]))
    return out


def parse_socket_link(link: str) -> int | None:
    """The inode in a ``socket:[12345]`` fd link, else None (a file, a pipe, ...)."""
    if link.startswith("socket:[") and link.endswith("]"):
        try:
            return int(link[8:-1])
        except ValueError:
            return None
    return None


# What socket_endpoints says of a live socket that is not TCP (AF_UNIX, UDP, ...).
NOT_TCP: Final = Endpoints("", -1, "", -1)


def socket_endpoints(pid: int, fd: int) -> Endpoints | None:
    """Both ends of a connected TCP socket of another process, by asking the socket itself:
    pidfd_getfd duplicates the process's fd into ours, then getsockname/getpeername. O(1),
    where reading /proc/PID/net/tcp costs time in proportion to every socket of the namespace
    (thousands of TIME_WAIT entries make it 0.1 s and more). A TCP socket not connected yet
    (a non-blocking connect in progress) has an empty remote end; NOT_TCP for another kind of
    socket; None when it cannot tell (no permission, old kernel, process gone)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        dup = _libc().syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
        if dup < 0:
            return None
        try:
            sock = socket.socket(fileno=dup)
            try:
                if sock.type != socket.SOCK_STREAM or sock.family not in (
                    socket.AF_INET,
                    socket.AF_INET6,
                ):
                    return NOT_TCP
                local = sock.getsockname()
                try:
                    remote = sock.getpeername()
                except OSError:
                    remote = ("", 0)  # connecting, or a listener
            except OSError:
                return None  # gone meanwhile
            finally:
                sock.detach()  # the duplicate is closed below, exactly once
        finally:
            os.close(dup)
    finally:
        os.close(pidfd)
    return Endpoints(_plain(local[0]), int(local[1]), _plain(remote[0]), int(remote[1]))


def _plain(address: str) -> str:
    """IPv4 in IPv6 (::ffff:1.2.3.4) as plain IPv4, the way /proc/net/tcp6 is read."""
    return address[7:] if address.startswith("::ffff:") else address


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


class ProcNet:
    """Resolve (pid, fd) to TCP endpoints through /proc, with a bounded cache.

    ``resolve`` is keyed by (pid, fd, conn_seq) -- conn_seq being the probe's
    ``conn_start_ns`` -- so a reused fd number is a new key. Results (misses too) are
    cached: a connection's endpoints never change, and a miss after the fd closed
    stays a miss. Blocking: each uncached call reads a link and up to two small files.
    """

    def __init__(self, proc_root: Path = Path("/proc"), *, cache_size: int = 65536) -> None:
        self.proc_root = proc_root
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[int, int, int], Endpoints] = OrderedDict()
        self.lookups = 0
        """Uncached resolutions (reads of /proc), for tests and metrics."""

    def _read(self, path: Path) -> str | None:
        try:
            return path.read_text()
        except OSError:
            return None

    def socket_inode(self, pid: int, fd: int) -> int | None:
        try:
            return parse_socket_link(os.readlink(self.proc_root / str(pid) / "fd" / str(fd)))
        except OSError:
            return None

    def tcp_table(self, pid: int) -> dict[int, TcpSocket]:
        """Both TCP tables of *pid*'s network namespace, by inode ({} if pid is gone)."""
        table: dict[int, TcpSocket] = {}
        for name in ("tcp", "tcp6"):
            text = self._read(self.proc_root / str(pid) / "net" / name)
            if text is not None:
                table.update(parse_proc_net_tcp(text))
        return table

    def lookup(self, pid: int, fd: int) -> TcpSocket | None:
        """Uncached: the TCP socket behind (pid, fd) now, or None."""
        inode = self.socket_inode(pid, fd)
        if inode is None:
            return None
        if self.proc_root == Path("/proc"):  # the live system: ask the socket first
            endpoints = socket_endpoints(pid, fd)
            if endpoints is NOT_TCP:
                return None
            if endpoints is not None:
                return TcpSocket(inode, TCP_ESTABLISHED, endpoints)
        return self.tcp_table(pid).get(inode)

    def resolve(self, pid: int, fd: int, conn_seq: int) -> Endpoints:
        key = (pid, fd, conn_seq)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        self.lookups += 1
        sock = self.lookup(pid, fd)
        found = sock.endpoints if sock is not None else UNKNOWN
        self.remember(pid, fd, conn_seq, found)
        return found

    def remember(self, pid: int, fd: int, conn_seq: int, endpoints: Endpoints) -> None:
        """Store *endpoints* for the connection (e.g. learnt from a connect() address)."""
        self._cache[(pid, fd, conn_seq)] = endpoints
        self._cache.move_to_end((pid, fd, conn_seq))
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def cached(self, pid: int, fd: int, conn_seq: int) -> Endpoints | None:
        return self._cache.get((pid, fd, conn_seq))

    def tcp_fds(self, pid: int, *, listening: bool = False) -> list[tuple[int, TcpSocket]]:
        """(fd, socket) for each TCP socket *pid* holds now: connected ones, or listeners."""
        try:
            fds = os.listdir(self.proc_root / str(pid) / "fd")
        except OSError:
            return []
        table = self.tcp_table(pid)
        out: list[tuple[int, TcpSocket]] = []
        for name in fds:
            if not name.isdigit():
                continue
            inode = self.socket_inode(pid, int(name))
            sock = table.get(inode) if inode is not None else None
            if sock is not None and (sock.state == TCP_LISTEN) == listening:
                out.append((int(name), sock))
        return sorted(out, key=lambda item: item[0])
