"""packets/roce_flows.py, the acceptance for RoCEv2 flows: captures generated with scapy's
RoCE layers, with known drops, reorders, duplicates and delays, give per queue pair exact
loss, reorder and retransmission counts, request-to-ACK latencies, NAKs by syndrome and
CNPs; through the whole packet path (pcap bytes, PcapAnalysis) and on the analyser alone."""

from __future__ import annotations

import pytest

from tests.unit.roce_capture import (
    ACK,
    NAK_ACCESS,
    NAK_SEQ,
    RNR_NAK,
    US,
    cnp_frame,
    frame,
)
from zerotrace.codec import AvroCodec
from zerotrace_collector.packets import frames
from zerotrace_collector.packets.analysis import PcapAnalysis
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.decode import UdpPacket, decode_packet
from zerotrace_collector.packets.ip import PROTO_UDP
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET, LINKTYPE_RAW
from zerotrace_collector.packets.pcap import pcap_bytes
from zerotrace_collector.packets.roce import (
    ACKNOWLEDGE,
    READ_REQUEST,
    READ_RESPONSE_FIRST,
    READ_RESPONSE_LAST,
    READ_RESPONSE_MIDDLE,
    SEND_ONLY,
    UC,
    UD,
    WRITE_ONLY,
)
from zerotrace_collector.packets.roce_flows import QpFigures, QpKey, RoceFlows
from zerotrace_collector.rdma.port_rates import NS_PER_S
from zerotrace_collector.rdma.rdma_records import RDMA_COUNTERS, flow_record

pytestmark = pytest.mark.unit

A, B = "10.0.0.1", "10.0.0.2"
QA, QB = 0x000101, 0x000202
T = 1_000_000.0  # capture start, microseconds


def write(ts: float, i: int, base: int, ack_req: bool = False) -> CapturedPacket:
    psn = base + i
    return frame(
        T + ts, A, B, WRITE_ONLY, QB, psn, ack_req=ack_req, reth_length=1024, payload=bytes(1024)
    )


def ack(ts: float, psn: int, dest_qp: int = QA, syndrome: int = ACK) -> CapturedPacket:
    return frame(T + ts, B, A, ACKNOWLEDGE, dest_qp, psn, syndrome=syndrome)


def pick(counters: dict[str, int], names: str) -> tuple[int, ...]:
    return tuple(counters[name] for name in names.split())


def analyse(packets: list[CapturedPacket]) -> tuple[PcapAnalysis, dict[QpKey, QpFigures]]:
    analysis = PcapAnalysis("node-r")
    records = list(analysis.records(pcap_bytes(packets, LINKTYPE_ETHERNET)))
    assert records == []  # RoCE is no socket's bytes: figures only
    return analysis, {f.key: f for f in analysis.roce_figures}


