"""Link layer (pure): find the IP header in a frame of a known link type.

Loopback captures come in several shapes: Linux writes Ethernet with zero addresses for `lo`,
BSD and macOS write NULL/LOOP (a 4-byte address family), and `any` captures are SLL/SLL2.
"""

from __future__ import annotations

import struct

from zerotrace_collector.packets.skip import Skip

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
SUPPORTED_LINKTYPES = (
    LINKTYPE_NULL,
    LINKTYPE_ETHERNET,
    LINKTYPE_RAW,
    LINKTYPE_LOOP,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL2,
)

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
# 802.1Q, 802.1ad (QinQ outer tag) and the pre-standard QinQ type: 4 bytes each, stackable.
VLAN_ETHERTYPES = (0x8100, 0x88A8, 0x9100)
ETHERNET_HEADER_LEN = 14
SLL_HEADER_LEN = 16
SLL2_HEADER_LEN = 20
# NULL/LOOP address families: AF_INET is 2 everywhere; AF_INET6 is 10 on Linux, 24 on
# NetBSD/OpenBSD, 28 on FreeBSD, 30 on macOS.
AF_INET = 2
AF_INET6 = (10, 24, 28, 30)


def ip_offset(linktype: int, frame: bytes) -> tuple[int, int] | Skip:
    """(IP version 4 or 6, offset of the IP header in frame), or why there is none."""
    if linktype == LINKTYPE_ETHERNET:
        return _ethertype(frame, 12)
    if linktype == LINKTYPE_LINUX_SLL:
        return _ethertype(frame, 14, SLL_HEADER_LEN)
    if linktype == LINKTYPE_LINUX_SLL2:
        return _ethertype(frame, 0, SLL2_HEADER_LEN)
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        return _by_version(frame, 0)
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP):
        return _null(linktype, frame)
    return Skip.UNSUPPORTED_LINK


def _ethertype(frame: bytes, type_at: int, header_len: int | None = None) -> tuple[int, int] | Skip:
    """The ethertype field sits at type_at; the payload follows it (Ethernet), or starts at a
    fixed header_len (SLL2 puts its protocol first). VLAN tags may follow either."""
    pos = type_at + 2 if header_len is None else header_len
    if len(frame) < max(pos, type_at + 2):
        return Skip.MALFORMED
    ethertype = struct.unpack_from("!H", frame, type_at)[0]
    while ethertype in VLAN_ETHERTYPES:
        if len(frame) < pos + 4:
            return Skip.MALFORMED
        ethertype = struct.unpack_from("!H", frame, pos + 2)[0]
        pos += 4
    if ethertype == ETHERTYPE_IPV4:
        return 4, pos
    if ethertype == ETHERTYPE_IPV6:
        return 6, pos
    return Skip.NON_IP


def _by_version(frame: bytes, pos: int) -> tuple[int, int] | Skip:
    if len(frame) <= pos:
        return Skip.MALFORMED
    version = frame[pos] >> 4
    return (version, pos) if version in (4, 6) else Skip.NON_IP


def _null(linktype: int, frame: bytes) -> tuple[int, int] | Skip:
    if len(frame) < 4:
        return Skip.MALFORMED
    # NULL holds the family in the writer's byte order, LOOP in network order; the family is
    # small, so a value above 0xFFFF means the other byte order.
    family = struct.unpack_from("!I" if linktype == LINKTYPE_LOOP else "<I", frame)[0]
    if family > 0xFFFF:
        family = struct.unpack_from(">I" if linktype == LINKTYPE_NULL else "<I", frame)[0]
    if family == AF_INET or family in AF_INET6:
        return _by_version(frame, 4)
    return Skip.NON_IP
