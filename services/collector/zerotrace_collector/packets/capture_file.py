"""Read a capture file of either format: the format is sniffed from its first bytes."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO

from zerotrace_collector.packets.captured import ByteSource, CapturedPacket, ReadReport
from zerotrace_collector.packets.pcap import iter_pcap, pcap_magic_order
from zerotrace_collector.packets.pcapng import is_pcapng, iter_pcapng


def iter_capture(stream: BinaryIO, report: ReadReport) -> Iterator[CapturedPacket]:
    """Packets of a classic pcap or pcapng stream, in file order. Never raises on bad
    input: see `ReadReport.problem`. The caller owns (opens and closes) the stream."""
    source = ByteSource(stream)
    head = source.peek(4)
    if is_pcapng(head):
        yield from iter_pcapng(source, report)
    elif pcap_magic_order(head) is not None:
        yield from iter_pcap(source, report)
    elif not head:
        report.problem = "the capture file is empty"
    else:
        report.problem = f"not a pcap or pcapng file (starts {head.hex()})"


def read_capture(data: bytes) -> tuple[list[CapturedPacket], ReadReport]:
    report = ReadReport()
    packets = list(iter_capture(io.BytesIO(data), report))
    return packets, report
