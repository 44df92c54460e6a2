"""UDP header (pure)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from zerotrace_collector.packets.skip import Skip

HEADER = 8


@dataclass(frozen=True, slots=True)
class UdpHeader:
    src_port: int
    dst_port: int
    length: int  # header and payload, as the header says


def parse_udp(frame: bytes, pos: int, end: int) -> UdpHeader | Skip:
    """The UDP header at frame[pos:end]; MALFORMED when it is cut or its length is below 8.
    A length past `end` is kept: the capture may have cut the datagram (snap length)."""
    if end - pos < HEADER:
        return Skip.MALFORMED
    src_port, dst_port, length = struct.unpack_from("!HHH", frame, pos)
    if length < HEADER:
        return Skip.MALFORMED
    return UdpHeader(src_port, dst_port, length)
