"""What ``bpf/socket.c`` needs of the running kernel, as the -D flags it is compiled with: struct
member offsets read from BTF (bcc compiles against other headers), and tracepoints. Each part
comes with one line saying what is lost where the kernel lacks it; none stops the probe.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Final

from .bcc_loader import tracepoint_exists
from .kernel_btf import VMLINUX, offset_cflags

# The path socket.c follows from a data syscall's fd to the TCP sequence numbers:
# current->files->fdt->fd[fd]->private_data (struct socket)->sk (struct tcp_sock).
TCP_SEQ_MEMBERS: Final = (
    ("ZT_OFF_TASK_FILES", "task_struct", "files"),
    ("ZT_OFF_FILES_FDT", "files_struct", "fdt"),
    ("ZT_OFF_FDT_MAX_FDS", "fdtable", "max_fds"),
    ("ZT_OFF_FDT_FD", "fdtable", "fd"),
    ("ZT_OFF_FILE_PRIVATE_DATA", "file", "private_data"),
    ("ZT_OFF_SOCKET_FILE", "socket", "file"),
    ("ZT_OFF_SOCKET_SK", "socket", "sk"),
    ("ZT_OFF_TCP_WRITE_SEQ", "tcp_sock", "write_seq"),
    ("ZT_OFF_TCP_COPIED_SEQ", "tcp_sock", "copied_seq"),
    ("ZT_OFF_TCP_MSTAMP", "tcp_sock", "tcp_mstamp"),
    ("ZT_OFF_TCP_RCV_NXT", "tcp_sock", "rcv_nxt"),
)


def tcp_seq_cflags(btf_path: Path = VMLINUX) -> tuple[list[str], str | None]:
    """The -D flags that let socket.c read TCP sequence numbers on this kernel, or no flags
    and one line saying why not (then events carry no tcp_seq; nothing else changes)."""
    flags, why = offset_cflags(TCP_SEQ_MEMBERS, btf_path)
    return flags, (f"tcp_seq off: {why}" if why else None)


# A socket's ports (struct sock begins with its sock_common), for --port in the kernel; the
# path from the fd to the sock is TCP_SEQ_MEMBERS'.
PORT_MEMBERS: Final = (
    ("ZT_OFF_SKC_NUM", "sock_common", "skc_num"),
    ("ZT_OFF_SKC_DPORT", "sock_common", "skc_dport"),
)


def port_filter_cflags(
    ports: Collection[int], btf_path: Path = VMLINUX
) -> tuple[list[str], str | None]:
    """The -D flags that filter connections by port in the kernel (never tracked when neither
    end is on one of *ports*), or none and one line saying what that costs."""
    if not ports:
        return [], None
    flags, why = offset_cflags(TCP_SEQ_MEMBERS + PORT_MEMBERS, btf_path)
    if why:
        return [], f"port filter in user space only ({why}): short connections may go unjudged"
    wanted = ",".join(str(p) for p in sorted(set(ports)))
    return [f"-DZT_FILTER_PORTS={wanted}", *(f for f in flags if "SKC" in f)], None


# A connection's addresses and ports (struct sock begins with its sock_common), read when
# connect or accept returns (socket.c zt_sock_addrs); the path from the fd is TCP_SEQ_MEMBERS'.
ADDRESS_MEMBERS: Final = (
    ("ZT_OFF_SKC_FAMILY", "sock_common", "skc_family"),
    ("ZT_OFF_SKC_DADDR", "sock_common", "skc_daddr"),
    ("ZT_OFF_SKC_RCV_SADDR", "sock_common", "skc_rcv_saddr"),
    ("ZT_OFF_SKC_V6_DADDR", "sock_common", "skc_v6_daddr"),
    ("ZT_OFF_SKC_V6_RCV_SADDR", "sock_common", "skc_v6_rcv_saddr"),
    *PORT_MEMBERS,
)


def address_cflags(btf_path: Path = VMLINUX) -> tuple[list[str], str | None]:
    """The -D flags that let socket.c put a connection's addresses in its connect and accept
    events, or none and one line saying what that costs: they are read from /proc when user
    space first sees the connection, so one that closes sooner is named by connect()'s
    address only."""
    flags, why = offset_cflags(TCP_SEQ_MEMBERS + ADDRESS_MEMBERS, btf_path)
    if why:
        return [], f"connection addresses from /proc only ({why}): short connections may go unnamed"
    return [f for f in flags if "SKC" in f], None


# A segment's sequence numbers (TCP_SKB_CB(skb)): whether it brings new bytes or repeats
# some (a retransmission, a loss probe), at tcp:tcp_probe.
TCP_ARRIVAL_MEMBERS: Final = (
    ("ZT_OFF_SKB_CB", "sk_buff", "cb"),
    ("ZT_OFF_TCP_CB_SEQ", "tcp_skb_cb", "seq"),
    ("ZT_OFF_TCP_CB_END_SEQ", "tcp_skb_cb", "end_seq"),
)


def tcp_arrival_cflags(btf_path: Path = VMLINUX) -> tuple[list[str], str | None]:
    """The -D flags that let socket.c follow when a socket's unread bytes arrived (the
    tcp:tcp_probe tracepoint, socket.c zt_tcp_unread), or none and one line saying what that
    costs: waits then come from tcp_mstamp, which a send before the read moves forward."""
    cost = (
        "a request's wait is taken from the socket's last segment, and comes out short when "
        "the server sent anything before reading it"
    )
    if not tracepoint_exists("tcp", "tcp_probe"):
        return [], f"no tcp:tcp_probe tracepoint: {cost}"
    flags, why = offset_cflags(TCP_ARRIVAL_MEMBERS, btf_path)
    if why:
        return [], f"{why}: {cost}"
    return ["-DZT_HAVE_TCP_PROBE=1", *flags], None


def set_state_cflags(btf_path: Path = VMLINUX) -> tuple[list[str], str | None]:
    """The -D flag that lets socket.c time a non-blocking connect to the established state
    (sock:inet_sock_set_state; the socket's sk is found from its fd by TCP_SEQ_MEMBERS'
    offsets, socket.c "Non-blocking connects"), or none and one line saying what that costs."""
    cost = "a non-blocking connect's time is not known (its connect() returns at once)"
    if not tracepoint_exists("sock", "inet_sock_set_state"):
        return [], f"no sock:inet_sock_set_state tracepoint: {cost}"
    _, why = offset_cflags(TCP_SEQ_MEMBERS, btf_path)
    if why:
        return [], f"{why}: {cost}"
    return ["-DZT_HAVE_SET_STATE=1"], None


# current->group_leader->comm: the process's name, as /proc/PID/comm shows it. The calling
# thread's own name (bpf_get_current_comm) differs once a thread renames itself.
PROCESS_NAME_MEMBERS: Final = (
    ("ZT_OFF_TASK_GROUP_LEADER", "task_struct", "group_leader"),
    ("ZT_OFF_TASK_COMM", "task_struct", "comm"),
)


def process_name_cflags(btf_path: Path = VMLINUX) -> tuple[list[str], str | None]:
    """The -D flags that let the --process filter compare the process's name, or none and
    one line saying it compares each thread's own name instead."""
    flags, why = offset_cflags(PROCESS_NAME_MEMBERS, btf_path)
    return flags, (f"--process compares thread names, not process names: {why}" if why else None)
