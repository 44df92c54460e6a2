"""RoCEv2 packets -> figures per queue pair (pure): throughput, PSN loss and retransmission,
request-to-ACK latency, NAKs by syndrome, CNPs.

A flow is one direction to one queue pair: (source address, destination address, destination
QP), which is all a packet names (RC carries no source QP). Each flow counts its packets and
bytes; its request PSNs go through roce_psn.PsnStream (gaps, losses, reorders, go-back
retransmissions and duplicates are defined there).

Latency. An RC flow's requests that ask for an answer (AckReq set, and every READ and ATOMIC)
wait for it in the reverse flow: the one from the destination back to the source whose
responses carry PSNs of this flow's PSN space. The two are paired on the first response whose
PSN this flow has sent, when exactly one flow between those hosts has; the pair then holds,
and the request flow learns its own QP number (`src_qp`). A request's latency is the capture
time from its first transmission to the first response that covers it: an ACK, atomic ACK or
read response with a PSN at or past it, or a NAK with a PSN past it (a NAK acknowledges every
PSN before its own). A request sent again before its answer gives no sample (Karn's rule: the
answer cannot be told to one copy). Requests still waiting at the end are `unanswered`.

NAKs and CNPs are counted on the flow that carries them: a NAK travels from the responder to
the requester, a CNP from the notification point (the receiver of ECN-marked packets) to the
reaction point whose sending should slow down, so each lands on the reverse of the flow it
is about (`src_qp` and the paired flow say which).

Read requests take one PSN per response packet: ceil(length / path MTU). The MTU is learnt
from a full-size packet (a FIRST or MIDDLE packet carries exactly one MTU of payload) of the
flow or its pair; until then a READ of L bytes takes between ceil(L / 4096) and
ceil(L / 256) PSNs, and the next request's PSN says how many.

At most `max_qps` flows are open; past that the least recently seen closes early
(`counters.evicted`). Closed flows' figures wait in `closed` until taken.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from zerotrace_collector.packets.decode import UdpPacket
from zerotrace_collector.packets.roce import (
    ACKNOWLEDGE,
    ALWAYS_ANSWERED,
    FULL_MTU,
    FULL_MTU_RESPONSES,
    READ_REQUEST,
    ROCEV2_PORT,
    AckKind,
    RocePacket,
    Transport,
    parse_roce,
)
from zerotrace_collector.packets.roce_psn import (
    LOSS_AFTER_NS,
    RESTART_GAP,
    PsnStream,
    Verdict,
    psn_add,
    psn_diff,
)

MAX_QPS = 4096
# Requests waiting for an answer, per flow: an RC requester's outstanding reads and atomics
# are limited to 16-ish by its responder (max_qp_rd_atom) and its AckReq packets to its send
# queue depth; 4096 covers both with room.
MAX_OUTSTANDING = 4096
# Latency samples kept per flow (count, sum, min and max cover them all).
MAX_LATENCIES = 1024
MIN_MTU, MAX_MTU = 256, 4096
_MTUS = frozenset((256, 512, 1024, 2048, 4096))


@dataclass(frozen=True, slots=True, order=True)
class QpKey:
    src: str
    dst: str
    dest_qp: int


@dataclass(frozen=True)
class QpFigures:
    """One flow's figures, cumulative since its first packet."""

    key: QpKey
    transport: str
    src_qp: int | None  # this side's QP, learnt by pairing with the reverse flow
    first_ns: int
    last_ns: int
    mtu: int | None
    counters: dict[str, int]  # see COUNTERS
    latencies_ns: tuple[int, ...]  # the first MAX_LATENCIES samples, in answer order

    @property
    def duration_ns(self) -> int:
        return self.last_ns - self.first_ns


# The counters of a QpFigures, in table order.
COUNTERS = (
    "packets",
    "bytes",  # UDP payload bytes, BTH to ICRC
    "payload_bytes",  # data bytes: headers, pad and ICRC taken off
    "requests",
    "responses",
    "acks",
    "naks",  # every NAK and RNR NAK; each syndrome also has its own counter (roce.NAK_CODES)
    "cnps",
    "psn_gaps",
    "gap_psns",
    "lost",
    "reordered",
    "recovered",
    "retransmitted",
    "restarts",
    "missing",  # PSNs missing now, neither lost nor filled yet
    "latency_count",
    "latency_sum_ns",
    "latency_min_ns",
    "latency_max_ns",
    "latency_ambiguous",  # answers to requests sent more than once: no sample (Karn)
    "unanswered",  # requests waiting for an answer (at the end: never answered)
)


@dataclass
class RoceCounters:
    roce_packets: int = 0
    roce_malformed: int = 0
    roce_flows: int = 0
    roce_evicted: int = 0
    roce_unpaired_responses: int = 0  # responses no request flow could be found for
    roce_outstanding_dropped: int = 0  # requests past MAX_OUTSTANDING: not timed


