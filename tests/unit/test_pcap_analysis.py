"""A capture file -> raw records, end to end, with counters and damaged input."""

from __future__ import annotations

import random
from pathlib import Path

from zerotrace.codec import AvroCodec
from zerotrace_collector.packets import frames
from zerotrace_collector.packets.analysis import PcapAnalysis, records_from_pcap
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL2
from zerotrace_collector.packets.pcap import pcap_bytes
from zerotrace_collector.packets.tcp import ACK, FIN, PSH, SYN

C, S = "192.168.1.10", "192.168.1.20"
CP, SP = 45678, 8000
REQUESTS = [f"request {i} ".encode() * (i + 1) for i in range(7)]
RESPONSES = [f"response {i} ".encode() * (3 * i + 1) for i in range(7)]


def conversation(linktype: int = LINKTYPE_ETHERNET, start_ns: int = 10**18) -> list[CapturedPacket]:
    """A handshake, request/response pairs (requests in two segments), FINs; plus an ARP
    frame and a UDP datagram on the side."""
    out: list[tuple[str, int, str, int, int, int, int, bytes]] = [
        (C, CP, S, SP, 1000, 0, SYN, b""),
        (S, SP, C, CP, 5000, 1001, SYN | ACK, b""),
        (C, CP, S, SP, 1001, 5001, ACK, b""),
    ]
    cseq, sseq = 1001, 5001
    for req, resp in zip(REQUESTS, RESPONSES, strict=True):
        half = len(req) // 2
        out.append((C, CP, S, SP, cseq, sseq, ACK | PSH, req[:half]))
        out.append((C, CP, S, SP, cseq + half, sseq, ACK | PSH, req[half:]))
        cseq += len(req)
        out.append((S, SP, C, CP, sseq, cseq, ACK | PSH, resp))
        sseq += len(resp)
        out.append((C, CP, S, SP, cseq, sseq, ACK, b""))
    out.append((C, CP, S, SP, cseq, sseq, ACK | FIN, b""))
    out.append((S, SP, C, CP, sseq, cseq + 1, ACK | FIN, b""))
    out.append((C, CP, S, SP, cseq + 1, sseq + 1, ACK, b""))
    packets = [
        CapturedPacket(start_ns + i * 1000, linktype, frames.tcp_frame(*f, linktype=linktype), 0)
        for i, f in enumerate(out)
    ]
    if linktype == LINKTYPE_ETHERNET:
        arp = frames.ethernet(b"\0" * 28, 0x0806)
        udp = frames.ethernet(frames.ipv4(C, S, b"\0" * 8, protocol=17), 0x0800)
        packets.insert(5, CapturedPacket(start_ns + 4500, linktype, arp, len(arp)))
        packets.insert(9, CapturedPacket(start_ns + 7500, linktype, udp, len(udp)))
    return packets


def streams(records: list[tuple[str, dict[str, object]]]) -> dict[str, bytes]:
    out = {"EGRESS": b"", "INGRESS": b""}
    for name, record in records:
        if name == "zerotrace.raw.SocketData":
            out[str(record["direction"])] += record["payload"]  # type: ignore[operator]
    return out


def test_a_capture_becomes_records_in_time_order(codec: AvroCodec) -> None:
    analysis = PcapAnalysis("node-a")
    records = list(analysis.records(pcap_bytes(conversation(), LINKTYPE_ETHERNET)))
    got = streams(records)
    assert got["EGRESS"] == b"".join(REQUESTS) and got["INGRESS"] == b"".join(RESPONSES)
    times = [r.get("start_ns", r.get("ts_ns")) for _, r in records]
    assert times == sorted(times)  # type: ignore[type-var]
    kinds = [r["kind"] for n, r in records if n == "zerotrace.raw.ConnEvent"]
    assert kinds == ["CONNECT", "CLOSE"]
    assert len({r["conn_id"] for _, r in records}) == 1
    assert len({r["event_id"] for _, r in records}) == len(records)
    for name, record in records:
        codec.encode(name, record)
    c = analysis.summary()
    assert (c["packets"], c["tcp"], c["non_ip"], c["non_tcp"]) == (36, 34, 1, 1)
    assert (c["flows"], c["gaps"], c["retransmissions"], c["problem"]) == (1, 0, 0, None)
    assert c["bytes"] == len(b"".join(REQUESTS + RESPONSES)) and c["records"] == len(records)


def test_replays_give_the_same_records() -> None:
    data = pcap_bytes(conversation(), LINKTYPE_ETHERNET)
    assert list(records_from_pcap(data, "n")) == list(records_from_pcap(data, "n"))


def test_reordered_and_duplicated_packets_give_the_same_bytes() -> None:
    packets = conversation(LINKTYPE_LINUX_SLL2)
    rng = random.Random(7)
    for _ in range(60):
        shuffled = list(packets)
        for dup in rng.sample(packets, 8):  # duplicates, each a few packets after the original
            shuffled.insert(shuffled.index(dup) + rng.randint(1, 4), dup)
        size = rng.randint(2, 8)
        for i in range(rng.randint(0, size), len(shuffled), size):  # reorder within windows
            window = shuffled[i : i + size]
            rng.shuffle(window)
            shuffled[i : i + size] = window
        analysis = PcapAnalysis("n")
        got = streams(list(analysis.records(pcap_bytes(shuffled, LINKTYPE_LINUX_SLL2))))
        assert got == {"EGRESS": b"".join(REQUESTS), "INGRESS": b"".join(RESPONSES)}
        assert analysis.reassembler.counters.gaps == 0


def test_a_truncated_file_gives_the_records_before_the_cut_and_a_reason(tmp_path: Path) -> None:
    data = pcap_bytes(conversation(), LINKTYPE_ETHERNET)
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[: len(data) // 2])
    analysis = PcapAnalysis("n")
    records = list(analysis.records(path))
    got = streams(records)
    assert got["EGRESS"] and b"".join(REQUESTS).startswith(got["EGRESS"])
    assert records[-1][1]["kind"] == "CLOSE"  # closed at the end of input
    assert analysis.read.problem is not None
    assert analysis.read.problem.startswith("truncated pcap file")


def test_malformed_and_fragmented_packets_are_counted() -> None:
    good = conversation()[:3]
    frag = frames.ethernet(frames.ipv4(C, S, b"\0" * 20, flags_frag=0x2000), 0x0800)
    cut = good[2].data[:30]
    extra = [CapturedPacket(2 * 10**18, 1, d, len(d)) for d in (frag, cut)]
    analysis = PcapAnalysis("n")
    list(analysis.records(pcap_bytes(good + extra, LINKTYPE_ETHERNET)))
    assert (analysis.counters.fragments, analysis.counters.malformed) == (1, 1)


def test_feed_and_finish_serve_a_live_source() -> None:
    analysis = PcapAnalysis("n")
    out = []
    for packet in conversation():
        out += analysis.feed(packet)
    out += analysis.finish()
    assert streams(out)["INGRESS"] == b"".join(RESPONSES)
