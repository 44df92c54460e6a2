"""packets/udp.py and the UDP side of packets/decode.py: a datagram's ports and payload over
IPv4 and IPv6, a cut capture, a broken header."""

from __future__ import annotations

import pytest

from zerotrace_collector.packets import frames
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.decode import UdpPacket, decode_packet, decode_tcp
from zerotrace_collector.packets.ip import PROTO_UDP
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET, LINKTYPE_RAW
from zerotrace_collector.packets.skip import Skip
from zerotrace_collector.packets.udp import HEADER, UdpHeader, parse_udp

pytestmark = pytest.mark.unit

QUERY = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x00\x00\x01\x00\x01"


def captured(frame: bytes, linktype: int = LINKTYPE_RAW, ts: int = 5) -> CapturedPacket:
    return CapturedPacket(ts, linktype, frame, len(frame))


def test_header_fields() -> None:
    raw = frames.udp(40000, 53, QUERY)
    assert parse_udp(raw, 0, len(raw)) == UdpHeader(40000, 53, HEADER + len(QUERY))


def test_short_or_inconsistent_headers_are_malformed() -> None:
    assert parse_udp(b"\0" * 7, 0, 7) is Skip.MALFORMED
    assert parse_udp(b"\0" * 8, 0, 8) is Skip.MALFORMED  # length 0 < 8


def test_a_datagram_over_ipv4_and_ethernet() -> None:
    frame = frames.ethernet(
        frames.ipv4("10.0.0.1", "10.0.0.53", frames.udp(40000, 53, QUERY), PROTO_UDP), 0x0800
    )
    got = decode_packet(captured(frame, LINKTYPE_ETHERNET))
    assert got == UdpPacket(5, "10.0.0.1", 40000, "10.0.0.53", 53, QUERY, len(QUERY))
    assert decode_tcp(captured(frame, LINKTYPE_ETHERNET)) is Skip.NON_TCP


def test_a_datagram_over_ipv6() -> None:
    frame = frames.ipv6("fd00::1", "fd00::53", frames.udp(40000, 53, QUERY), PROTO_UDP)
    got = decode_packet(captured(frame))
    assert isinstance(got, UdpPacket)
    assert (got.src, got.dst, got.payload, got.snapped) == ("fd00::1", "fd00::53", QUERY, False)


def test_a_cut_datagram_says_so_and_keeps_its_size() -> None:
    frame = frames.ipv4("10.0.0.1", "10.0.0.53", frames.udp(40000, 53, QUERY), PROTO_UDP)
    got = decode_packet(CapturedPacket(5, LINKTYPE_RAW, frame[:-4], len(frame)))
    assert isinstance(got, UdpPacket)
    assert (got.payload, got.size, got.snapped) == (QUERY[:-4], len(QUERY), True)


def test_a_broken_udp_header_counts_as_not_read() -> None:
    frame = frames.ipv4("10.0.0.1", "10.0.0.53", b"\0" * 8, PROTO_UDP)
    assert decode_packet(captured(frame)) is Skip.NON_TCP
