"""Kernel test: live RoCE flows in the node. While `zerotrace run --roce-interface lo` (embedded)
runs, the test sends RoCEv2 packets built with scapy's RoCE layers (BTH, AETH, CNP) as the
payload of ordinary UDP datagrams over loopback, 127.0.0.1 (the requester, QP QA) <->
127.0.0.2:4791 (the responder, QP QB): no RDMA hardware, the BTH is the UDP payload. The
script has known drops (two PSN gaps, 3 PSNs never sent), a retransmission, ACK delays made
with real sleeps, a NAK and a CNP. The raw.rdma PACKETS records of the run's local raw log
then give per queue pair exactly the counts sent.

Exactness. Counts (packets, bytes, gaps, lost, retransmitted, ACKs, NAKs, CNPs, latency samples)
are asserted equal. A latency is what the capture saw between the kernel's timestamps of the
request and of its answer: at least the sleep between sending them (sleep never returns early)
and less than that sleep plus SLACK_NS (the scheduler, the sends and loopback delivery: a few
ms on a loaded machine, 200 ms allowed). The dropped PSNs are `missing` until they have waited
--roce-loss-after (1 s here, 10 s by default) and `lost` from then on (whether a record is
made while they are still missing depends on how soon the run's loop starts: not asserted;
tests/unit/test_roce_intervals.py has the step exactly).

Also: the kernel filter on a real socket keeps only UDP to port 4791, and on lo only the
arriving copy. Needs root (AF_PACKET, and `zerotrace run`'s eBPF socket probe). Run:
sudo .venv/bin/python -m pytest tests/kernel/test_roce_live.py
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH, cnp
from scapy.layers.inet import IP, UDP
from scapy.packet import Packet, Raw

from tests.e2e.llm_fixtures import free_port
from tests.ebpf_required import require_ebpf
from tests.unit.roce_capture import ACK, NAK_SEQ
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.raw_log import RawLogPeriod
from zerotrace_cli.embedded_node import raw_log_folder
from zerotrace_collector.packets.af_packet import LiveSocket
from zerotrace_collector.packets.decode import UdpPacket, decode_packet
from zerotrace_collector.packets.roce import ACKNOWLEDGE, ROCEV2_PORT, SEND_ONLY

pytestmark = pytest.mark.kernel
require_ebpf()  # `zerotrace run` always captures TCP (here only port 1: nothing)

ROOT = Path(__file__).resolve().parents[2]
A, B = "127.0.0.1", "127.0.0.2"  # requester, responder: both on lo
QA, QB = 0x000111, 0x000222
P = 5000  # the first PSN
PAYLOAD = 256
SEND_BYTES = 12 + PAYLOAD + 4  # BTH, payload, ICRC
MS = 1_000_000
SLACK_NS = 200 * MS


def roce_bytes(layer: Packet, src: str, dst: str) -> bytes:
    """The UDP payload: the BTH and what follows, with scapy's ICRC over these addresses."""
    return raw(IP(src=src, dst=dst) / UDP(sport=49152, dport=ROCEV2_PORT) / layer)[28:]


class Peers:
    """The requester's and responder's UDP sockets; each datagram goes to the other's 4791."""

    def __init__(self) -> None:
        self.a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.a.bind((A, 0))
        self.b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.b.bind((B, 0))

    def send(self, i: int, ack_req: bool = False) -> None:
        layer = BTH(opcode=SEND_ONLY, dqpn=QB, psn=P + i, ackreq=int(ack_req))
        self.a.sendto(roce_bytes(layer / Raw(bytes(PAYLOAD)), A, B), (B, ROCEV2_PORT))

    def answer(self, i: int, syndrome: int = ACK) -> None:
        layer = BTH(opcode=ACKNOWLEDGE, dqpn=QA, psn=P + i) / AETH(syndrome=syndrome, msn=0)
        self.b.sendto(roce_bytes(layer, B, A), (A, ROCEV2_PORT))

    def cnp(self) -> None:
        self.b.sendto(roce_bytes(cnp(QA), B, A), (A, ROCEV2_PORT))

    def close(self) -> None:
        self.a.close()
        self.b.close()


def script(peers: Peers) -> None:
    """13 sends (PSNs 4, 12 and 13 never sent: 2 gaps, 3 PSNs; 7 sent twice), 3 ACKs after
    20, 30 and 15 ms (the one for 7 times nothing: sent twice), a NAK after 30 ms (PSN 9,
    sequence error: it acknowledges 8), a CNP."""
    for i in (0, 1):
        peers.send(i)
    peers.send(2, ack_req=True)
    time.sleep(0.020)
    peers.answer(2)  # latency >= 20 ms
    for i in (3, 5, 6):  # 4 dropped
        peers.send(i)
    peers.send(7, ack_req=True)
    peers.send(7, ack_req=True)  # retransmitted: its ACK gives no sample (Karn)
    time.sleep(0.010)
    peers.answer(7)
    peers.send(8, ack_req=True)
    time.sleep(0.030)
    peers.answer(9, NAK_SEQ)  # latency >= 30 ms
    peers.cnp()
    peers.send(9)
    peers.send(10, ack_req=True)
    time.sleep(0.015)
    peers.answer(10)  # latency >= 15 ms
    peers.send(11)
    peers.send(14)  # 12 and 13 dropped


