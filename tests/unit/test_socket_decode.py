"""Pure tests of the socket-probe decoders (no bcc, no root)."""

from __future__ import annotations

import contextlib
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.errors import MalformedEvent
from zerotrace_collector.probes.event_layout import (
    F_CIPHERTEXT,
    ZT_EVENT_SOCK_DATA,
    ConnKind,
    Direction,
    SockOp,
    Source,
)
from zerotrace_collector.probes.socket_decode import (
    CONN_EVENT_SIZE,
    DATA_HEADER_SIZE,
    ConnSample,
    SocketDataSample,
    decode_conn,
    decode_socket_data,
    decode_socket_event,
    parse_sockaddr,
)

pytestmark = pytest.mark.unit


def u(n: int, size: int, signed: bool = False) -> bytes:
    return n.to_bytes(size, "little", signed=signed)


def data_event(
    *,
    tag: int = ZT_EVENT_SOCK_DATA,
    fd: int = 7,
    start: int = 1_000,
    end: int = 2_000,
    ret: int = 5,
    direction: int = 2,
    source: int = 1,
    op: int = 6,
    flags: int = 0,
    payload: bytes = b"hello",
    payload_len: int | None = None,
    comm: bytes = b"python3\0\0\0\0\0\0\0\0\0",
    tcp_seq: int = 0,
    waited_us: int = 0,
    py_task: int = 0,
) -> bytes:
    """Independent encoder mirroring struct zt_sock_data_hdr field by field."""
    plen = len(payload) if payload_len is None else payload_len
    head = b"".join(
        [u(tag, 4), u(11, 4), u(12, 4), u(fd, 4, True), u(99, 8), u(start, 8), u(end, 8),
         u(ret, 8, True), u(500, 8), bytes([direction, source, op, flags]), u(plen, 4), comm,
         u(tcp_seq, 4), u(waited_us, 4), u(py_task, 8)]
    )  # fmt: skip
    assert len(head) == 96
    return head + payload


def conn_event(
    *,
    kind: int = 1,
    ret: int = -115,
    addr: bytes = b"",
    tag: int = 3,
    dgram: int = 0,
    local: bytes = b"",
    peer: bytes = b"",
) -> bytes:
    out = b"".join(
        [u(tag, 4), u(11, 4), u(12, 4), u(4, 4, True), u(99, 8), u(10, 8), u(30, 8),
         u(ret, 8, True), u(10, 8), u(kind, 4), u(2, 2), u(dgram, 2), b"curl".ljust(16, b"\0"),
         addr.ljust(28, b"\0"), b"\0" * 4, local.ljust(28, b"\0"), peer.ljust(28, b"\0")]
    )  # fmt: skip
    assert len(out) == 168
    return out


def sockaddr_in(ip: str, port: int) -> bytes:
    return u(2, 2) + port.to_bytes(2, "big") + socket.inet_aton(ip) + b"\0" * 8


def sockaddr_in6(ip: str, port: int) -> bytes:
    return u(10, 2) + port.to_bytes(2, "big") + b"\0" * 4 + socket.inet_pton(socket.AF_INET6, ip)


def test_sizes_match_the_header() -> None:
    assert (DATA_HEADER_SIZE, CONN_EVENT_SIZE) == (96, 168)


def test_tcp_seq_only_with_its_flag() -> None:
    with_seq = decode_socket_data(data_event(flags=0x08, tcp_seq=0xFFFF_FFF0))
    assert with_seq.tcp_seq == 0xFFFF_FFF0
    # Without the flag the field is whatever the probe left there: not a sequence number.
    assert decode_socket_data(data_event(tcp_seq=1234)).tcp_seq is None


def test_the_task_key_of_an_egress_call() -> None:
    key = 0x7F3A_1C2B_4D58
    assert decode_socket_data(data_event(py_task=key)).py_task == key
    assert decode_socket_data(data_event()).py_task == 0
    # The walker found no thread state: a known flag, the key stays 0.
    lost = decode_socket_data(data_event(flags=0x20))
    assert lost.flags == 0x20 and lost.py_task == 0


def test_the_wait_before_a_read_only_with_its_flag() -> None:
    assert decode_socket_data(data_event(flags=0x10, waited_us=25_000)).waited_us == 25_000
    assert decode_socket_data(data_event(waited_us=25_000)).waited_us is None


def test_data_event_decodes_every_field() -> None:
    s = decode_socket_data(data_event())
    assert s == SocketDataSample(
        pid=11, tid=12, fd=7, cgroup_id=99, start_mono_ns=1_000, end_mono_ns=2_000, nbytes=5,
        conn_start_ns=500, direction=Direction.EGRESS, source=Source.SYSCALL, op=SockOp.SENDTO,
        flags=0, comm="python3", payload=b"hello",
    )  # fmt: skip
    assert not s.truncated and not s.ciphertext and not s.fd_guessed


def test_truncated_and_ciphertext() -> None:
    s = decode_socket_data(data_event(ret=20_000, payload=b"x" * 64))
    assert s.truncated and s.nbytes == 20_000 and len(s.payload) == 64
    c = decode_socket_data(data_event(ret=300, payload=b"", flags=F_CIPHERTEXT, source=1))
    assert c.ciphertext and c.truncated and c.payload == b""