@dataclass(slots=True)
class _Request:
    ts_ns: int
    sent_again: bool = False


@dataclass
class _Flow:
    key: QpKey
    transport: Transport
    first_ns: int
    last_ns: int
    stream: PsnStream = field(default_factory=PsnStream)
    counts: dict[str, int] = field(default_factory=dict)
    outstanding: OrderedDict[int, _Request] = field(default_factory=OrderedDict)
    latencies: list[int] = field(default_factory=list)
    peer: QpKey | None = None
    mtu: int | None = None

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def figures(self) -> QpFigures:
        c = {name: 0 for name in COUNTERS}
        c.update(self.counts)
        psn = self.stream.counters
        c.update(
            psn_gaps=psn.gaps,
            gap_psns=psn.gap_psns,
            lost=psn.lost,
            reordered=psn.reordered,
            recovered=psn.recovered,
            retransmitted=psn.retransmitted,
            restarts=psn.restarts,
            missing=self.stream.missing,
            unanswered=len(self.outstanding),
        )
        return QpFigures(
            key=self.key,
            transport=self.transport.value,
            src_qp=self.peer.dest_qp if self.peer is not None else None,
            first_ns=self.first_ns,
            last_ns=self.last_ns,
            mtu=self.mtu,
            counters=c,
            latencies_ns=tuple(self.latencies),
        )


