"""zerotrace_cli/roce_view.py and `zerotrace analyze` on a RoCEv2 capture: one table line per
queue pair flow, busiest first, with throughput, losses, retransmissions, NAKs, CNPs and
latency; the flows' RdmaCounters records in the --json output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.roce_capture import ACK, NAK_SEQ, US, cnp_frame, frame
from zerotrace import names
from zerotrace_cli import main
from zerotrace_cli.roce_view import HEADER, render_roce_table
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET
from zerotrace_collector.packets.pcap import pcap_bytes
from zerotrace_collector.packets.roce import ACKNOWLEDGE, SEND_ONLY
from zerotrace_collector.packets.roce_flows import COUNTERS, QpFigures, QpKey

pytestmark = pytest.mark.unit

A, B = "192.168.50.1", "192.168.50.2"
QA, QB = 0x1A, 0x2B


def capture() -> bytes:
    t = 1_000_000.0
    packets = [
        frame(t + 10 * i, A, B, SEND_ONLY, QB, 100 + i, ack_req=i == 3, payload=bytes(4000))
        for i in (0, 1, 3)  # 2 never seen
    ]
    packets += [
        frame(t + 34, B, A, ACKNOWLEDGE, QA, 102, syndrome=NAK_SEQ),  # 102 is expected
        frame(t + 40, B, A, ACKNOWLEDGE, QA, 103, syndrome=ACK),
        cnp_frame(t + 41, B, A, QA),
    ]
    return pcap_bytes(packets, LINKTYPE_ETHERNET)


def test_analyze_prints_the_flows_and_writes_their_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pcap = tmp_path / "roce.pcap"
    pcap.write_bytes(capture())
    out = tmp_path / "records.jsonl"
    assert main(["analyze", str(pcap), "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index(HEADER)
    requests, answers = lines[at + 1].split(), lines[at + 2].split()
    # 3 sends of 4000 bytes in 30 us: 4016-byte datagrams, 401.6 MB/s; send 3 is answered
    # 10 us after it.
    assert requests[:10] == [A, ">", B, "qp", "0x2b", "(qp", "0x1a)", "RC", "3", "401.6"]
    assert requests[10:] == ["1", "0", "0", "0", "0", "0", "10.0/10.0", "(1)"]
    assert answers[:8] == [B, ">", A, "qp", "0x1a", "(qp", "0x2b)", "RC"]
    # A NAK and an ACK of 20 bytes, a CNP of 32, in 7 us.
    assert answers[8:] == ["3", "10.3", "0", "0", "0", "0", "1", "1", "-"]
    assert "counted:" in lines[-1] and "roce_flows 2" in lines[-1] and "roce_packets 6" in lines[-1]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    flows = [r for r in records if r["record"] == names.RAW_RDMA.record]
    assert [(r["flow"]["dest_qp"], r["counters"]["lost"]) for r in flows] == [(QB, 1), (QA, 0)]


def test_the_table_orders_by_bytes_and_cuts_at_rows() -> None:
    def flow(qp: int, size: int) -> QpFigures:
        counters = dict.fromkeys(COUNTERS, 0) | {"bytes": size, "packets": 1}
        return QpFigures(QpKey("a", "b", qp), "UD", None, 0, 0, None, counters, ())

    lines = render_roce_table([flow(1, 10), flow(2, 30), flow(3, 20)], rows=2)
    assert [line.split()[4] for line in lines[1:3]] == ["0x2", "0x3"]
    assert lines[3] == "... 1 more flows"
    assert render_roce_table([]) == []
    assert US == 1_000