def test_tls_event_with_unknown_fd() -> None:
    s = decode_socket_data(data_event(fd=-1, source=2, op=9, direction=1, flags=0x04))
    assert s.fd == -1 and s.source is Source.TLS and s.op is SockOp.SSL_READ


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (data_event()[:79], "too short"),
        (data_event(tag=1), "wrong event type"),
        (data_event(payload_len=6), "header says"),
        (data_event() + b"\0" * 8, "header says"),
        (data_event(start=5, end=4), "precedes"),
        (data_event(ret=0, payload=b""), "with 0 bytes"),
        (data_event(ret=2), "exceeds"),
        (data_event(direction=3), "direction"),
        (data_event(source=9), "source"),
        (data_event(op=99), "op"),
        (data_event(flags=0x80), "flags"),
        (data_event(comm=b"x" * 16), "NUL"),
    ],
)
def test_bad_data_events_are_malformed(raw: bytes, why: str) -> None:
    with pytest.raises(MalformedEvent, match=why):
        decode_socket_data(raw)


def test_perf_padding_is_accepted() -> None:
    assert decode_socket_data(data_event() + b"\0" * 3).payload == b"hello"


def test_conn_connect_carries_the_remote_address() -> None:
    c = decode_conn(conn_event(addr=sockaddr_in("10.1.2.3", 8000)))
    assert c.kind is ConnKind.CONNECT and c.ret == -115 and c.family == 2
    assert c.remote == ("10.1.2.3", 8000) and c.comm == "curl"
    closed = decode_conn(conn_event(kind=3, ret=0, addr=sockaddr_in("10.1.2.3", 8000)))
    assert closed.remote is None


def test_established_carries_its_connects_address_and_times() -> None:
    """socket.c "Non-blocking connects": start the connect() entry, end the established state."""
    c = decode_conn(conn_event(kind=7, addr=sockaddr_in("10.1.2.3", 8000)))
    assert c.kind is ConnKind.ESTABLISHED and c.ret == -115
    assert c.remote == ("10.1.2.3", 8000)
    assert (c.start_mono_ns, c.end_mono_ns) == (10, 30)


def test_the_kernel_s_addresses_of_both_ends() -> None:
    """socket.c zt_sock_addrs: the socket's own and its peer's address at connect or accept;
    IPv4 in IPv6 as plain IPv4 (as /proc is read); zeroed (not read) is None."""
    c = decode_conn(
        conn_event(kind=2, ret=7, local=sockaddr_in("10.0.0.1", 8000),
                   peer=sockaddr_in("10.0.0.2", 51234))
    )  # fmt: skip
    assert (c.local_end, c.peer_end) == (("10.0.0.1", 8000), ("10.0.0.2", 51234))
    six = decode_conn(
        conn_event(local=sockaddr_in6("::ffff:127.0.0.1", 40000),
                   peer=sockaddr_in6("fe80::1", 443))
    )  # fmt: skip
    assert (six.local_end, six.peer_end) == (("127.0.0.1", 40000), ("fe80::1", 443))
    bare = decode_conn(conn_event())
    assert (bare.local_end, bare.peer_end) == (None, None)


def test_a_udp_socket_is_marked_dgram() -> None:
    """socket.c "Datagrams": a UDP socket's CONNECT (its connect() or first send) says so."""
    dns = decode_conn(conn_event(ret=0, addr=sockaddr_in("127.0.0.53", 53), dgram=1))
    assert (dns.dgram, dns.remote) == (True, ("127.0.0.53", 53))
    assert decode_conn(conn_event()).dgram is False


def test_bad_conn_events_are_malformed() -> None:
    for raw in (
        conn_event()[:100],
        conn_event(kind=8),
        conn_event(tag=2),
        conn_event() + b"\0" * 8,
    ):
        with pytest.raises(MalformedEvent):
            decode_conn(raw)


def test_dispatch_on_type_tag() -> None:
    assert isinstance(decode_socket_event(data_event()), SocketDataSample)
    assert isinstance(decode_socket_event(conn_event()), ConnSample)
    for raw in (b"", b"\1\0\0\0" + b"\0" * 400, b"\x09\0\0\0"):
        with pytest.raises(MalformedEvent):
            decode_socket_event(raw)


def test_parse_sockaddr() -> None:
    six = (
        u(10, 2)
        + (443).to_bytes(2, "big")
        + b"\0" * 4
        + socket.inet_pton(socket.AF_INET6, "2001:db8::1")
        + b"\0" * 4
    )
    assert parse_sockaddr(six) == ("2001:db8::1", 443)
    assert parse_sockaddr(u(1, 2) + b"/tmp/sock") is None
    assert parse_sockaddr(b"\2") is None


@given(st.binary(max_size=300))
def test_decoder_never_raises_anything_but_malformed(raw: bytes) -> None:
    with contextlib.suppress(MalformedEvent):
        decode_socket_event(raw)


@given(
    payload=st.binary(max_size=200),
    extra=st.integers(0, 2**40),
    fd=st.integers(-1, 2**31 - 1),
    op=st.sampled_from(list(SockOp)),
)
def test_round_trip(payload: bytes, extra: int, fd: int, op: SockOp) -> None:
    ret = len(payload) + extra or 1
    s = decode_socket_data(data_event(payload=payload, ret=ret, fd=fd, op=op))
    assert (s.payload, s.nbytes, s.fd, s.op) == (payload, ret, fd, op)
    assert s.truncated == (len(payload) < ret)
