"""UDP datagrams -> flows, as TCP segments go through tcp_reassembly (pure).

Only datagrams to or from a wanted port are taken (`ports`: DNS's 53 by default, the rest of
UDP, QUIC, mDNS or metrics, is not what the correlator reads), and each is one message: no
reassembly, nothing buffered. A flow is the pair of endpoints; its server is the end on a
wanted port (the destination of its first datagram when both or neither are), so EGRESS is
client to server as for TCP. It opens at its first datagram (`FlowOpened`) and closes after
`idle_ns` without a datagram (`FlowClosed`, at the last one's time plus the idle time, checked
as capture time passes) or at `finish`. At most `max_flows` are open; past that the one idle
longest closes early (`counters.evicted`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from zerotrace_collector.packets.decode import UdpPacket
from zerotrace_collector.packets.tcp_reassembly import (
    CloseReason,
    Direction,
    Endpoint,
    FlowClosed,
    FlowId,
    FlowOpened,
)

DNS_PORT = 53
# A stub resolver's socket lives for one lookup (glibc opens one per query burst); a forwarder's
# lives on. 30 s of silence ends a flow: far longer than any resolver's retry (5 s by default).
IDLE_NS = 30_000_000_000
MAX_FLOWS = 4096
# How often (capture time) open flows are checked for idleness.
_SWEEP_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Datagram:
    flow: FlowId
    direction: Direction
    ts_ns: int
    index: int  # datagrams before it in this direction of the flow
    data: bytes
    size: int  # bytes the datagram carried (more than len(data) when the capture cut it)


UdpEvent = FlowOpened | Datagram | FlowClosed


@dataclass
class UdpCounters:
    datagrams: int = 0  # taken into flows
    udp_flows: int = 0  # flows opened
    evicted: int = 0  # flows closed early: max_flows were open


@dataclass(slots=True)
class _Flow:
    id: FlowId
    last_ns: int
    sent: int = 0  # datagrams client -> server
    received: int = 0  # datagrams server -> client


class UdpFlows:
    def __init__(
        self,
        ports: Iterable[int] = (DNS_PORT,),
        idle_ns: int = IDLE_NS,
        max_flows: int = MAX_FLOWS,
    ) -> None:
        self.ports = frozenset(ports)
        self.idle_ns = idle_ns
        self.max_flows = max_flows
        self.counters = UdpCounters()
        # By (client, server), least recently used first.
        self._flows: OrderedDict[tuple[Endpoint, Endpoint], _Flow] = OrderedDict()
        self._swept_ns = 0

    def wanted(self, packet: UdpPacket) -> bool:
        return packet.src_port in self.ports or packet.dst_port in self.ports

    def feed(self, packet: UdpPacket) -> list[UdpEvent]:
        """Events of one datagram, which the caller checked with `wanted`."""
        out: list[UdpEvent] = []
        if packet.ts_ns - self._swept_ns >= _SWEEP_NS:
            self._swept_ns = packet.ts_ns
            self._expire(packet.ts_ns, out)
        src, dst = Endpoint(packet.src, packet.src_port), Endpoint(packet.dst, packet.dst_port)
        flow = self._flows.get((src, dst))
        direction = Direction.CLIENT_TO_SERVER
        if flow is None:
            flow = self._flows.get((dst, src))
            direction = Direction.SERVER_TO_CLIENT
        if flow is None:
            if packet.src_port in self.ports and packet.dst_port not in self.ports:
                client, server = dst, src  # the server spoke first: a reply joined mid-way
                direction = Direction.SERVER_TO_CLIENT
            else:
                client, server = src, dst
                direction = Direction.CLIENT_TO_SERVER
            if len(self._flows) >= self.max_flows:
                _, oldest = self._flows.popitem(last=False)
                out.append(FlowClosed(oldest.id, packet.ts_ns, CloseReason.EVICTED))
                self.counters.evicted += 1
            flow = _Flow(FlowId(client, server, packet.ts_ns, "udp"), packet.ts_ns)
            self._flows[(client, server)] = flow
            self.counters.udp_flows += 1
            out.append(FlowOpened(flow.id, packet.ts_ns))
        else:
            self._flows.move_to_end((flow.id.client, flow.id.server))
        flow.last_ns = packet.ts_ns
        if direction is Direction.CLIENT_TO_SERVER:
            index, flow.sent = flow.sent, flow.sent + 1
        else:
            index, flow.received = flow.received, flow.received + 1
        self.counters.datagrams += 1
        out.append(Datagram(flow.id, direction, packet.ts_ns, index, packet.payload, packet.size))
        return out

    def finish(self) -> list[UdpEvent]:
        """End of input: every open flow closes, at its last datagram."""
        out: list[UdpEvent] = [
            FlowClosed(f.id, f.last_ns, CloseReason.END_OF_INPUT) for f in self._flows.values()
        ]
        self._flows.clear()
        return out

    def _expire(self, now_ns: int, out: list[UdpEvent]) -> None:
        while self._flows:
            key, oldest = next(iter(self._flows.items()))
            if now_ns - oldest.last_ns < self.idle_ns:
                return
            del self._flows[key]
            out.append(FlowClosed(oldest.id, oldest.last_ns + self.idle_ns, CloseReason.IDLE))