class RoceFlows:
    def __init__(
        self,
        max_qps: int = MAX_QPS,
        max_outstanding: int = MAX_OUTSTANDING,
        loss_after_ns: int = LOSS_AFTER_NS,
    ) -> None:
        """loss_after_ns: how long a missing PSN waits, in capture time, before it is lost
        (roce_psn.PsnStream)."""
        self.max_qps = max_qps
        self.max_outstanding = max_outstanding
        self.loss_after_ns = loss_after_ns
        self.counters = RoceCounters()
        self.closed: list[QpFigures] = []
        self._flows: OrderedDict[QpKey, _Flow] = OrderedDict()  # least recent first
        self._between: dict[tuple[str, str], set[QpKey]] = {}

    @staticmethod
    def wanted(packet: UdpPacket) -> bool:
        return packet.dst_port == ROCEV2_PORT

    def feed(self, packet: UdpPacket) -> None:
        """One UDP datagram to port 4791, in capture order."""
        self.counters.roce_packets += 1
        roce = parse_roce(packet.payload, packet.size)
        if roce is None:
            self.counters.roce_malformed += 1
            return
        flow = self._flow(QpKey(packet.src, packet.dst, roce.dest_qp), roce, packet.ts_ns)
        flow.last_ns = packet.ts_ns
        flow.add("packets")
        flow.add("bytes", packet.size)
        flow.add("payload_bytes", roce.payload_bytes or 0)
        if roce.transport is Transport.CNP:
            flow.add("cnps")
        elif roce.is_request:
            self._request(flow, roce, packet.ts_ns)
        elif roce.is_response and roce.transport is Transport.RC:
            self._response(flow, roce, packet.ts_ns)

    def figures(self) -> list[QpFigures]:
        """Figures of the flows closed and not yet taken, then of the open ones, so far."""
        return [*self.closed, *(f.figures() for f in self._flows.values())]

    def expire(self, now_ns: int) -> None:
        """Capture time has reached now_ns (a live capture, between packets): PSNs missing
        for loss_after_ns are lost, as the next packet of their flow would have found."""
        for flow in self._flows.values():
            flow.stream.expire(now_ns)

    def take_closed(self) -> list[QpFigures]:
        out, self.closed = self.closed, []
        return out

    def finish(self) -> list[QpFigures]:
        """End of input: every flow closes (missing PSNs become lost); all figures, sorted."""
        for key in list(self._flows):
            self._close(key)
        return sorted(self.take_closed(), key=lambda f: f.key)

    def _flow(self, key: QpKey, roce: RocePacket, ts_ns: int) -> _Flow:
        flow = self._flows.get(key)
        if flow is not None:
            self._flows.move_to_end(key)
            if flow.transport is Transport.CNP and roce.transport is not Transport.CNP:
                flow.transport = roce.transport  # named by its traffic, not its CNPs
            return flow
        if len(self._flows) >= self.max_qps:
            self._close(next(iter(self._flows)))
            self.counters.roce_evicted += 1
        flow = _Flow(key, roce.transport, ts_ns, ts_ns, PsnStream(loss_after_ns=self.loss_after_ns))
        self._flows[key] = flow
        self._between.setdefault((key.src, key.dst), set()).add(key)
        self.counters.roce_flows += 1
        return flow

    def _close(self, key: QpKey) -> None:
        flow = self._flows.pop(key)
        flow.stream.finish()
        self._between[(key.src, key.dst)].discard(key)
        # The pair's other flow keeps naming this key: a flow that opens again under it is
        # the same queue pair (or, for its figures, at least was).
        self.closed.append(flow.figures())

    def _request(self, flow: _Flow, roce: RocePacket, ts_ns: int) -> None:
        flow.add("requests")
        if roce.operation in FULL_MTU:
            self._learn_mtu(flow, roce.payload_bytes)
        span, span_max = 1, None
        if roce.operation == READ_REQUEST and roce.transport is Transport.RC:
            span, span_max = self._read_span(flow, roce.dma_length or 0)
        verdict = flow.stream.feed(ts_ns, roce.psn, span, span_max)
        if roce.transport is not Transport.RC:
            return
        if not (roce.ack_req or roce.operation in ALWAYS_ANSWERED):
            return
        if verdict is Verdict.DUPLICATE:
            waiting = flow.outstanding.get(roce.psn)
            if waiting is not None:
                waiting.sent_again = True
            return
        if verdict is Verdict.RESTART:
            flow.outstanding.clear()
        if len(flow.outstanding) >= self.max_outstanding:
            flow.outstanding.popitem(last=False)
            self.counters.roce_outstanding_dropped += 1
        flow.outstanding[roce.psn] = _Request(ts_ns)
        if verdict is Verdict.FILL:
            # Kept in PSN order, so an answer pops from the front.
            base = flow.stream.first_psn or 0
            flow.outstanding = OrderedDict(
                sorted(flow.outstanding.items(), key=lambda item: psn_diff(item[0], base))
            )

    def _response(self, flow: _Flow, roce: RocePacket, ts_ns: int) -> None:
        flow.add("responses")
        if roce.operation in FULL_MTU_RESPONSES:
            self._learn_mtu(flow, roce.payload_bytes)
        covered = roce.psn
        if roce.aeth is not None:
            nak = roce.aeth.counter
            if nak is not None:
                flow.add("naks")
                flow.add(nak)
                covered = psn_add(roce.psn, -1)  # a NAK acknowledges the PSNs before its own
            elif roce.operation == ACKNOWLEDGE and roce.aeth.kind is AckKind.ACK:
                flow.add("acks")
        requests = self._requests_answered_by(flow, roce.psn)
        if requests is None:
            self.counters.roce_unpaired_responses += 1
            return
        waiting = requests.outstanding
        while waiting:
            psn, request = next(iter(waiting.items()))
            if psn_diff(psn, covered) > 0:
                break
            del waiting[psn]
            if request.sent_again:
                requests.add("latency_ambiguous")
                continue
            self._sample(requests, ts_ns - request.ts_ns)

    def _requests_answered_by(self, responses: _Flow, psn: int) -> _Flow | None:
        """The request flow a response of `responses` answers, pairing the two on first use."""
        if responses.peer is not None:
            return self._flows.get(responses.peer)
        key = responses.key
        candidates = [
            self._flows[k]
            for k in self._between.get((key.dst, key.src), ())
            if self._flows[k].transport is Transport.RC
            and self._flows[k].peer in (None, key)  # key: this flow closed and came back
            and self._flows[k].stream.covers(psn)
        ]
        if len(candidates) != 1:
            return None
        requests = candidates[0]
        requests.peer, responses.peer = responses.key, requests.key
        mtu = requests.mtu or responses.mtu
        requests.mtu = responses.mtu = mtu
        return requests

    @staticmethod
    def _sample(flow: _Flow, latency_ns: int) -> None:
        count = flow.counts.get("latency_count", 0)
        flow.add("latency_count")
        flow.add("latency_sum_ns", latency_ns)
        if count == 0 or latency_ns < flow.counts["latency_min_ns"]:
            flow.counts["latency_min_ns"] = latency_ns
        if count == 0 or latency_ns > flow.counts["latency_max_ns"]:
            flow.counts["latency_max_ns"] = latency_ns
        if len(flow.latencies) < MAX_LATENCIES:
            flow.latencies.append(latency_ns)

    def _learn_mtu(self, flow: _Flow, payload: int | None) -> None:
        if payload in _MTUS:
            flow.mtu = payload
            if flow.peer is not None and (peer := self._flows.get(flow.peer)) is not None:
                peer.mtu = payload

    @staticmethod
    def _read_span(flow: _Flow, length: int) -> tuple[int, int | None]:
        """PSNs a READ of `length` bytes takes: exact, or (least, most) while the MTU is
        not known."""
        if length <= MIN_MTU:
            return 1, None
        if flow.mtu is not None:
            return -(-length // flow.mtu), None
        return -(-length // MAX_MTU), min(-(-length // MIN_MTU), RESTART_GAP)
