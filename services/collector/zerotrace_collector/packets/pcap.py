"""Classic pcap (https://datatracker.ietf.org/doc/draft-ietf-opsawg-pcap/): read both byte
orders with micro- or nanosecond timestamps; write little-endian with nanoseconds.

Reading never raises on bad input: a truncated or corrupt file yields the packets before the
damage and sets `ReadReport.problem` to one line saying where and why.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from zerotrace_collector.packets.captured import ByteSource, CapturedPacket, ReadReport

MAGIC_US = 0xA1B2C3D4
MAGIC_NS = 0xA1B23C4D
FILE_HEADER_LEN = 24
RECORD_HEADER_LEN = 16
# The largest packet libpcap writes is 262144 bytes; loopback GSO frames stay under 64 KiB
# (BIG TCP: a few hundred KiB). A record claiming more than this means the file is corrupt.
MAX_RECORD_LEN = 16 * 1024 * 1024
DEFAULT_SNAPLEN = 262144
# The link type is the low 16 bits of the header field; the high bits may carry FCS info.
_LINKTYPE_MASK = 0xFFFF


def pcap_magic_order(head: bytes) -> tuple[str, bool] | None:
    """(struct byte order, nanosecond timestamps) for a classic pcap file header, else None."""
    if len(head) < 4:
        return None
    for order in ("<", ">"):
        (magic,) = struct.unpack(order + "I", head[:4])
        if magic in (MAGIC_US, MAGIC_NS):
            return order, magic == MAGIC_NS
    return None


def iter_pcap(source: ByteSource, report: ReadReport) -> Iterator[CapturedPacket]:
    header = source.read(FILE_HEADER_LEN)
    sniffed = pcap_magic_order(header)
    if sniffed is None:
        report.problem = f"not a pcap file (starts {header[:4].hex() or 'empty'})"
        return
    order, nanos = sniffed
    report.format = "pcap-ns" if nanos else "pcap"
    if len(header) < FILE_HEADER_LEN:
        report.problem = f"truncated pcap file header ({len(header)} of {FILE_HEADER_LEN} bytes)"
        return
    linktype = struct.unpack(order + "I", header[20:24])[0] & _LINKTYPE_MASK
    frac_to_ns = 1 if nanos else 1000
    record = struct.Struct(order + "IIII")
    while True:
        head = source.read(RECORD_HEADER_LEN)
        if not head:
            return
        where = f"packet {report.packets + 1} at byte {source.offset - len(head)}"
        if len(head) < RECORD_HEADER_LEN:
            report.problem = (
                f"truncated pcap file: {where} has {len(head)} of "
                f"{RECORD_HEADER_LEN} record-header bytes"
            )
            return
        sec, frac, incl_len, orig_len = record.unpack(head)
        if incl_len > MAX_RECORD_LEN:
            report.problem = f"corrupt pcap file: {where} claims {incl_len} captured bytes"
            return
        data = source.read(incl_len)
        if len(data) < incl_len:
            report.problem = (
                f"truncated pcap file: {where} has {len(data)} of {incl_len} captured bytes"
            )
            return
        report.packets += 1
        yield CapturedPacket(
            ts_ns=sec * 1_000_000_000 + frac * frac_to_ns,
            linktype=linktype,
            data=data,
            orig_len=max(orig_len, incl_len),
        )


def pcap_file_header(linktype: int, snaplen: int = DEFAULT_SNAPLEN) -> bytes:
    """A little-endian, nanosecond-resolution pcap file header (version 2.4)."""
    return struct.pack("<IHHiIII", MAGIC_NS, 2, 4, 0, 0, snaplen, linktype)


def pcap_record(packet: CapturedPacket) -> bytes:
    sec, nsec = divmod(packet.ts_ns, 1_000_000_000)
    head = struct.pack("<IIII", sec, nsec, len(packet.data), max(packet.orig_len, len(packet.data)))
    return head + packet.data


def pcap_bytes(
    packets: Iterable[CapturedPacket], linktype: int, snaplen: int = DEFAULT_SNAPLEN
) -> bytes:
    out = [pcap_file_header(linktype, snaplen)]
    for packet in packets:
        _check_linktype(packet, linktype)
        out.append(pcap_record(packet))
    return b"".join(out)


class PcapWriter:
    """Writes packets of one link type to a file object (classic pcap holds one link type).
    The caller owns the stream: it opens, flushes and closes it."""

    def __init__(self, stream: BinaryIO, linktype: int, snaplen: int = DEFAULT_SNAPLEN) -> None:
        self._stream = stream
        self.linktype = linktype
        self.packets = 0
        stream.write(pcap_file_header(linktype, snaplen))

    def write(self, packet: CapturedPacket) -> None:
        """Raises ValueError for a packet of another link type (a caller bug)."""
        _check_linktype(packet, self.linktype)
        self._stream.write(pcap_record(packet))
        self.packets += 1


def _check_linktype(packet: CapturedPacket, linktype: int) -> None:
    if packet.linktype != linktype:
        raise ValueError(
            f"a classic pcap file holds one link type ({linktype}); "
            f"got a packet of link type {packet.linktype}"
        )