def last_per_flow(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: r["ts_ns"]):
        out[r["flow"]["dest_qp"]] = r
    return out


def test_zerotrace_run_reports_exact_per_queue_pair_figures_of_live_roce(
    codec: AvroCodec, tmp_path: Path
) -> None:
    env = dict(os.environ, ZEROTRACE_HOME=str(tmp_path), ZEROTRACE_NODE_ID="roce-node")
    command = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--no-tls"]
    command += ["--port", "1", "--roce-interface", "lo", "--rdma-interval", "0.5"]
    command += ["--roce-loss-after", "1", "--duration", "6", "--quiet"]
    command += ["--store", str(tmp_path / "e.duckdb")]
    command += ["--http-port", str(free_port()), "--grpc-port", str(free_port())]
    run = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert run.stderr is not None
    err: list[str] = []
    for line in run.stderr:  # the capture socket is open once the feed says so
        err.append(line)
        if "RoCE flows:" in line:
            break
    peers = Peers()
    try:
        script(peers)
        out, rest = run.communicate(timeout=240)
    finally:
        peers.close()
        if run.poll() is None:
            run.kill()
    stderr = "".join(err) + rest
    assert run.returncode == 0, stderr[-2000:]
    assert (
        "zerotrace: RoCE flows: capturing UDP port 4791 on lo (first 128 bytes of each "
        "datagram), a record per active queue pair every 0.5 s, at most 4096 flows\n"
    ) in stderr
    records = [
        datum
        for m in RawLogPeriod(raw_log_folder(tmp_path), 0, 1 << 62).messages()
        if m.topic == names.RAW_RDMA.name
        for datum in [codec.decode(m.value)[1]]
    ]
    assert {(r["source"], r["node_id"]) for r in records} == {("PACKETS", "roce-node")}
    flows = last_per_flow(records)
    assert set(flows) == {QA, QB}

    sends = flows[QB]
    assert sends["flow"] == {
        "src_addr": A,
        "dst_addr": B,
        "dest_qp": QB,
        "src_qp": QA,
        "transport": "RC",
    }
    c = sends["counters"]
    assert (c["packets"], c["requests"], c["bytes"]) == (13, 13, 13 * SEND_BYTES)
    assert c["payload_bytes"] == 13 * PAYLOAD
    assert (c["psn_gaps"], c["gap_psns"], c["lost"], c["missing"]) == (2, 3, 3, 0)
    assert (c["retransmitted"], c["reordered"], c["recovered"]) == (1, 0, 0)
    assert (c["latency_count"], c["latency_ambiguous"], c["unanswered"]) == (3, 1, 0)
    assert 15 * MS <= c["latency_min_ns"] < 15 * MS + SLACK_NS
    assert 30 * MS <= c["latency_max_ns"] < 30 * MS + SLACK_NS
    assert 65 * MS <= c["latency_sum_ns"] < 65 * MS + 3 * SLACK_NS
    # A dropped PSN is missing until its wait is over, then lost: never both, never more.
    assert all(
        r["counters"]["missing"] + r["counters"]["lost"] <= 3
        for r in records
        if r["flow"]["dest_qp"] == QB
    )
    # Rates are per interval: the packets of all intervals add up to the 13 sent.
    intervals = [r for r in records if r["flow"]["dest_qp"] == QB]
    assert round(sum(r["rates"]["packets"] * r["interval_ns"] / 1e9 for r in intervals)) == 13

    answers = flows[QA]
    assert answers["flow"]["src_qp"] == QB and answers["flow"]["src_addr"] == B
    a = answers["counters"]
    assert (a["packets"], a["responses"], a["acks"], a["cnps"]) == (5, 4, 3, 1)
    assert (a["naks"], a["nak_psn_sequence_error"], a["requests"]) == (1, 1, 0)
    assert "roce: lost 0, shed 0" in out  # the run's per-feed summary


def test_the_kernel_keeps_only_udp_to_4791_and_on_lo_only_the_arriving_copy() -> None:
    capture = LiveSocket("lo", ROCEV2_PORT, 128)
    try:
        peers = Peers()
        other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(7):
            peers.send(0)
            other.sendto(b"not roce", (B, ROCEV2_PORT + 1))
            with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as v6:
                v6.sendto(b"\x04" + bytes(40), ("::1", ROCEV2_PORT))
        peers.close()
        other.close()
        assert capture.wait(1.0)
        time.sleep(0.1)
        frames = capture.ready(100)
    finally:
        capture.close()
    decoded = [decode_packet(f) for f in frames]
    assert all(isinstance(d, UdpPacket) and d.dst_port == ROCEV2_PORT for d in decoded)
    assert sorted((d.dst, d.size) for d in decoded if isinstance(d, UdpPacket)) == sorted(
        [("::1", 41)] * 7 + [(B, SEND_BYTES)] * 7
    )
    stats = capture.stats
    assert (stats.received, stats.loopback_copies, stats.filtered_out) == (14, 0, 0)
    assert max(len(f.data) for f in frames) == 128  # cut by the filter
