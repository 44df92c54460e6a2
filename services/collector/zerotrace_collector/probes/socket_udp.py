"""The UDP socket behind a traced fd, from ``/proc/PID/net/udp{,6}`` (socket.c "Datagrams").

The probe tracks a UDP socket once it talks to a wanted peer; user space then needs its local
end (its remote end is the address the CONNECT event carries, or, for a connected socket, the
table's). The rows of the UDP tables have the layout of the TCP ones, so proc_net's parser
reads them; a connected UDP socket shows state 1 (TCP_ESTABLISHED's number), an unconnected
one 7 and a remote end of 0.0.0.0:0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ..proc_net import ProcNet, TcpSocket, parse_proc_net_tcp

__all__ = ["UDP_TABLES", "find_udp", "udp_socket"]

UDP_TABLES: Final = ("udp", "udp6")


def find_udp(tables: list[str], inode: int) -> TcpSocket | None:
    """The row of socket *inode* in the text of /proc/net/udp and udp6, or None."""
    for text in tables:
        found = parse_proc_net_tcp(text).get(inode)
        if found is not None:
            return found
    return None


def udp_socket(proc: ProcNet, pid: int, fd: int) -> TcpSocket | None:
    """The UDP socket (pid, fd) is now, or None: not UDP, or gone."""
    inode = proc.socket_inode(pid, fd)
    if inode is None:
        return None
    tables = []
    for name in UDP_TABLES:
        try:
            tables.append((Path(proc.proc_root) / str(pid) / "net" / name).read_text())
        except OSError:
            continue
    return find_udp(tables, inode)
