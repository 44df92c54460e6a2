"""TCP header with its options (pure)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from zerotrace_collector.packets.skip import Skip

FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10
URG = 0x20
ECE = 0x40
CWR = 0x80
MIN_HEADER = 20
OPT_EOL = 0
OPT_NOP = 1
OPT_MSS = 2
OPT_WSCALE = 3
OPT_SACK_PERMITTED = 4
OPT_SACK = 5
OPT_TIMESTAMP = 8


@dataclass(frozen=True, slots=True)
class TcpHeader:
    src_port: int
    dst_port: int
    seq: int
    ack: int
    flags: int
    window: int
    header_len: int
    options: tuple[tuple[int, bytes], ...]  # (kind, value) in order; NOP and EOL left out


def parse_tcp(frame: bytes, pos: int, end: int) -> TcpHeader | Skip:
    """The TCP header at frame[pos:end]; MALFORMED when it is cut or its options are broken."""
    if end - pos < MIN_HEADER:
        return Skip.MALFORMED
    src_port, dst_port, seq, ack, off_flags, window = struct.unpack_from("!HHIIHH", frame, pos)
    header_len = (off_flags >> 12) * 4
    if header_len < MIN_HEADER or pos + header_len > end:
        return Skip.MALFORMED
    options = parse_options(frame[pos + MIN_HEADER : pos + header_len])
    if options is None:
        return Skip.MALFORMED
    return TcpHeader(src_port, dst_port, seq, ack, off_flags & 0xFF, window, header_len, options)


def parse_options(data: bytes) -> tuple[tuple[int, bytes], ...] | None:
    """None when an option's length runs past the header or is below 2."""
    options = []
    pos = 0
    while pos < len(data):
        kind = data[pos]
        if kind == OPT_EOL:
            break
        if kind == OPT_NOP:
            pos += 1
            continue
        if pos + 2 > len(data):
            return None
        length = data[pos + 1]
        if length < 2 or pos + length > len(data):
            return None
        options.append((kind, data[pos + 2 : pos + length]))
        pos += length
    return tuple(options)
