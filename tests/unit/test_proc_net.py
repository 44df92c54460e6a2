"""Pure tests of /proc/net/tcp parsing and (pid, fd) resolution against a fake /proc."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zerotrace_collector.proc_net import (
    UNKNOWN,
    Endpoints,
    ProcNet,
    parse_proc_net_tcp,
    parse_socket_link,
)

pytestmark = pytest.mark.unit

HEAD = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n"
)
TCP = HEAD + (
    " 0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1111 1 0 100\n"
    " 1: 0100007F:1F40 0100007F:D431 01 00000000:00000000 00:00000000 00000000 0 0 2222 1 0 20\n"
    " 2: 0100007F:D431 0100007F:1F40 06 00000000:00000000 03:00000A2B 00000000 0 0 0 3 0\n"
    " 3: garbage\n"
    " 4: ZZZZ:1F40 0100007F:D431 01 00000000:00000000 00:00000000 00000000 0 0 3333\n"
)
TCP6 = HEAD + (
    " 0: 00000000000000000000000001000000:01BB 0000000000000000FFFF00000100007F:9C40 01 "
    "00000000:00000000 00:00000000 00000000     0        0 4444 1 0 20 4 30 10 -1\n"
    " 1: B80D0120000000000000000001000000:0050 B80D0120000000000000000002000000:C000 01 "
    "00000000:00000000 00:00000000 00000000     0        0 5555 1 0 20 4 30 10 -1\n"
)


def test_parse_ipv4_rows() -> None:
    rows = parse_proc_net_tcp(TCP)
    assert set(rows) == {1111, 2222}  # inode 0 and malformed rows are left out
    assert rows[1111].state == 0x0A
    assert rows[2222].endpoints == Endpoints("127.0.0.1", 8000, "127.0.0.1", 54321)


def test_parse_ipv6_rows_and_mapped_ipv4() -> None:
    rows = parse_proc_net_tcp(TCP6)
    assert rows[4444].endpoints == Endpoints("::1", 443, "127.0.0.1", 40000)
    assert rows[5555].endpoints == Endpoints("2001:db8::1", 80, "2001:db8::2", 49152)


def test_parse_empty_and_header_only() -> None:
    assert parse_proc_net_tcp("") == {}
    assert parse_proc_net_tcp(HEAD) == {}


@pytest.mark.parametrize(
    ("link", "inode"),
    [("socket:[2222]", 2222), ("pipe:[5]", None), ("/etc/hosts", None), ("socket:[x]", None)],
)
def test_parse_socket_link(link: str, inode: int | None) -> None:
    assert parse_socket_link(link) == inode


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """A fake /proc: pid 42 with fd 5 -> socket 2222, fd 6 -> listener, fd 7 -> unix, fd 8 file."""
    base = tmp_path / "42"
    (base / "fd").mkdir(parents=True)
    (base / "net").mkdir()
    (base / "net" / "tcp").write_text(TCP)
    (base / "net" / "tcp6").write_text(TCP6)
    os.symlink("socket:[2222]", base / "fd" / "5")
    os.symlink("socket:[1111]", base / "fd" / "6")
    os.symlink("socket:[9999]", base / "fd" / "7")
    os.symlink("/etc/hosts", base / "fd" / "8")
    os.symlink("socket:[5555]", base / "fd" / "9")
    return tmp_path


def test_resolve_and_cache(proc: Path) -> None:
    net = ProcNet(proc)
    assert net.resolve(42, 5, 100) == Endpoints("127.0.0.1", 8000, "127.0.0.1", 54321)
    assert net.resolve(42, 9, 100).remote_addr == "2001:db8::2"
    os.unlink(proc / "42" / "fd" / "5")
    assert net.resolve(42, 5, 100).known  # cached for the life of the connection
    assert net.lookups == 2
    assert net.resolve(42, 5, 101) == UNKNOWN  # a new connection on the same fd number


def test_misses_are_empty_never_exceptions(proc: Path) -> None:
    net = ProcNet(proc)
    assert net.resolve(42, 7, 1) == UNKNOWN  # unix socket
    assert net.resolve(42, 8, 1) == UNKNOWN  # a file
    assert net.resolve(42, 77, 1) == UNKNOWN  # no such fd
    assert net.resolve(4242, 5, 1) == UNKNOWN  # no such process
    assert not UNKNOWN.known


def test_tcp_fds_splits_connections_and_listeners(proc: Path) -> None:
    net = ProcNet(proc)
    assert [fd for fd, _ in net.tcp_fds(42)] == [5, 9]
    assert [fd for fd, _ in net.tcp_fds(42, listening=True)] == [6]
    assert net.tcp_fds(4242) == []


def test_cache_is_bounded(proc: Path) -> None:
    net = ProcNet(proc, cache_size=2)
    for seq in range(5):
        net.remember(42, 5, seq, UNKNOWN)
    assert net.cached(42, 5, 0) is None and net.cached(42, 5, 4) == UNKNOWN
