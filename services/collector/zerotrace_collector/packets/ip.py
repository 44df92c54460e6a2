"""IPv4 and IPv6 headers (pure): addresses, the upper-layer protocol and where its bytes are.

Checksums are not verified: captures taken on the sending host carry checksums the NIC fills
in later (offload), so they are often wrong in the file while the packet was fine.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from zerotrace_collector.packets.skip import Skip

PROTO_TCP = 6
PROTO_UDP = 17
# IPv6 extension headers with the generic (next header, length in 8-byte units - 1) layout:
# hop-by-hop, routing, destination options, mobility, HIP, shim6.
_GENERIC_EXT = (0, 43, 60, 135, 139, 140)
_FRAGMENT_EXT = 44
_AH_EXT = 51  # length in 4-byte units - 2
IPV4_MIN_HEADER = 20
IPV6_HEADER = 40


@dataclass(frozen=True, slots=True)
class IpPacket:
    version: int
    src: str
    dst: str
    protocol: int  # upper-layer protocol after any IPv6 extension headers
    payload_at: int  # offset of the upper-layer header in the frame
    payload_end: int  # end of the captured upper-layer bytes (padding trimmed)
    snapped: bool  # the capture holds fewer bytes than the header says the packet has


def parse_ip(frame: bytes, pos: int, version: int) -> IpPacket | Skip:
    return _ipv4(frame, pos) if version == 4 else _ipv6(frame, pos)


def _ipv4(frame: bytes, pos: int) -> IpPacket | Skip:
    if len(frame) < pos + IPV4_MIN_HEADER or frame[pos] >> 4 != 4:
        return Skip.MALFORMED
    ihl = (frame[pos] & 0x0F) * 4
    total_len, flags_frag, protocol = (
        struct.unpack_from("!H", frame, pos + 2)[0],
        struct.unpack_from("!H", frame, pos + 6)[0],
        frame[pos + 9],
    )
    if ihl < IPV4_MIN_HEADER or len(frame) < pos + ihl:
        return Skip.MALFORMED
    # Total length 0 is what a TSO/GSO packet captured before segmentation may carry.
    if total_len == 0:
        total_len = len(frame) - pos
    if total_len < ihl:
        return Skip.MALFORMED
    if flags_frag & 0x3FFF:  # more-fragments flag or a fragment offset
        return Skip.FRAGMENT
    src = socket.inet_ntop(socket.AF_INET, frame[pos + 12 : pos + 16])
    dst = socket.inet_ntop(socket.AF_INET, frame[pos + 16 : pos + 20])
    end = pos + total_len
    return IpPacket(4, src, dst, protocol, pos + ihl, min(end, len(frame)), end > len(frame))


def _ipv6(frame: bytes, pos: int) -> IpPacket | Skip:
    if len(frame) < pos + IPV6_HEADER or frame[pos] >> 4 != 6:
        return Skip.MALFORMED
    payload_len = struct.unpack_from("!H", frame, pos + 4)[0]
    next_header = frame[pos + 6]
    src = socket.inet_ntop(socket.AF_INET6, frame[pos + 8 : pos + 24])
    dst = socket.inet_ntop(socket.AF_INET6, frame[pos + 24 : pos + 40])
    # Payload length 0 means a jumbogram (hop-by-hop Jumbo option) or a GSO capture.
    end = pos + IPV6_HEADER + payload_len if payload_len else len(frame)
    at = pos + IPV6_HEADER
    while next_header != PROTO_TCP:
        if next_header in _GENERIC_EXT or next_header == _AH_EXT:
            if len(frame) < at + 2:
                return Skip.MALFORMED
            unit, extra = (4, 2) if next_header == _AH_EXT else (8, 1)
            length = (frame[at + 1] + extra) * unit
            next_header = frame[at]
        elif next_header == _FRAGMENT_EXT:
            if len(frame) < at + 8:
                return Skip.MALFORMED
            if struct.unpack_from("!H", frame, at + 2)[0] & 0xFFF9:  # offset or more-fragments
                return Skip.FRAGMENT
            length = 8  # an atomic fragment (offset 0, last): the packet is whole
            next_header = frame[at]
        else:
            break  # UDP, ICMPv6, ESP, no-next-header (59), ...: not TCP
        at += length
        if at > end:
            return Skip.MALFORMED
    return IpPacket(6, src, dst, next_header, at, min(end, len(frame)), end > len(frame))
