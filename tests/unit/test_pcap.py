"""Classic pcap: both byte orders, micro- and nanoseconds, writing, and damaged files."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_collector.packets.capture_file import read_capture
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.pcap import (
    MAGIC_NS,
    MAGIC_US,
    PcapWriter,
    pcap_bytes,
)


def classic(order: str, magic: int, linktype: int, records: list[tuple[int, int, bytes]]) -> bytes:
    """A hand-built pcap: records are (seconds, fraction, data)."""
    out = struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 65535, linktype)
    for sec, frac, data in records:
        out += struct.pack(order + "IIII", sec, frac, len(data), len(data) + 10) + data
    return out


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize(("magic", "ns_per_unit"), [(MAGIC_US, 1000), (MAGIC_NS, 1)])
def test_both_byte_orders_and_resolutions(order: str, magic: int, ns_per_unit: int) -> None:
    data = classic(order, magic, 1, [(1_700_000_000, 123_456, b"abc"), (1_700_000_001, 7, b"")])
    packets, report = read_capture(data)
    assert report.problem is None and report.packets == 2
    assert report.format == ("pcap-ns" if magic == MAGIC_NS else "pcap")
    assert [p.ts_ns for p in packets] == [
        1_700_000_000 * 10**9 + 123_456 * ns_per_unit,
        1_700_000_001 * 10**9 + 7 * ns_per_unit,
    ]
    assert [(p.data, p.orig_len, p.linktype) for p in packets] == [(b"abc", 13, 1), (b"", 10, 1)]


def test_fcs_bits_in_the_link_type_field_are_ignored() -> None:
    packets, _ = read_capture(classic("<", MAGIC_US, (1 << 28) | 113, [(1, 0, b"x")]))
    assert packets[0].linktype == 113


packets_strategy = st.lists(
    st.builds(
        CapturedPacket,
        ts_ns=st.integers(0, 2**32 * 10**9 - 1),
        linktype=st.just(1),
        data=st.binary(max_size=300),
        orig_len=st.integers(0, 70000),
    ),
    max_size=20,
)


@settings(max_examples=100, deadline=None)
@given(packets=packets_strategy)
def test_written_files_read_back_exactly(packets: list[CapturedPacket]) -> None:
    data = pcap_bytes(packets, 1)
    stream = io.BytesIO()
    writer = PcapWriter(stream, 1)
    for p in packets:
        writer.write(p)
    assert stream.getvalue() == data and writer.packets == len(packets)
    read, report = read_capture(data)
    assert report.problem is None and report.format == "pcap-ns"
    assert read == [
        CapturedPacket(p.ts_ns, 1, p.data, max(p.orig_len, len(p.data))) for p in packets
    ]


def test_a_truncated_file_yields_the_packets_before_the_cut_and_one_reason() -> None:
    packets = [CapturedPacket(i * 1000, 1, bytes([i]) * (i + 5), i + 5) for i in range(6)]
    data = pcap_bytes(packets, 1)
    ends = [24]
    for p in packets:
        ends.append(ends[-1] + 16 + len(p.data))
    for cut in range(len(data)):
        read, report = read_capture(data[:cut])
        whole = sum(1 for end in ends[1:] if end <= cut)
        assert read == packets[:whole], cut
        if cut in ends:  # a file cut between records is a valid, shorter file
            assert report.problem is None, cut
            continue
        assert report.problem is not None, cut
        assert "\n" not in report.problem
        if cut >= 24:
            assert report.problem.startswith("truncated pcap file: packet"), report.problem
    assert read_capture(data)[1].problem is None


@settings(max_examples=300, deadline=None)
@given(packets=packets_strategy, data=st.data())
def test_corrupted_files_never_raise(packets: list[CapturedPacket], data: st.DataObject) -> None:
    raw = bytearray(pcap_bytes(packets, 1))
    for _ in range(data.draw(st.integers(0, 5))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    read, _ = read_capture(bytes(raw[: data.draw(st.integers(0, len(raw)))]))
    assert len(read) <= len(packets)


def test_an_absurd_record_length_is_corruption() -> None:
    data = pcap_bytes([CapturedPacket(0, 1, b"ok", 2)], 1)
    data += struct.pack("<IIII", 0, 0, 1 << 30, 1 << 30)
    read, report = read_capture(data)
    assert len(read) == 1
    assert report.problem is not None and "corrupt pcap file" in report.problem


def test_not_a_capture_and_empty() -> None:
    assert read_capture(b"")[1].problem == "the capture file is empty"
    problem = read_capture(b"GIF89a....")[1].problem
    assert problem is not None and "not a pcap or pcapng file" in problem


def test_the_writer_holds_one_link_type() -> None:
    writer = PcapWriter(io.BytesIO(), 1)
    with pytest.raises(ValueError, match="one link type"):
        writer.write(CapturedPacket(0, 113, b"", 0))
