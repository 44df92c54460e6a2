"""pcapng (https://datatracker.ietf.org/doc/draft-ietf-opsawg-pcapng/): Section Header,
Interface Description (with if_tsresol and if_tsoffset), Enhanced, Simple and the obsolete
Packet blocks; every other block type is skipped. Each interface keeps its own link type and
timestamp resolution, and a new section starts a new list of interfaces.

Like the classic reader, it never raises on bad input: it stops at the damage, having yielded
the packets before it, and sets `ReadReport.problem`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from zerotrace_collector.packets.captured import ByteSource, CapturedPacket, ReadReport

SHB = 0x0A0D0D0A
IDB = 0x00000001
PB = 0x00000002  # obsolete Packet Block, still written by old tools
SPB = 0x00000003
EPB = 0x00000006
BYTE_ORDER_MAGIC = 0x1A2B3C4D
OPT_ENDOFOPT = 0
OPT_IF_TSRESOL = 9
OPT_IF_TSOFFSET = 14
MIN_BLOCK_LEN = 12  # type, length, trailing length
# As in pcap.MAX_RECORD_LEN: a block claiming more than this is taken as corruption.
MAX_BLOCK_LEN = 16 * 1024 * 1024
DEFAULT_TSRESOL = 6  # microseconds, when an interface has no if_tsresol option


@dataclass(frozen=True, slots=True)
class Interface:
    linktype: int
    snaplen: int
    ts_units_per_s: int  # 10**6 by default
    ts_offset_s: int


def is_pcapng(head: bytes) -> bool:
    return len(head) >= 4 and struct.unpack("<I", head[:4])[0] == SHB


def iter_pcapng(source: ByteSource, report: ReadReport) -> Iterator[CapturedPacket]:
    report.format = "pcapng"
    order: str | None = None
    interfaces: list[Interface] = []
    while True:
        start = source.offset
        head = source.read(8)
        if not head:
            if order is None:
                report.problem = "empty pcapng file"
            return
        if len(head) < 8:
            report.problem = f"truncated pcapng file: block header at byte {start} is cut"
            return
        block_type = struct.unpack("<I", head[:4])[0]
        if block_type == SHB:
            bom = source.peek(4)
            if len(bom) < 4:
                report.problem = f"truncated pcapng file: section header at byte {start} is cut"
                return
            if struct.unpack("<I", bom)[0] == BYTE_ORDER_MAGIC:
                order = "<"
            elif struct.unpack(">I", bom)[0] == BYTE_ORDER_MAGIC:
                order = ">"
            else:
                report.problem = f"corrupt pcapng file: bad byte-order magic at byte {start}"
                return
            interfaces = []
        elif order is None:
            report.problem = "not a pcapng file: it does not start with a section header block"
            return
        block_type, total_len = struct.unpack(order + "II", head)
        if total_len < MIN_BLOCK_LEN or total_len % 4 or total_len > MAX_BLOCK_LEN:
            report.problem = f"corrupt pcapng file: block at byte {start} claims length {total_len}"
            return
        rest = source.read(total_len - 8)
        if len(rest) < total_len - 8:
            report.problem = (
                f"truncated pcapng file: block at byte {start} has {len(rest) + 8} of "
                f"{total_len} bytes"
            )
            return
        body, trailer = rest[:-4], rest[-4:]
        if struct.unpack(order + "I", trailer)[0] != total_len:
            report.problem = f"corrupt pcapng file: block at byte {start} has a bad trailing length"
            return
        try:
            if block_type == SHB:
                continue
            if block_type == IDB:
                interfaces.append(_interface(order, body))
                continue
            packet = _packet(order, block_type, body, interfaces)
        except (struct.error, IndexError, ValueError) as exc:
            report.problem = f"corrupt pcapng file: block at byte {start}: {exc}"
            return
        if packet is None:
            report.skipped_blocks += 1
            continue
        report.packets += 1
        yield packet


def _interface(order: str, body: bytes) -> Interface:
    linktype, _reserved, snaplen = struct.unpack(order + "HHI", body[:8])
    resol = DEFAULT_TSRESOL
    offset_s = 0
    for code, value in _options(order, body[8:]):
        if code == OPT_IF_TSRESOL and value:
            resol = value[0]
        elif code == OPT_IF_TSOFFSET and len(value) == 8:
            offset_s = struct.unpack(order + "q", value)[0]
    # if_tsresol: the high bit says a power of 2, otherwise a power of 10.
    units = 2 ** (resol & 0x7F) if resol & 0x80 else 10**resol
    return Interface(linktype, snaplen, units, offset_s)


def _options(order: str, data: bytes) -> Iterator[tuple[int, bytes]]:
    pos = 0
    while pos + 4 <= len(data):
        code, length = struct.unpack(order + "HH", data[pos : pos + 4])
        if code == OPT_ENDOFOPT:
            return
        yield code, data[pos + 4 : pos + 4 + length]
        pos += 4 + length + (-length % 4)


def _packet(
    order: str, block_type: int, body: bytes, interfaces: list[Interface]
) -> CapturedPacket | None:
    if block_type == EPB:
        if_id, ts_hi, ts_lo, cap_len, orig_len = struct.unpack(order + "IIIII", body[:20])
        data_at = 20
    elif block_type == PB:
        if_id, _drops, ts_hi, ts_lo, cap_len, orig_len = struct.unpack(order + "HHIIII", body[:20])
        data_at = 20
    elif block_type == SPB:
        if_id, ts_hi, ts_lo = 0, 0, 0  # a Simple Packet Block has no timestamp
        (orig_len,) = struct.unpack(order + "I", body[:4])
        data_at = 4
        snaplen = _iface(interfaces, 0).snaplen or orig_len
        cap_len = min(orig_len, snaplen, len(body) - 4)
    else:
        return None
    iface = _iface(interfaces, if_id)
    if data_at + cap_len > len(body):
        raise ValueError(f"captured length {cap_len} runs past the block")
    units = (ts_hi << 32) | ts_lo
    ts_ns = units * 1_000_000_000 // iface.ts_units_per_s + iface.ts_offset_s * 1_000_000_000
    return CapturedPacket(
        ts_ns=ts_ns,
        linktype=iface.linktype,
        data=body[data_at : data_at + cap_len],
        orig_len=max(orig_len, cap_len),
        interface=if_id,
    )


def _iface(interfaces: list[Interface], if_id: int) -> Interface:
    if if_id >= len(interfaces):
        raise ValueError(f"packet for interface {if_id}, but {len(interfaces)} are described")
    return interfaces[if_id]
