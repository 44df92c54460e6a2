"""RoCEv2 frames built with scapy's RoCE layers (scapy.contrib.roce: BTH, AETH, CNP), for
captures with known drops, reorders, duplicates and delays. RETH (not a scapy layer) is
packed here: virtual address, R_Key, DMA length (IBA 9.3.3.3)."""

from __future__ import annotations

import struct

from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH, cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET
from zerotrace_collector.packets.roce import ROCEV2_PORT

US = 1_000
# Explicit MAC addresses: left out, scapy would look the destination up (ARP, IPv6 neighbour
# discovery) on this machine's network.
SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
SOURCE_PORT = 49_152  # RoCEv2 senders vary it per QP for ECMP entropy; any value is fine

# AETH syndromes (IBA 9.7.5.1.4): ACK with credit count 31 (no credit), RNR NAK with timer 14,
# NAK PSN sequence error, NAK remote access error.
ACK = 0x1F
RNR_NAK = 0x20 | 14
NAK_SEQ = 0x60
NAK_ACCESS = 0x62


def reth(length: int) -> bytes:
    return struct.pack("!QII", 0x7F00_0000_1000, 0x1234, length)


def frame(
    ts_us: float,
    src: str,
    dst: str,
    opcode: int,
    dest_qp: int,
    psn: int,
    *,
    ack_req: bool = False,
    syndrome: int | None = None,
    reth_length: int | None = None,
    payload: bytes = b"",
) -> CapturedPacket:
    layer: Packet = BTH(opcode=opcode, dqpn=dest_qp, psn=psn % (1 << 24), ackreq=int(ack_req))
    if syndrome is not None:
        layer = layer / AETH(syndrome=syndrome, msn=0)
    body = (reth(reth_length) if reth_length is not None else b"") + payload
    if body:
        layer = layer / Raw(body)
    return _captured(ts_us, src, dst, layer)


def cnp_frame(ts_us: float, src: str, dst: str, dest_qp: int) -> CapturedPacket:
    return _captured(ts_us, src, dst, cnp(dest_qp))


def _captured(ts_us: float, src: str, dst: str, layer: Packet) -> CapturedPacket:
    ip = IPv6(src=src, dst=dst) if ":" in src else IP(src=src, dst=dst)
    data = raw(
        Ether(src=SRC_MAC, dst=DST_MAC) / ip / UDP(sport=SOURCE_PORT, dport=ROCEV2_PORT) / layer
    )
    return CapturedPacket(round(ts_us * US), LINKTYPE_ETHERNET, data, len(data))