def test_drops_reorders_duplicates_and_delays_of_one_queue_pair(codec: AvroCodec) -> None:
    # 16 RDMA WRITEs of 1 KiB from A to B's QP, PSNs from 0xFFFFF8 (they wrap to 0 at the
    # 9th); AckReq on every 4th, answered after 5, 7, (9) and 11 us. Write 5 is dropped before
    # the capture point and never sent again, write 9 is overtaken by write 10, write 11 is
    # sent twice before its ACK (so that ACK times no request).
    p = 0xFFFFF8
    capture = [
        write(0, 0, p),
        write(10, 1, p),
        write(20, 2, p),
        write(30, 3, p, ack_req=True),
        ack(35, p + 3),
        write(40, 4, p),
        write(60, 6, p),
        write(70, 7, p, ack_req=True),
        ack(77, p + 7),
        write(80, 8, p),
        write(100, 10, p),
        write(101, 9, p),
        write(110, 11, p, ack_req=True),
        write(112, 11, p, ack_req=True),
        ack(119, (p + 11) % (1 << 24)),
        write(120, 12, p),
        write(130, 13, p),
        write(140, 14, p),
        write(150, 15, p, ack_req=True),
        ack(161, (p + 15) % (1 << 24)),
    ]
    analysis, flows = analyse(capture)
    writes = flows[QpKey(A, B, QB)]
    c = writes.counters
    assert (writes.transport, writes.src_qp, writes.first_ns, writes.last_ns) == (
        "RC",
        QA,
        round(T * US),
        round((T + 150) * US),
    )
    assert pick(c, "packets requests bytes payload_bytes") == (16, 16, 16 * 1056, 16 * 1024)
    assert (c["psn_gaps"], c["gap_psns"], c["lost"], c["reordered"]) == (2, 2, 1, 1)
    assert (c["recovered"], c["retransmitted"], c["restarts"], c["missing"]) == (0, 1, 0, 0)
    assert writes.latencies_ns == (5 * US, 7 * US, 11 * US)
    assert (c["latency_count"], c["latency_sum_ns"]) == (3, 23 * US)
    assert pick(c, "latency_min_ns latency_max_ns latency_ambiguous") == (5 * US, 11 * US, 1)
    assert c["unanswered"] == 0

    acks = flows[QpKey(B, A, QA)]
    assert (acks.src_qp, acks.counters["acks"], acks.counters["responses"]) == (QB, 4, 4)
    assert acks.counters["naks"] == acks.counters["requests"] == 0
    summary = analysis.summary()
    assert (summary["roce_packets"], summary["roce_flows"], summary["roce_malformed"]) == (20, 2, 0)
    assert summary["roce_unpaired_responses"] == 0

    record = flow_record("node-r", writes)
    assert record["rates"]["packets"] == 16 * NS_PER_S / (150 * US)
    assert record["rates"]["bytes"] == 16 * 1056 * NS_PER_S / (150 * US)
    assert record["rates"]["lost"] == NS_PER_S / (150 * US)
    assert record["interval_ns"] == 150 * US and record["counters"]["lost"] == 1
    assert record["flow"] == {
        "src_addr": A,
        "dst_addr": B,
        "dest_qp": QB,
        "src_qp": QA,
        "transport": "RC",
    }
    assert codec.decode(codec.encode(RDMA_COUNTERS, record)) == (RDMA_COUNTERS, record)
    assert flow_record("node-r", acks)["rates"]["packets"] == 4 * NS_PER_S / (126 * US)


def send(ts: float, psn: int, ack_req: bool = False) -> CapturedPacket:
    return frame(T + ts, A, B, SEND_ONLY, QB, psn, ack_req=ack_req, payload=bytes(256))


def test_a_loss_before_the_capture_point_repaired_by_go_back_n() -> None:
    # Seen at the responder: send 4 never arrives, B NAKs (sequence error, PSN 1004), A goes
    # back and sends 4, 5, 6 again, then 7 to 9.
    q = 1000
    capture = [send(10 * i, q + i) for i in (0, 1, 2, 3, 5)]
    capture += [ack(52, q + 4, syndrome=NAK_SEQ), send(60, q + 6)]
    capture += [send(70 + 10 * k, q + i) for k, i in enumerate((4, 5, 6, 7, 8))]
    capture += [send(120, q + 9, ack_req=True), ack(125, q + 9)]
    _, flows = analyse(capture)
    c = flows[QpKey(A, B, QB)].counters
    assert (c["psn_gaps"], c["gap_psns"], c["recovered"], c["retransmitted"]) == (1, 1, 1, 2)
    assert (c["lost"], c["reordered"], c["latency_count"], c["latency_sum_ns"]) == (0, 0, 1, 5 * US)
    answers = flows[QpKey(B, A, QA)].counters
    assert (answers["naks"], answers["nak_psn_sequence_error"], answers["acks"]) == (1, 1, 1)


def test_a_loss_after_the_capture_point_shows_as_retransmissions() -> None:
    # Seen at the requester: every send went out; 4 was lost on the way, so after the NAK
    # 4, 5 and 6 are sent again.
    q = 2000
    capture = [send(10 * i, q + i) for i in range(7)]
    capture += [ack(65, q + 4, syndrome=NAK_SEQ)]
    capture += [send(70 + 10 * k, q + i, ack_req=i == 9) for k, i in enumerate((4, 5, 6, 7, 8, 9))]
    _, flows = analyse(capture)
    c = flows[QpKey(A, B, QB)].counters
    assert (c["psn_gaps"], c["lost"], c["recovered"], c["retransmitted"]) == (0, 0, 0, 3)
    assert c["unanswered"] == 1  # the last send's ACK is not in the capture


A6, B6 = "fd00::1", "fd00::2"


