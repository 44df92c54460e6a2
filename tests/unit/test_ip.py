"""IPv4 and IPv6 headers on their own (zerotrace_collector/packets/ip.py): addresses, the
upper-layer protocol, where its bytes start and end (padding trimmed), snapped captures, the
zero lengths of GSO captures and jumbograms, and what is malformed. Whole frames through
every link type are in test_packet_decode.py."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.packets import frames
from zerotrace_collector.packets.ip import PROTO_TCP, IpPacket, parse_ip
from zerotrace_collector.packets.skip import Skip

pytestmark = pytest.mark.unit

V4 = ("10.0.0.1", "10.0.0.2")
V6 = ("fd00::1", "fd00::2")
PAYLOAD = b"upper-layer bytes"


def test_ipv4_at_an_offset_says_where_its_payload_is() -> None:
    frame = b"L" * 14 + frames.ipv4(*V4, PAYLOAD)
    got = parse_ip(frame, 14, 4)
    assert got == IpPacket(4, *V4, PROTO_TCP, 14 + 20, len(frame), False)


def test_ipv4_options_and_link_padding_are_not_payload() -> None:
    packet = frames.ipv4(*V4, PAYLOAD, protocol=17, options=b"\x01" * 8)
    got = parse_ip(packet + b"\0" * 6, 0, 4)  # Ethernet pads short frames
    assert isinstance(got, IpPacket)
    assert (got.protocol, got.payload_at, got.payload_end) == (17, 28, len(packet))
    assert not got.snapped


def test_a_snapped_ipv4_capture_is_marked() -> None:
    packet = frames.ipv4(*V4, PAYLOAD)
    got = parse_ip(packet[:-5], 0, 4)
    assert isinstance(got, IpPacket) and got.snapped and got.payload_end == len(packet) - 5


def test_ipv4_total_length_zero_means_the_whole_frame() -> None:
    packet = bytearray(frames.ipv4(*V4, PAYLOAD))
    packet[2:4] = b"\0\0"  # as a TSO packet captured before segmentation carries it
    got = parse_ip(bytes(packet), 0, 4)
    assert isinstance(got, IpPacket) and got.payload_end == len(packet) and not got.snapped


@pytest.mark.parametrize("flags_frag", [0x2000, 0x0001, 0x2010])
def test_ipv4_fragments_are_skipped(flags_frag: int) -> None:
    assert parse_ip(frames.ipv4(*V4, PAYLOAD, flags_frag=flags_frag), 0, 4) is Skip.FRAGMENT


def test_broken_ipv4_headers_are_malformed() -> None:
    packet = frames.ipv4(*V4, PAYLOAD)
    assert parse_ip(packet[:19], 0, 4) is Skip.MALFORMED  # shorter than a header
    assert parse_ip(b"\x60" + packet[1:], 0, 4) is Skip.MALFORMED  # version 6 in a v4 slot
    assert parse_ip(b"\x44" + packet[1:], 0, 4) is Skip.MALFORMED  # IHL 16 bytes
    assert parse_ip(packet[:2] + struct.pack("!H", 12) + packet[4:], 0, 4) is Skip.MALFORMED


def test_ipv6_payload_and_jumbogram_lengths() -> None:
    packet = frames.ipv6(*V6, PAYLOAD)
    got = parse_ip(packet + b"\0\0", 0, 6)
    assert got == IpPacket(6, *V6, PROTO_TCP, 40, len(packet), False)
    jumbo = packet[:4] + b"\0\0" + packet[6:]  # payload length 0: up to the frame's end
    got = parse_ip(jumbo, 0, 6)
    assert isinstance(got, IpPacket) and got.payload_end == len(jumbo)


def test_ipv6_extension_headers_lead_to_the_upper_layer() -> None:
    hop_by_hop = bytes([17, 0]) + b"\x01\x04\0\0\0\0"  # 8 bytes, next: UDP
    got = parse_ip(frames.ipv6(*V6, PAYLOAD, next_header=0, ext_headers=hop_by_hop), 0, 6)
    assert isinstance(got, IpPacket) and (got.protocol, got.payload_at) == (17, 48)


def test_ipv6_extension_headers_past_the_packet_are_malformed() -> None:
    claims_64 = bytes([PROTO_TCP, 7]) + b"\0" * 6  # says 64 bytes, the packet has 8
    assert parse_ip(frames.ipv6(*V6, b"", next_header=0, ext_headers=claims_64), 0, 6) is (
        Skip.MALFORMED
    )
    cut = frames.ipv6(*V6, b"", next_header=0)  # an extension header with no bytes
    assert parse_ip(cut, 0, 6) is Skip.MALFORMED
    assert parse_ip(frames.ipv6(*V6, PAYLOAD)[:39], 0, 6) is Skip.MALFORMED


@given(
    st.ip_addresses(v=4) | st.ip_addresses(v=6),
    st.binary(max_size=64),
    st.integers(0, 32),
    st.integers(0, 255),
)
def test_a_built_packet_parses_back(
    src: ipaddress.IPv4Address | ipaddress.IPv6Address, payload: bytes, pos: int, protocol: int
) -> None:
    dst = src + 1 if int(src) < 2**src.max_prefixlen - 1 else src - 1
    if src.version == 4:
        packet = frames.ipv4(str(src), str(dst), payload, protocol=protocol)
    else:
        protocol = PROTO_TCP  # other next-header values may be extension headers
        packet = frames.ipv6(str(src), str(dst), payload)
    got = parse_ip(b"\xee" * pos + packet, pos, src.version)
    assert isinstance(got, IpPacket)
    # Compared as addresses: inet_ntop writes an IPv4-mapped IPv6 address dotted.
    found = (ipaddress.ip_address(got.src), ipaddress.ip_address(got.dst))
    assert (got.version, *found, got.protocol) == (src.version, src, dst, protocol)
    assert (b"\xee" * pos + packet)[got.payload_at : got.payload_end] == payload
