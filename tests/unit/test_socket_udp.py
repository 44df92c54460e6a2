"""probes/socket_udp.py: the UDP socket behind an fd, read from /proc/PID/net/udp{,6} text; and
how the socket probe names a datagram flow with it (SocketProbe._resolve_dgram)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zerotrace_collector.probes.event_layout import ConnKind
from zerotrace_collector.probes.socket import SocketProbe
from zerotrace_collector.probes.socket_decode import ConnSample
from zerotrace_collector.probes.socket_udp import find_udp, udp_socket
from zerotrace_collector.proc_net import Endpoints, ProcNet

pytestmark = pytest.mark.unit

HEAD = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"  # noqa: E501
# A connected resolver socket (127.0.0.1:41000 -> 127.0.0.53:53), and an unconnected one.
UDP = HEAD + (
    " 1: 0100007F:A028 3500007F:0035 01 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n"  # noqa: E501
    " 2: 00000000:B000 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4343 2 0000000000000000 0\n"  # noqa: E501
)


def test_a_connected_socket_has_both_ends() -> None:
    found = find_udp([UDP], 4242)
    assert found is not None
    assert found.endpoints == Endpoints("127.0.0.1", 41000, "127.0.0.53", 53)


def test_an_unconnected_socket_has_no_remote_end() -> None:
    found = find_udp(["", UDP], 4343)
    assert found is not None
    assert (found.endpoints.local_port, found.endpoints.remote_port) == (45056, 0)


def test_an_inode_in_neither_table_is_not_udp() -> None:
    assert find_udp([UDP, HEAD], 1) is None


def _fake_proc(tmp_path: Path, link: str) -> ProcNet:
    base = tmp_path / "42"
    (base / "fd").mkdir(parents=True)
    (base / "net").mkdir()
    (base / "net" / "udp").write_text(UDP)
    os.symlink(link, base / "fd" / "3")
    return ProcNet(tmp_path)


def _connect(remote: tuple[str, int], kind: ConnKind = ConnKind.CONNECT) -> ConnSample:
    return ConnSample(42, 42, 3, 1, 10, 20, 0, 10, kind, 2, "python", remote, dgram=True)


def test_udp_socket_reads_the_fd_and_the_table(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, "socket:[4242]")
    found = udp_socket(proc, 42, 3)
    assert found is not None and found.endpoints.remote_port == 53
    assert udp_socket(proc, 42, 4) is None  # no such fd


def test_a_datagram_flow_takes_its_local_end_while_the_fd_is_still_it(tmp_path: Path) -> None:
    probe = SocketProbe(Path("bpf"), proc_net=_fake_proc(tmp_path, "socket:[4242]"))
    ends = probe._resolve_dgram(_connect(("127.0.0.53", 53)))
    assert ends == Endpoints("127.0.0.1", 41000, "127.0.0.53", 53)


def test_a_reused_fd_neither_names_the_flow_nor_hides_it(tmp_path: Path) -> None:
    """A resolver's next socket (or its AF_UNIX one to nscd) holds the fd number by the time
    user space looks: the flow keeps the peer its CONNECT carried, and is not dropped."""
    cases = [
        ("socket:[9999]", Endpoints("", 0, "127.0.0.53", 5300)),  # not UDP now (AF_UNIX)
        ("socket:[4242]", Endpoints("", 0, "127.0.0.53", 5300)),  # connected to another peer
    ]
    for link, want in cases:
        probe = SocketProbe(Path("bpf"), proc_net=_fake_proc(tmp_path / link[8:12], link))
        assert probe._resolve_dgram(_connect(("127.0.0.53", 5300))) == want
        assert probe.endpoints(_connect(("127.0.0.53", 5300))) == want
