"""A captured frame -> a TCP segment or a UDP datagram with its addresses, or the reason it is
skipped (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.ip import PROTO_TCP, PROTO_UDP, parse_ip
from zerotrace_collector.packets.link import ip_offset
from zerotrace_collector.packets.skip import Skip
from zerotrace_collector.packets.tcp import ACK, FIN, RST, SYN, parse_tcp
from zerotrace_collector.packets.udp import HEADER as UDP_HEADER
from zerotrace_collector.packets.udp import parse_udp


@dataclass(frozen=True, slots=True)
class TcpPacket:
    ts_ns: int
    src: str
    src_port: int
    dst: str
    dst_port: int
    seq: int
    ack: int
    flags: int
    window: int
    options: tuple[tuple[int, bytes], ...]
    payload: bytes
    snapped: bool = False  # the capture cut the payload: fewer bytes here than were sent

    @property
    def syn(self) -> bool:
        return bool(self.flags & SYN)

    @property
    def fin(self) -> bool:
        return bool(self.flags & FIN)

    @property
    def rst(self) -> bool:
        return bool(self.flags & RST)

    @property
    def has_ack(self) -> bool:
        return bool(self.flags & ACK)


@dataclass(frozen=True, slots=True)
class UdpPacket:
    ts_ns: int
    src: str
    src_port: int
    dst: str
    dst_port: int
    payload: bytes
    size: int  # payload bytes the datagram carried (its header says)
    snapped: bool = False  # the capture cut the datagram: fewer bytes here than were sent


def decode_tcp(packet: CapturedPacket) -> TcpPacket | Skip:
    """A TCP segment; anything else (UDP too) is skipped."""
    decoded = decode_packet(packet)
    return Skip.NON_TCP if isinstance(decoded, UdpPacket) else decoded


def decode_packet(packet: CapturedPacket) -> TcpPacket | UdpPacket | Skip:
    frame = packet.data
    found = ip_offset(packet.linktype, frame)
    if isinstance(found, Skip):
        return found
    ip = parse_ip(frame, found[1], found[0])
    if isinstance(ip, Skip):
        return ip
    if ip.protocol == PROTO_UDP:
        udp = parse_udp(frame, ip.payload_at, ip.payload_end)
        if isinstance(udp, Skip):
            # Counted with the other packets not read: only some UDP ports are (udp_flows).
            return Skip.NON_TCP
        end = min(ip.payload_end, ip.payload_at + udp.length)
        return UdpPacket(
            ts_ns=packet.ts_ns,
            src=ip.src,
            src_port=udp.src_port,
            dst=ip.dst,
            dst_port=udp.dst_port,
            payload=frame[ip.payload_at + UDP_HEADER : end],
            size=udp.length - UDP_HEADER,
            snapped=ip.snapped or ip.payload_at + udp.length > ip.payload_end,
        )
    if ip.protocol != PROTO_TCP:
        return Skip.NON_TCP
    tcp = parse_tcp(frame, ip.payload_at, ip.payload_end)
    if isinstance(tcp, Skip):
        return tcp
    return TcpPacket(
        ts_ns=packet.ts_ns,
        src=ip.src,
        src_port=tcp.src_port,
        dst=ip.dst,
        dst_port=tcp.dst_port,
        seq=tcp.seq,
        ack=tcp.ack,
        flags=tcp.flags,
        window=tcp.window,
        options=tcp.options,
        payload=frame[ip.payload_at + tcp.header_len : ip.payload_end],
        snapped=ip.snapped,
    )
