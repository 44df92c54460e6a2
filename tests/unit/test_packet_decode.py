"""Link, IP and TCP decoding with hand-built frames, for every supported link type."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_collector.packets import frames
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.decode import TcpPacket, decode_tcp
from zerotrace_collector.packets.link import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    SUPPORTED_LINKTYPES,
)
from zerotrace_collector.packets.skip import Skip
from zerotrace_collector.packets.tcp import (
    ACK,
    OPT_MSS,
    OPT_SACK_PERMITTED,
    OPT_TIMESTAMP,
    OPT_WSCALE,
    PSH,
    SYN,
    parse_options,
)

V4 = ("192.0.2.1", "198.51.100.7")
V6 = ("2001:db8::1", "fe80::a:b")
BUILT_LINKTYPES = (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)


def decode(data: bytes, linktype: int = LINKTYPE_ETHERNET) -> TcpPacket | Skip:
    return decode_tcp(CapturedPacket(123, linktype, data, len(data)))


def segment(src: str, dst: str, payload: bytes = b"hello", flags: int = ACK | PSH) -> bytes:
    return frames.tcp_header(src, dst, 51000, 443, 1000, 2000, flags, payload)


@pytest.mark.parametrize("linktype", BUILT_LINKTYPES)
@pytest.mark.parametrize("addrs", [V4, V6], ids=["ipv4", "ipv6"])
def test_each_link_type_carries_tcp(linktype: int, addrs: tuple[str, str]) -> None:
    frame = frames.tcp_frame(
        addrs[0], 51000, addrs[1], 443, 1000, 2000, ACK | PSH, b"hello", linktype
    )
    got = decode(frame, linktype)
    assert isinstance(got, TcpPacket)
    assert (got.src, got.src_port, got.dst, got.dst_port) == (addrs[0], 51000, addrs[1], 443)
    assert (got.seq, got.ack, got.flags, got.payload, got.ts_ns) == (
        1000,
        2000,
        ACK | PSH,
        b"hello",
        123,
    )
    assert not got.snapped


def test_ethernet_vlan_tags_single_and_stacked() -> None:
    packet = frames.ipv4(*V4, segment(*V4))
    for vlans in [(10,), (10, 20)]:
        got = decode(frames.ethernet(packet, ETHERTYPE_IPV4, vlans))
        assert isinstance(got, TcpPacket) and got.payload == b"hello"
    qinq = b"\x02" * 12 + struct.pack("!HHHH", 0x88A8, 5, 0x8100, 6) + struct.pack("!H", 0x0800)
    got = decode(qinq + packet)
    assert isinstance(got, TcpPacket) and got.dst_port == 443


def test_ethernet_padding_is_not_payload() -> None:
    frame = frames.ethernet(frames.ipv4(*V4, segment(*V4, b"")), ETHERTYPE_IPV4) + b"\0" * 6
    got = decode(frame)
    assert isinstance(got, TcpPacket) and got.payload == b""


def test_loopback_families_in_both_byte_orders() -> None:
    for family in (2, 10, 24, 28, 30):
        version = 4 if family == 2 else 6
        addrs = V4 if version == 4 else V6
        packet = (frames.ipv4 if version == 4 else frames.ipv6)(*addrs, segment(*addrs))
        for prefix, linktype in [
            (struct.pack("<I", family), LINKTYPE_NULL),
            (struct.pack(">I", family), LINKTYPE_NULL),
            (struct.pack(">I", family), LINKTYPE_LOOP),
        ]:
            got = decode(prefix + packet, linktype)
            assert isinstance(got, TcpPacket), (family, linktype)
    assert decode(struct.pack("<I", 7) + b"\0" * 40, LINKTYPE_NULL) is Skip.NON_IP


def test_sll_and_sll2_with_ipv6() -> None:
    packet = frames.ipv6(*V6, segment(*V6))
    assert isinstance(decode(frames.sll(packet, ETHERTYPE_IPV6), LINKTYPE_LINUX_SLL), TcpPacket)
    assert isinstance(decode(frames.sll2(packet, ETHERTYPE_IPV6), LINKTYPE_LINUX_SLL2), TcpPacket)
    assert decode(frames.sll(packet, 0x0806), LINKTYPE_LINUX_SLL) is Skip.NON_IP


def test_ipv6_extension_headers_are_skipped() -> None:
    tcp = segment(*V6)
    hop_by_hop = bytes([60, 0]) + b"\x01\x04\0\0\0\0"  # next: destination options; PadN
    dest_opts = bytes([44, 1]) + b"\x01\x0c" + b"\0" * 12  # next: fragment; 16 bytes
    atomic_fragment = bytes([6, 0]) + struct.pack("!HI", 0, 99)  # offset 0, last: whole packet
    packet = frames.ipv6(
        *V6, tcp, next_header=0, ext_headers=hop_by_hop + dest_opts + atomic_fragment
    )
    got = decode(packet, LINKTYPE_RAW)
    assert isinstance(got, TcpPacket) and got.payload == b"hello"
    routing = bytes([51, 0, 0, 0]) + b"\0" * 4
    auth = bytes([6, 1, 0, 0]) + b"\0" * 8  # AH: (1 + 2) * 4 = 12 bytes
    got = decode(frames.ipv6(*V6, tcp, next_header=43, ext_headers=routing + auth), LINKTYPE_RAW)
    assert isinstance(got, TcpPacket) and got.src_port == 51000


def test_fragments_are_skipped() -> None:
    tcp = segment(*V4)
    assert decode(frames.ipv4(*V4, tcp, flags_frag=0x2000), LINKTYPE_RAW) is Skip.FRAGMENT
    assert decode(frames.ipv4(*V4, tcp, flags_frag=0x0010), LINKTYPE_RAW) is Skip.FRAGMENT
    v6_fragment = bytes([6, 0]) + struct.pack("!HI", (8 << 3) | 1, 99)
    packet = frames.ipv6(*V6, segment(*V6), next_header=44, ext_headers=v6_fragment)
    assert decode(packet, LINKTYPE_RAW) is Skip.FRAGMENT


def test_ipv4_options_are_skipped() -> None:
    packet = frames.ipv4(*V4, segment(*V4), options=b"\x01\x01\x01\x00")
    got = decode(packet, LINKTYPE_IPV4)
    assert isinstance(got, TcpPacket) and got.payload == b"hello"


def test_non_tcp_non_ip_and_unknown_links() -> None:
    udp = struct.pack("!HHHH", 53, 53, 8, 0)
    assert decode(frames.ipv4(*V4, udp, protocol=17), LINKTYPE_RAW) is Skip.NON_TCP
    assert decode(frames.ipv6(*V6, b"", next_header=59), LINKTYPE_RAW) is Skip.NON_TCP
    arp = frames.ethernet(b"\0" * 28, 0x0806)
    assert decode(arp) is Skip.NON_IP
    assert decode(frames.ethernet(b"\0" * 28, 0x05DC)) is Skip.NON_IP  # 802.3 length field
    assert decode(b"\0" * 60, 105) is Skip.UNSUPPORTED_LINK  # 802.11


def test_cut_headers_are_malformed() -> None:
    frame = frames.tcp_frame(*V4[:1], 1, V4[1], 2, 0)
    for cut in (10, 14 + 10, 14 + 20 + 10):
        assert decode(frame[:cut]) is Skip.MALFORMED, cut


def test_a_snapped_payload_is_marked() -> None:
    frame = frames.tcp_frame(V4[0], 1, V4[1], 2, 0, 0, ACK, b"x" * 100)
    got = decode(frame[:-40])
    assert isinstance(got, TcpPacket) and got.snapped and got.payload == b"x" * 60


def test_tcp_options() -> None:
    options = (
        struct.pack("!BBH", OPT_MSS, 4, 1460)
        + b"\x01"
        + struct.pack("!BBB", OPT_WSCALE, 3, 7)
        + struct.pack("!BB", OPT_SACK_PERMITTED, 2)
        + struct.pack("!BBII", OPT_TIMESTAMP, 10, 1, 2)
    )
    tcp = frames.tcp_header(*V4, 1, 2, 3, 0, SYN, b"", options=options)
    got = decode(frames.ipv4(*V4, tcp), LINKTYPE_RAW)
    assert isinstance(got, TcpPacket) and got.syn and got.payload == b""
    assert [k for k, _ in got.options] == [OPT_MSS, OPT_WSCALE, OPT_SACK_PERMITTED, OPT_TIMESTAMP]
    assert got.options[0][1] == struct.pack("!H", 1460)
    assert parse_options(b"\x02\x09\x00") is None  # length past the end
    assert parse_options(b"\x02\x01") is None  # length below 2
    assert parse_options(b"\x00garbage") == ()  # end of options
    broken = frames.tcp_header(*V4, 1, 2, 3, 0, ACK, b"", options=b"\x02\x09\x00\x00")
    assert decode(frames.ipv4(*V4, broken), LINKTYPE_RAW) is Skip.MALFORMED


@settings(max_examples=300, deadline=None)
@given(
    linktype=st.sampled_from(BUILT_LINKTYPES),
    v6=st.booleans(),
    ports=st.tuples(st.integers(0, 65535), st.integers(0, 65535)),
    seq=st.integers(0, 2**32 - 1),
    ack=st.integers(0, 2**32 - 1),
    flags=st.integers(0, 255),
    payload=st.binary(max_size=200),
)
def test_built_frames_decode_to_what_was_built(
    linktype: int,
    v6: bool,
    ports: tuple[int, int],
    seq: int,
    ack: int,
    flags: int,
    payload: bytes,
) -> None:
    src, dst = V6 if v6 else V4
    frame = frames.tcp_frame(src, ports[0], dst, ports[1], seq, ack, flags, payload, linktype)
    got = decode(frame, linktype)
    assert isinstance(got, TcpPacket)
    assert (got.src, got.dst, got.src_port, got.dst_port) == (src, dst, *ports)
    assert (got.seq, got.ack, got.flags, got.payload) == (seq, ack, flags, payload)


@settings(max_examples=500, deadline=None)
@given(linktype=st.sampled_from(SUPPORTED_LINKTYPES), data=st.binary(max_size=120))
def test_arbitrary_bytes_never_raise(linktype: int, data: bytes) -> None:
    assert isinstance(decode(data, linktype), TcpPacket | Skip)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), v6=st.booleans())
def test_corrupted_real_frames_never_raise(data: st.DataObject, v6: bool) -> None:
    src, dst = V6 if v6 else V4
    frame = bytearray(frames.tcp_frame(src, 1, dst, 2, 3, 4, ACK, b"payload"))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    assert isinstance(decode(bytes(frame[:cut])), TcpPacket | Skip)
