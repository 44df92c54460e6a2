"""packets/udp_flows.py, and its records (flows_to_records) and counters (analysis): DNS
datagrams become flows with a client and a server, one record per datagram, closed when idle,
evicted when too many, and at the end of input; other UDP ports are not read."""

from __future__ import annotations

import pytest

from zerotrace_collector.packets import frames
from zerotrace_collector.packets.analysis import PcapAnalysis
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.decode import UdpPacket
from zerotrace_collector.packets.flows_to_records import CONN_EVENT, SOCKET_DATA
from zerotrace_collector.packets.ip import PROTO_UDP
from zerotrace_collector.packets.link import LINKTYPE_RAW
from zerotrace_collector.packets.tcp_reassembly import (
    CloseReason,
    Direction,
    Endpoint,
    FlowClosed,
    FlowId,
    FlowOpened,
)
from zerotrace_collector.packets.udp_flows import IDLE_NS, Datagram, UdpFlows

pytestmark = pytest.mark.unit

C, S = Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.53", 53)


def dgram(ts: int, src: Endpoint, dst: Endpoint, payload: bytes = b"m") -> UdpPacket:
    return UdpPacket(ts, src.addr, src.port, dst.addr, dst.port, payload, len(payload))


def test_a_query_and_its_answer_make_one_flow() -> None:
    flows = UdpFlows()
    flow = FlowId(C, S, 100, "udp")
    assert flows.feed(dgram(100, C, S, b"q")) == [
        FlowOpened(flow, 100),
        Datagram(flow, Direction.CLIENT_TO_SERVER, 100, 0, b"q", 1),
    ]
    assert flows.feed(dgram(200, S, C, b"r")) == [
        Datagram(flow, Direction.SERVER_TO_CLIENT, 200, 0, b"r", 1)
    ]
    assert flows.feed(dgram(300, C, S, b"q2"))[0].index == 1  # type: ignore[union-attr]
    assert flows.finish() == [FlowClosed(flow, 300, CloseReason.END_OF_INPUT)]
    assert (flows.counters.datagrams, flows.counters.udp_flows) == (3, 1)


def test_the_server_is_the_end_on_the_wanted_port_even_when_it_speaks_first() -> None:
    flows = UdpFlows()
    first = flows.feed(dgram(100, S, C))
    assert first[0] == FlowOpened(FlowId(C, S, 100, "udp"), 100)
    assert first[1].direction is Direction.SERVER_TO_CLIENT  # type: ignore[union-attr]


def test_only_wanted_ports_are_read() -> None:
    flows = UdpFlows(ports=(53, 5353))
    assert flows.wanted(dgram(1, C, S))
    assert flows.wanted(dgram(1, C, Endpoint("10.0.0.9", 5353)))
    assert not flows.wanted(dgram(1, C, Endpoint("10.0.0.9", 443)))


def test_an_idle_flow_closes_and_a_new_one_opens_later() -> None:
    flows = UdpFlows()
    flows.feed(dgram(100, C, S))
    later = flows.feed(dgram(100 + IDLE_NS + 1, C, S))
    old, new = FlowId(C, S, 100, "udp"), FlowId(C, S, 100 + IDLE_NS + 1, "udp")
    assert later[:2] == [
        FlowClosed(old, 100 + IDLE_NS, CloseReason.IDLE),
        FlowOpened(new, 100 + IDLE_NS + 1),
    ]


def test_past_max_flows_the_least_recent_closes() -> None:
    flows = UdpFlows(max_flows=2)
    others = [Endpoint("10.0.0.1", 40000 + i) for i in range(3)]
    flows.feed(dgram(1, others[0], S))
    flows.feed(dgram(2, others[1], S))
    flows.feed(dgram(3, others[0], S))  # the first is the more recent now
    out = flows.feed(dgram(4, others[2], S))
    assert out[0] == FlowClosed(FlowId(others[1], S, 2, "udp"), 4, CloseReason.EVICTED)
    assert flows.counters.evicted == 1


def test_a_capture_of_dns_gives_one_record_per_datagram() -> None:
    def frame(ts: int, src: Endpoint, dst: Endpoint, payload: bytes) -> CapturedPacket:
        ip = frames.ipv4(src.addr, dst.addr, frames.udp(src.port, dst.port, payload), PROTO_UDP)
        return CapturedPacket(ts, LINKTYPE_RAW, ip, len(ip))

    other = frame(150, C, Endpoint("10.0.0.9", 443), b"quic")
    analysis = PcapAnalysis("n1")
    records = list(
        analysis.records_from_packets(
            [frame(100, C, S, b"query"), other, frame(200, S, C, b"answer")]
        )
    )
    kinds = [(name, datum.get("kind") or datum["direction"]) for name, datum in records]
    assert kinds == [
        (CONN_EVENT, "CONNECT"),
        (SOCKET_DATA, "EGRESS"),
        (SOCKET_DATA, "INGRESS"),
        (CONN_EVENT, "CLOSE"),
    ]
    data = [d for name, d in records if name == SOCKET_DATA]
    assert {d["conn_id"] for d in data} == {"n1/udp/10.0.0.1:40000-10.0.0.53:53/100"}
    assert [d["event_id"].rsplit("/", 2)[1:] for d in data] == [["c2s", "0"], ["s2c", "0"]]
    assert [(d["bytes"], d["tcp_seq"], d["start_ns"]) for d in data] == [
        (5, None, 100),
        (6, None, 200),
    ]
    assert (data[0]["local_port"], data[0]["remote_port"], data[0]["source"]) == (
        40000,
        53,
        "PACKET",
    )
    summary = analysis.summary()
    assert (summary["udp"], summary["non_tcp"], summary["udp_flows"]) == (2, 1, 1)
