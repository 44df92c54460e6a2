"""pcapng: sections, interfaces with their own link types and resolutions, block kinds,
unknown blocks, byte orders and damaged files."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_collector.packets import frames
from zerotrace_collector.packets.analysis import PcapAnalysis
from zerotrace_collector.packets.capture_file import read_capture
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET, LINKTYPE_RAW
from zerotrace_collector.packets.tcp import ACK, FIN, PSH, SYN


def block(order: str, kind: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    total = len(body) + 12
    return struct.pack(order + "II", kind, total) + body + struct.pack(order + "I", total)


def option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def shb(order: str) -> bytes:
    body = struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1) + option(order, 4, b"zt test")
    return block(order, 0x0A0D0D0A, body + option(order, 0, b""))


def idb(order: str, linktype: int, tsresol: int | None = None, tsoffset: int = 0) -> bytes:
    body = struct.pack(order + "HHI", linktype, 0, 65535) + option(order, 2, b"eth0")
    if tsresol is not None:
        body += option(order, 9, bytes([tsresol]))
    if tsoffset:
        body += option(order, 14, struct.pack(order + "q", tsoffset))
    return block(order, 1, body + option(order, 0, b""))


def epb(order: str, if_id: int, units: int, data: bytes, orig_len: int | None = None) -> bytes:
    head = struct.pack(
        order + "IIIII",
        if_id,
        units >> 32,
        units & 0xFFFFFFFF,
        len(data),
        len(data) if orig_len is None else orig_len,
    )
    return block(order, 6, head + data)


def spb(order: str, data: bytes) -> bytes:
    return block(order, 3, struct.pack(order + "I", len(data)) + data)


def obsolete_pb(order: str, if_id: int, units: int, data: bytes) -> bytes:
    head = struct.pack(
        order + "HHIIII", if_id, 0, units >> 32, units & 0xFFFFFFFF, len(data), len(data)
    )
    return block(order, 2, head + data)


C, S = "10.1.0.1", "10.1.0.2"


def two_interfaces(order: str) -> bytes:
    """Interface 0: Ethernet, microseconds; interface 1: raw IP, nanoseconds, offset 10 s.
    One connection whose client half was seen on 0 and server half on 1; an unknown block,
    a name-resolution block and a statistics block in between."""

    def eth(
        src: str, sp: int, dst: str, dp: int, seq: int, ack: int, flags: int, payload: bytes = b""
    ) -> bytes:
        return frames.tcp_frame(src, sp, dst, dp, seq, ack, flags, payload, LINKTYPE_ETHERNET)

    def raw(
        src: str, sp: int, dst: str, dp: int, seq: int, ack: int, flags: int, payload: bytes = b""
    ) -> bytes:
        return frames.tcp_frame(src, sp, dst, dp, seq, ack, flags, payload, LINKTYPE_RAW)

    return b"".join(
        [
            shb(order),
            idb(order, LINKTYPE_ETHERNET),
            idb(order, LINKTYPE_RAW, tsresol=9, tsoffset=10),
            epb(order, 0, 1_000_000, eth(C, 5555, S, 80, 100, 0, SYN)),
            block(order, 0x0BADBEEF, b"unknown"),
            epb(order, 1, 1_000_000, raw(S, 80, C, 5555, 7, 101, SYN | ACK)),
            block(order, 4, b"\0" * 4),
            epb(order, 0, 1_000_002, eth(C, 5555, S, 80, 101, 8, ACK | PSH, b"ping")),
            epb(order, 1, 2_000_000, raw(S, 80, C, 5555, 8, 105, ACK | PSH, b"pong")),
            block(order, 5, b"\0" * 12),
            epb(order, 0, 1_000_004, eth(C, 5555, S, 80, 105, 12, ACK | FIN)),
            epb(order, 1, 3_000_000, raw(S, 80, C, 5555, 12, 106, ACK | FIN)),
        ]
    )


@pytest.mark.parametrize("order", ["<", ">"])
def test_two_interfaces_with_different_link_types_and_resolutions(order: str) -> None:
    packets, report = read_capture(two_interfaces(order))
    assert report.problem is None and report.format == "pcapng"
    assert report.packets == 6 and report.skipped_blocks == 3
    assert [p.interface for p in packets] == [0, 1, 0, 1, 0, 1]
    assert [p.linktype for p in packets] == [1, 101, 1, 101, 1, 101]
    assert packets[0].ts_ns == 1_000_000_000  # microseconds
    assert packets[1].ts_ns == 10 * 10**9 + 1_000_000  # nanoseconds, +10 s offset
    analysis = PcapAnalysis("n")
    records = list(analysis.records(two_interfaces(order)))
    payloads = [d["payload"] for name, d in records if name.endswith("SocketData")]
    assert payloads == [b"ping", b"pong"]
    assert [d["kind"] for name, d in records if name.endswith("ConnEvent")] == [
        "CONNECT",
        "CLOSE",
    ]


def test_power_of_two_resolution_simple_and_obsolete_packet_blocks() -> None:
    data = b"".join(
        [
            shb("<"),
            idb("<", LINKTYPE_RAW, tsresol=0x80 | 10),  # 1/1024 s
            obsolete_pb("<", 0, 1024 * 5 + 512, b"\x45" + b"\0" * 19),
            spb("<", b"\x60" + b"\0" * 39),
        ]
    )
    packets, report = read_capture(data)
    assert report.problem is None
    assert packets[0].ts_ns == 5_500_000_000
    assert packets[1].ts_ns == 0 and len(packets[1].data) == 40  # an SPB has no time


def test_a_new_section_starts_a_new_list_of_interfaces() -> None:
    data = b"".join(
        [
            shb("<"),
            idb("<", LINKTYPE_RAW),
            epb("<", 0, 1, b"\x45"),
            shb(">"),
            idb(">", LINKTYPE_ETHERNET),
            epb(">", 0, 2, b"\0" * 14),
            epb(">", 1, 3, b"\0"),  # interface 1 belonged to the first section
        ]
    )
    packets, report = read_capture(data)
    assert [p.linktype for p in packets] == [101, 1]
    assert report.problem is not None and "interface 1" in report.problem


def test_a_truncated_file_yields_the_packets_before_the_cut() -> None:
    data = two_interfaces("<")
    full, _ = read_capture(data)
    boundaries = {0}
    at = 0
    while at < len(data):
        at += struct.unpack_from("<I", data, at + 4)[0]
        boundaries.add(at)
    for cut in range(1, len(data)):
        packets, report = read_capture(data[:cut])
        assert packets == full[: len(packets)], cut
        if cut in boundaries:  # a file cut between blocks is a valid, shorter file
            assert report.problem is None, cut
            continue
        assert report.problem is not None, cut
        assert "\n" not in report.problem
    last = len(data) - max(b for b in boundaries if b < len(data))
    assert read_capture(data[:-3])[1].problem == (
        f"truncated pcapng file: block at byte {len(data) - last} has {last - 3} of {last} bytes"
    )


def test_bad_lengths_and_a_missing_section_header() -> None:
    good = shb("<") + idb("<", LINKTYPE_RAW)
    bad_trailer = good + epb("<", 0, 1, b"\x45")[:-4] + struct.pack("<I", 99)
    assert "bad trailing length" in str(read_capture(bad_trailer)[1].problem)
    odd_length = good + struct.pack("<II", 6, 13) + b"\0" * 5
    assert "claims length 13" in str(read_capture(odd_length)[1].problem)
    no_interface = shb("<") + epb("<", 0, 1, b"\x45")
    assert "0 are described" in str(read_capture(no_interface)[1].problem)
    bad_bom = block("<", 0x0A0D0D0A, struct.pack("<IHHq", 0x11223344, 1, 0, -1))
    assert "byte-order magic" in str(read_capture(bad_bom)[1].problem)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_corrupted_files_never_raise(data: st.DataObject) -> None:
    raw = bytearray(two_interfaces(data.draw(st.sampled_from(["<", ">"]))))
    for _ in range(data.draw(st.integers(0, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    packets, _ = read_capture(bytes(raw[: data.draw(st.integers(0, len(raw)))]))
    assert len(packets) <= 6
    list(PcapAnalysis("n").records(bytes(raw)))  # the whole pipeline takes it too
