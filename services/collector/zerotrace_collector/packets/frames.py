"""Build frames (pure): Ethernet, SLL, SLL2, NULL, IPv4, IPv6 and TCP, checksums included.

The inverse of the decoders, for synthetic captures: tests, examples, and replays of traffic
described rather than recorded.
"""

from __future__ import annotations

import socket
import struct

from zerotrace_collector.packets.ip import PROTO_TCP
from zerotrace_collector.packets.link import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)
from zerotrace_collector.packets.tcp import ACK


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def tcp_header(
    src: str,
    dst: str,
    src_port: int,
    dst_port: int,
    seq: int,
    ack: int,
    flags: int,
    payload: bytes = b"",
    window: int = 65535,
    options: bytes = b"",
) -> bytes:
    """A TCP header and payload with a correct checksum; options are padded to 4 bytes."""
    options += b"\x01" * (-len(options) % 4)
    offset = (20 + len(options)) // 4
    head = (
        struct.pack(
            "!HHIIBBHHH",
            src_port,
            dst_port,
            seq % (1 << 32),
            ack % (1 << 32),
            offset << 4,
            flags,
            window,
            0,
            0,
        )
        + options
    )
    segment = head + payload
    family = socket.AF_INET6 if ":" in src else socket.AF_INET
    pseudo = socket.inet_pton(family, src) + socket.inet_pton(family, dst)
    if family == socket.AF_INET:
        pseudo += struct.pack("!BBH", 0, PROTO_TCP, len(segment))
    else:
        pseudo += struct.pack("!IxxxB", len(segment), PROTO_TCP)
    value = checksum(pseudo + segment)
    return segment[:16] + struct.pack("!H", value) + segment[18:]


def udp(src_port: int, dst_port: int, payload: bytes) -> bytes:
    """A UDP header and payload (checksum 0: "none", which IPv4 allows and decoders ignore)."""
    return struct.pack("!HHHH", src_port, dst_port, 8 + len(payload), 0) + payload


def ipv4(
    src: str,
    dst: str,
    payload: bytes,
    protocol: int = PROTO_TCP,
    flags_frag: int = 0x4000,
    ident: int = 0,
    options: bytes = b"",
) -> bytes:
    """flags_frag: the 16-bit flags and fragment offset field (default: don't fragment)."""
    ihl = (20 + len(options)) // 4
    head = (
        struct.pack(
            "!BBHHHBBH4s4s",
            0x40 | ihl,
            0,
            ihl * 4 + len(payload),
            ident,
            flags_frag,
            64,
            protocol,
            0,
            socket.inet_pton(socket.AF_INET, src),
            socket.inet_pton(socket.AF_INET, dst),
        )
        + options
    )
    return head[:10] + struct.pack("!H", checksum(head)) + head[12:] + payload


def ipv6(
    src: str, dst: str, payload: bytes, next_header: int = PROTO_TCP, ext_headers: bytes = b""
) -> bytes:
    """ext_headers: already chained; next_header is then the type of the first of them."""
    body = ext_headers + payload
    return (
        struct.pack(
            "!IHBB16s16s",
            6 << 28,
            len(body),
            next_header,
            64,
            socket.inet_pton(socket.AF_INET6, src),
            socket.inet_pton(socket.AF_INET6, dst),
        )
        + body
    )


def ethernet(packet: bytes, ethertype: int, vlans: tuple[int, ...] = ()) -> bytes:
    tags = b"".join(struct.pack("!HH", 0x8100, vid) for vid in vlans)
    head = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + tags
    return head + struct.pack("!H", ethertype) + packet


def sll(packet: bytes, ethertype: int) -> bytes:
    return struct.pack("!HHH8sH", 0, 1, 6, b"\x02\0\0\0\0\x01", ethertype) + packet


def sll2(packet: bytes, ethertype: int) -> bytes:
    return struct.pack("!HHIHBB8s", ethertype, 0, 1, 1, 0, 6, b"\x02\0\0\0\0\x01") + packet


def null(packet: bytes, version: int) -> bytes:
    return struct.pack("<I", 2 if version == 4 else 24) + packet


def tcp_frame(
    src: str,
    src_port: int,
    dst: str,
    dst_port: int,
    seq: int,
    ack: int = 0,
    flags: int = ACK,
    payload: bytes = b"",
    linktype: int = LINKTYPE_ETHERNET,
) -> bytes:
    """A whole frame of the given link type carrying one TCP segment over IPv4 or IPv6."""
    segment = tcp_header(src, dst, src_port, dst_port, seq, ack, flags, payload)
    version = 6 if ":" in src else 4
    packet = ipv6(src, dst, segment) if version == 6 else ipv4(src, dst, segment)
    ethertype = ETHERTYPE_IPV6 if version == 6 else ETHERTYPE_IPV4
    if linktype == LINKTYPE_ETHERNET:
        return ethernet(packet, ethertype)
    if linktype == LINKTYPE_LINUX_SLL:
        return sll(packet, ethertype)
    if linktype == LINKTYPE_LINUX_SLL2:
        return sll2(packet, ethertype)
    if linktype == LINKTYPE_NULL:
        return null(packet, version)
    if linktype == LINKTYPE_RAW:
        return packet
    raise ValueError(f"no frame builder for link type {linktype}")