def test_two_queue_pairs_between_the_same_hosts_rnr_naks_and_cnps() -> None:
    qa1, qb1, qa2, qb2 = 0x11, 0x21, 0x12, 0x22

    def req(ts: float, qp: int, psn: int) -> CapturedPacket:
        return frame(T + ts, A6, B6, SEND_ONLY, qp, psn, ack_req=True, payload=bytes(64))

    def answer(ts: float, qp: int, psn: int, syndrome: int = ACK) -> CapturedPacket:
        return frame(T + ts, B6, A6, ACKNOWLEDGE, qp, psn, syndrome=syndrome)

    capture = [
        req(0, qb1, 5000),
        req(1, qb2, 900_000),
        answer(3, qa2, 900_000),  # pairs B->qa2 with A->qb2: only qb2 has sent 900000
        answer(4, qa1, 5000),
        req(10, qb1, 5001),
        answer(12, qa1, 5001, RNR_NAK),  # B had no receive posted
        req(20, qb1, 5001),  # sent again after the RNR timer: its ACK times nothing
        answer(25, qa1, 5001),
        cnp_frame(T + 30, B6, A6, qa1),
        cnp_frame(T + 31, B6, A6, qa1),
        cnp_frame(T + 32, B6, A6, qa1),
        req(40, qb2, 900_001),
        answer(41, qa2, 900_001, NAK_ACCESS),
    ]
    _, flows = analyse(capture)
    first, second = flows[QpKey(A6, B6, qb1)], flows[QpKey(A6, B6, qb2)]
    assert (first.src_qp, first.latencies_ns) == (qa1, (4 * US,))
    assert first.counters["latency_ambiguous"] == 1
    assert (first.counters["retransmitted"], first.counters["unanswered"]) == (1, 0)
    assert (second.src_qp, second.latencies_ns) == (qa2, (2 * US,))
    assert second.counters["unanswered"] == 1
    back1, back2 = flows[QpKey(B6, A6, qa1)], flows[QpKey(B6, A6, qa2)]
    assert (back1.src_qp, back1.counters["acks"], back1.counters["cnps"]) == (qb1, 2, 3)
    assert (back1.counters["naks"], back1.counters["rnr_nak"]) == (1, 1)
    assert (back2.counters["naks"], back2.counters["nak_remote_access_error"]) == (1, 1)
    assert back1.counters["packets"] == 6 and back1.transport == "RC"


def udp_packet(captured: CapturedPacket) -> UdpPacket:
    decoded = decode_packet(captured)
    assert isinstance(decoded, UdpPacket)
    return decoded


def test_an_ack_two_flows_could_answer_waits_for_one_only_one_could() -> None:
    flows = RoceFlows()
    for packet in [
        send(0, 10, ack_req=True),
        frame(T + 1, A, B, SEND_ONLY, 0x999, 10, ack_req=True),
        ack(2, 10),  # both A->B flows have sent PSN 10: not paired, not timed
        send(3, 11, ack_req=True),
        ack(5, 11),  # only QB's flow has sent 11: paired; 10 and 11 answered
    ]:
        flows.feed(udp_packet(packet))
    assert flows.counters.roce_unpaired_responses == 1
    got = {f.key: f for f in flows.finish()}
    assert got[QpKey(A, B, QB)].latencies_ns == (5 * US, 2 * US)
    assert got[QpKey(A, B, 0x999)].counters["unanswered"] == 1


