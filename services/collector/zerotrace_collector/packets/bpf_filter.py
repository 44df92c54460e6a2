"""A classic BPF socket filter that keeps UDP datagrams to one port (pure): the program the
kernel runs on every frame of a packet socket before queueing it, so a live capture of RoCEv2
(UDP port 4791) on a busy interface wakes Python only for RoCE frames.

The program, for frames that start with an Ethernet header (link_header 14: Ethernet and
loopback devices) or with the IP header (0: tun, GRE, ... read as raw IP):

    [loopback]  drop the outgoing copy of each frame (ancillary pkttype == PACKET_OUTGOING):
                loopback shows every frame twice, leaving and arriving
    IPv4        protocol 17, not a fragment (flags MF or an offset: only the first has the UDP
                header, and the decoder skips every fragment), UDP destination port at the
                header length the IHL gives
    IPv6        next header 17 straight after the fixed header (RoCEv2 senders put no
                extension headers in; a datagram behind one is not kept)
    kept        cut to capture_bytes (the headers are what the analysis reads; the UDP and IP
                headers still say how long the datagram was)

VLAN tags: Linux hands packet sockets the frame with the tag taken out (into metadata), so the
EtherType at offset 12 is the IP one; a tag left in the frame is not matched.

Instructions are (code, jt, jf, k) as struct sock_filter (linux/filter.h); `pack` lays them
out for SO_ATTACH_FILTER.
"""

from __future__ import annotations

import struct

# Opcodes (linux/bpf_common.h, filter.h): class | size | mode, or class | op | source.
LD_W_ABS = 0x20
LD_H_ABS = 0x28
LD_B_ABS = 0x30
LD_H_IND = 0x48
LDX_B_MSH = 0xB1  # X = 4 * (packet[k] & 0x0f): the IPv4 header length
ALU_AND_K = 0x54
JEQ_K = 0x15
JSET_K = 0x45
RET_K = 0x06
# Ancillary data: loads at SKF_AD_OFF + n read the socket buffer's metadata, not its bytes.
SKF_AD_OFF = -0x1000
SKF_AD_PKTTYPE = 4
PACKET_OUTGOING = 4
ETHERNET_HEADER = 14
ETHERTYPE_IPV4, ETHERTYPE_IPV6 = 0x0800, 0x86DD
PROTO_UDP = 17
IPV6_HEADER = 40
IPV4_FRAGMENT = 0x3FFF  # more-fragments flag and fragment offset
MAX_CAPTURE = 0xFFFFFFFF

Instruction = tuple[int, int, int, int]
_INSTRUCTION = struct.Struct("=HBBI")  # struct sock_filter: u16 code, u8 jt, u8 jf, u32 k


def udp_port_filter(
    port: int, link_header: int, capture_bytes: int = MAX_CAPTURE, drop_outgoing: bool = False
) -> list[Instruction]:
    """The program keeping UDP datagrams to `port`, for frames whose IP header starts at
    `link_header` (14 or 0)."""
    if not 0 < port < 1 << 16:
        raise ValueError(f"not a UDP port: {port}")
    if link_header not in (0, ETHERNET_HEADER):
        raise ValueError(f"the IP header starts at 0 or {ETHERNET_HEADER}, not {link_header}")
    ip = link_header
    # Labels are resolved to jump offsets at the end: jumps only go forward.
    code: list[tuple[int, str | int, str | int, int] | str] = []
    if drop_outgoing:
        code += [
            (LD_B_ABS, 0, 0, (SKF_AD_OFF + SKF_AD_PKTTYPE) & 0xFFFFFFFF),
            (JEQ_K, "drop", 0, PACKET_OUTGOING),
        ]
    if link_header == ETHERNET_HEADER:
        code += [
            (LD_H_ABS, 0, 0, 12),
            (JEQ_K, "ipv4", 0, ETHERTYPE_IPV4),
            (JEQ_K, "ipv6", "drop", ETHERTYPE_IPV6),
        ]
    else:
        code += [
            (LD_B_ABS, 0, 0, 0),
            (ALU_AND_K, 0, 0, 0xF0),
            (JEQ_K, "ipv4", 0, 0x40),
            (JEQ_K, "ipv6", "drop", 0x60),
        ]
    code += [
        "ipv4",
        (LD_B_ABS, 0, 0, ip + 9),
        (JEQ_K, 0, "drop", PROTO_UDP),
        (LD_H_ABS, 0, 0, ip + 6),
        (JSET_K, "drop", 0, IPV4_FRAGMENT),
        (LDX_B_MSH, 0, 0, ip),
        (LD_H_IND, 0, 0, ip + 2),  # the UDP destination port, X bytes past the IP header
        (JEQ_K, "keep", "drop", port),
        "ipv6",
        (LD_B_ABS, 0, 0, ip + 6),
        (JEQ_K, 0, "drop", PROTO_UDP),
        (LD_H_ABS, 0, 0, ip + IPV6_HEADER + 2),
        (JEQ_K, "keep", "drop", port),
        "keep",
        (RET_K, 0, 0, capture_bytes),
        "drop",
        (RET_K, 0, 0, 0),
    ]
    return _resolve(code)


def pack(program: list[Instruction]) -> bytes:
    return b"".join(_INSTRUCTION.pack(*instruction) for instruction in program)


def _resolve(code: list[tuple[int, str | int, str | int, int] | str]) -> list[Instruction]:
    labels: dict[str, int] = {}
    at = 0
    for item in code:
        if isinstance(item, str):
            labels[item] = at
        else:
            at += 1
    out: list[Instruction] = []
    for item in code:
        if isinstance(item, str):
            continue
        op, jt, jf, k = item
        here = len(out)
        out.append((op, _offset(jt, labels, here), _offset(jf, labels, here), k))
    return out


def _offset(target: str | int, labels: dict[str, int], here: int) -> int:
    """A jump's offset: the instructions skipped after this one."""
    return target if isinstance(target, int) else labels[target] - here - 1
