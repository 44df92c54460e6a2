"""rdma/roce_intervals.py: RoCEv2 frames fed one by one, read out at ticks, give per queue pair
flow one raw.rdma PACKETS record per interval in which its counters changed: counters
cumulative and exact, rates the increase over the interval, a missing PSN lost once its wait
is over even while its flow is quiet, a flow pushed out by the cap reported once more and
counted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.roce_capture import ACK, NAK_SEQ, US, cnp_frame, frame
from zerotrace.codec import AvroCodec
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.link import LINKTYPE_RAW
from zerotrace_collector.packets.roce import ACKNOWLEDGE, WRITE_ONLY
from zerotrace_collector.packets.time_order import TimeOrder
from zerotrace_collector.rdma.port_rates import NS_PER_S
from zerotrace_collector.rdma.rdma_records import FLOW_RATES, RDMA_COUNTERS
from zerotrace_collector.rdma.roce_intervals import RoceIntervals

pytestmark = pytest.mark.unit

A, B = "10.0.0.1", "10.0.0.2"
QA, QB = 0x000101, 0x000202
T = 1_000_000.0  # capture start, microseconds
START = round(T * US)
P = 7000  # the first PSN


def write(ts: float, i: int, ack_req: bool = False) -> CapturedPacket:
    return frame(
        T + ts, A, B, WRITE_ONLY, QB, P + i, ack_req=ack_req, reth_length=512, payload=bytes(512)
    )


def answer(ts: float, i: int, syndrome: int = ACK) -> CapturedPacket:
    return frame(T + ts, B, A, ACKNOWLEDGE, QA, P + i, syndrome=syndrome)


def at(us: float) -> int:
    return START + round(us * US)


def by_dest_qp(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out = {r["flow"]["dest_qp"]: r for r in records}
    assert len(out) == len(records)
    return out


def pick(counters: dict[str, int], names: str) -> tuple[int, ...]:
    return tuple(counters[name] for name in names.split())


def test_each_interval_reports_the_flows_that_changed(codec: AvroCodec) -> None:
    live = RoceIntervals("node-l", START, loss_after_ns=1000 * US, reorder_ns=0)  # fed in order
    # Interval 1: writes 0, 1, 2 (2 asks for an ACK, answered 7 us later), 3 dropped, 4; a CNP.
    for packet in [
        write(0, 0),
        write(10, 1),
        write(20, 2, ack_req=True),
        answer(27, 2),
        write(40, 4),
        cnp_frame(T + 50, B, A, QA),
    ]:
        live.feed(packet)
    records = by_dest_qp(live.tick(at(100)))
    writes, back = records[QB], records[QA]
    c = writes["counters"]
    assert pick(c, "packets requests bytes payload_bytes") == (4, 4, 4 * 544, 4 * 512)
    assert pick(c, "psn_gaps gap_psns missing lost retransmitted") == (1, 1, 1, 0, 0)
    assert pick(c, "latency_count latency_sum_ns latency_min_ns latency_max_ns") == (
        1,
        7 * US,
        7 * US,
        7 * US,
    )
    assert (writes["ts_ns"], writes["interval_ns"], writes["source"]) == (
        at(100),
        100 * US,
        "PACKETS",
    )
    assert writes["rates"]["packets"] == 4 * NS_PER_S / (100 * US)
    assert writes["rates"]["bytes"] == 4 * 544 * NS_PER_S / (100 * US)
    assert set(writes["rates"]) == set(FLOW_RATES)
    assert writes["event_id"] == f"node-l/roce/{A}-{B}/qp{QB}/{START}/{at(100)}"
    assert writes["flow"] == {
        "src_addr": A,
        "dst_addr": B,
        "dest_qp": QB,
        "src_qp": QA,
        "transport": "RC",
    }
    assert pick(back["counters"], "packets acks cnps naks") == (2, 1, 1, 0)
    assert codec.decode(codec.encode(RDMA_COUNTERS, writes)) == (RDMA_COUNTERS, writes)

    # Interval 2: write 5 sent twice, a NAK back: rates over these 200 us only.
    for packet in [write(150, 5), write(160, 5), answer(170, 6, NAK_SEQ)]:
        live.feed(packet)
    records = by_dest_qp(live.tick(at(300)))
    writes, back = records[QB], records[QA]
    assert pick(writes["counters"], "packets retransmitted missing") == (6, 1, 1)
    assert writes["rates"]["packets"] == 2 * NS_PER_S / (200 * US)
    assert writes["rates"]["retransmitted"] == NS_PER_S / (200 * US)
    assert writes["interval_ns"] == 200 * US
    assert pick(back["counters"], "packets naks nak_psn_sequence_error") == (3, 1, 1)
    assert back["rates"]["naks"] == NS_PER_S / (200 * US) and back["rates"]["cnps"] == 0

    # Quiet: nothing changed, nothing reported; then PSN 3 has waited its 1000 us: lost.
    assert live.tick(at(600)) == []
    [lost] = live.tick(at(1100))  # over (600, 1100]: a quiet tick is a tick
    assert lost["flow"]["dest_qp"] == QB
    assert pick(lost["counters"], "lost missing packets") == (1, 0, 6)
    assert lost["rates"]["lost"] == NS_PER_S / (500 * US) and lost["rates"]["packets"] == 0
    assert live.tick(at(1100)) == []  # the clock did not move on
    assert live.counters() == {
        "roce_packets": 9,
        "roce_malformed": 0,
        "roce_flows": 2,
        "roce_evicted": 0,
        "roce_unpaired_responses": 0,
        "roce_outstanding_dropped": 0,
        "not_roce": 0,
        "records": 5,
    }


def test_a_fill_still_held_for_reordering_at_a_tick_is_not_counted_lost() -> None:
    # As the live shell runs it: frames through a TimeOrder of 50 us, what it releases fed,
    # then a tick. PSN 1 goes missing at 10 us; its fill is stamped at 1005 us, 5 us before
    # its 1000 us wait ends, and reaches the socket at 1030 us.
    order = TimeOrder(50 * US)
    live = RoceIntervals("node-l", START, loss_after_ns=1000 * US, reorder_ns=50 * US)

    def arrive(packet: CapturedPacket | None, now_us: float) -> list[dict[str, Any]]:
        for ready in (order.push(packet) if packet is not None else []) + order.due(at(now_us)):
            live.feed(ready)
        return live.tick(at(now_us))

    arrive(write(0, 0), 1)
    arrive(write(10, 2), 20)
    [held] = arrive(None, 1020)  # the fill, stamped 1005 us, is not here yet
    assert pick(held["counters"], "missing lost") == (1, 0)
    assert arrive(write(1005, 1), 1030) == []  # held by the TimeOrder: not fed, not lost
    [filled] = arrive(None, 1100)  # fed now, in its place: filled, never lost
    assert pick(filled["counters"], "packets missing lost") == (3, 0, 0)
    assert order.late == 0


def test_a_negative_reorder_window_is_refused() -> None:
    with pytest.raises(ValueError, match="reorder window"):
        RoceIntervals("node-l", START, reorder_ns=-1)


def test_past_the_cap_the_least_recent_flow_is_reported_once_more_and_counted() -> None:
    live = RoceIntervals("node-l", START, max_flows=2)
    for qp in (1, 2):
        live.feed(frame(T + qp, A, B, WRITE_ONLY, qp, 10, reth_length=0))
    assert len(live.tick(at(10))) == 2
    live.feed(frame(T + 12, A, B, WRITE_ONLY, 1, 11, reth_length=0))  # qp 2 is now least recent
    live.feed(frame(T + 13, A, B, WRITE_ONLY, 3, 10, reth_length=0))  # pushes qp 2 out
    records = by_dest_qp(live.tick(at(20)))
    assert set(records) == {1, 3}  # qp 2 closed unchanged since its last record: nothing new
    assert records[1]["counters"]["packets"] == 2 and records[3]["counters"]["packets"] == 1
    live.feed(frame(T + 21, A, B, WRITE_ONLY, 2, 11, reth_length=0))  # qp 2 again: a new flow
    live.feed(frame(T + 22, A, B, WRITE_ONLY, 3, 11, reth_length=0))  # qp 1 out, unreported
    live.feed(frame(T + 23, A, B, WRITE_ONLY, 3, 12, reth_length=0))
    records = by_dest_qp(live.tick(at(30)))
    assert set(records) == {2, 3}
    assert records[2]["counters"]["packets"] == 1  # counted anew from its new first packet
    assert records[2]["event_id"].endswith(f"/{at(21)}/{at(30)}")
    assert records[3]["counters"]["packets"] == 3
    assert live.counters()["roce_evicted"] == 2 and live.counters()["roce_flows"] == 4


def test_a_flow_closed_with_new_counters_gives_its_last_record() -> None:
    live = RoceIntervals("node-l", START, max_flows=1)
    live.feed(frame(T + 1, A, B, WRITE_ONLY, 1, 10, reth_length=0))
    live.feed(frame(T + 2, A, B, WRITE_ONLY, 1, 11, reth_length=0))
    live.feed(frame(T + 3, A, B, WRITE_ONLY, 2, 10, reth_length=0))  # qp 1 out, never reported
    first, second = live.tick(at(10))
    assert (first["flow"]["dest_qp"], first["counters"]["packets"]) == (1, 2)
    assert (second["flow"]["dest_qp"], second["counters"]["packets"]) == (2, 1)


def test_frames_that_are_no_roce_are_counted_not_analysed() -> None:
    live = RoceIntervals("node-l", START)
    live.feed(CapturedPacket(START, LINKTYPE_RAW, b"\x45" + bytes(10), 11))
    assert live.tick(at(1)) == []
    assert (live.counters()["not_roce"], live.counters()["roce_packets"]) == (1, 0)


def test_at_least_one_flow() -> None:
    with pytest.raises(ValueError, match="at least one flow"):
        RoceIntervals("node-l", START, max_flows=0)