def test_reads_take_one_psn_per_response_packet() -> None:
    r = 70_000

    def read(ts: float, psn: int, length: int) -> CapturedPacket:
        return frame(T + ts, A, B, READ_REQUEST, QB, psn, reth_length=length)

    def response(ts: float, op: int, psn: int, size: int) -> CapturedPacket:
        syndrome = None if op == READ_RESPONSE_MIDDLE else ACK
        return frame(T + ts, B, A, op, QA, psn, syndrome=syndrome, payload=bytes(size))

    flows = RoceFlows()
    for packet in [
        read(0, r, 8192),  # the MTU is not known yet: 2 to 32 PSNs
        response(5, READ_RESPONSE_FIRST, r, 4096),  # a full packet: the MTU is 4096
        response(6, READ_RESPONSE_LAST, r + 1, 4096),
        send(10, r + 2, ack_req=True),  # so the read took 2
        ack(12, r + 2),
        read(20, r + 3, 10_000),  # 3 packets of 4096
        response(25, READ_RESPONSE_FIRST, r + 3, 4096),
        response(26, READ_RESPONSE_MIDDLE, r + 4, 4096),
        response(27, READ_RESPONSE_LAST, r + 5, 1808),
        send(30, r + 8, ack_req=True),  # r+6 and r+7 never seen
        ack(35, r + 8),
    ]:
        flows.feed(udp_packet(packet))
    got = {f.key: f for f in flows.finish()}
    reads = got[QpKey(A, B, QB)]
    assert reads.mtu == got[QpKey(B, A, QA)].mtu == 4096
    assert reads.latencies_ns == (5 * US, 2 * US, 5 * US, 5 * US)
    assert pick(reads.counters, "psn_gaps gap_psns lost") == (1, 2, 2)
    assert got[QpKey(B, A, QA)].counters["payload_bytes"] == 4 * 4096 + 1808


def test_unreliable_transports_count_without_answers() -> None:
    flows = RoceFlows()
    for i in (0, 1, 3):  # UC RDMA WRITE ONLY: PSN 2 lost, nothing resends it
        flows.feed(udp_packet(frame(T + i, A, B, UC | WRITE_ONLY, QB, 40 + i, reth_length=8)))
    deth = bytes(8)  # UD carries a DETH (Q_Key, source QP) after the BTH
    flows.feed(udp_packet(frame(T + 5, A, B, UD | SEND_ONLY, 1, 0, payload=deth + bytes(100))))
    got = {f.key: f for f in flows.finish()}
    uc = got[QpKey(A, B, QB)]
    assert (uc.transport, uc.counters["lost"], uc.counters["unanswered"]) == ("UC", 1, 0)
    ud = got[QpKey(A, B, 1)]
    assert (ud.transport, ud.counters["packets"], ud.counters["payload_bytes"]) == ("UD", 1, 100)
    assert ud.counters["psn_gaps"] == 0


def test_other_udp_and_cut_roce_are_told_apart() -> None:
    short = frames.ipv4(A, B, frames.udp(49152, 4791, b"\x04\x00"), PROTO_UDP)
    other = frames.ipv4(A, B, frames.udp(49152, 4790, bytes(40)), PROTO_UDP)
    reply = frames.ipv4(B, A, frames.udp(4791, 49152, bytes(40)), PROTO_UDP)  # not to 4791
    analysis = PcapAnalysis("n")
    for data in (short, other, reply):
        analysis.feed(CapturedPacket(1, LINKTYPE_RAW, data, len(data)))
    analysis.finish()
    summary = analysis.summary()
    assert (summary["roce_packets"], summary["roce_malformed"], summary["non_tcp"]) == (1, 1, 2)
    assert analysis.roce_figures == []


def test_past_max_qps_the_least_recent_flow_closes() -> None:
    flows = RoceFlows(max_qps=2)
    for qp in (1, 2, 1, 3):
        flows.feed(udp_packet(frame(T + qp, A, B, SEND_ONLY, qp, 7)))
    assert [f.key.dest_qp for f in flows.take_closed()] == [2]
    assert flows.counters.roce_evicted == 1
    assert [f.key.dest_qp for f in flows.figures()] == [1, 3]


def test_an_evicted_answer_flow_pairs_again_when_it_comes_back() -> None:
    flows = RoceFlows(max_qps=3)
    for packet in [
        send(0, 50, ack_req=True),
        ack(1, 50),  # pairs (B, A, QA) with (A, B, QB)
        send(2, 51, ack_req=True),
        frame(T + 3, "10.9.9.9", B, SEND_ONLY, 5, 0),
        frame(T + 3.5, "10.9.9.8", B, SEND_ONLY, 6, 0),  # a fourth flow: (B, A, QA) closes
        send(3.75, 52, ack_req=True),
        ack(4, 52),  # it comes back, and answers QB's flow again
    ]:
        flows.feed(udp_packet(packet))
    assert flows.counters.roce_evicted == 2 and flows.counters.roce_unpaired_responses == 0
    got = {f.key: f for f in flows.finish()}
    assert got[QpKey(A, B, QB)].latencies_ns == (1 * US, 2 * US, US // 4)
