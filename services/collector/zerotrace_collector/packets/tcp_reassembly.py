"""TCP reassembly (pure, bounded): TCP packets in capture order -> per connection, the bytes of
each direction in sequence order, gap markers where bytes are missing, and open/close events.

Who is the client: the sender of a SYN (or the receiver of a SYN-ACK). When the handshake was
not captured, the endpoint with the lower port is taken as the server (servers listen on
well-known or configured ports; clients get ephemeral ones, 32768-60999 on Linux), ties going
to the destination of the first packet seen. A SYN or SYN-ACK arriving later, before anything
of the connection was emitted, corrects that guess and the connection's time; a connection
whose SYN-ACK came first is opened when its SYN comes, or at its first event, whichever is
first, so a capture reordered by a packet or two still names it by its SYN's time.

When bytes are missing: a hole below what the peer has acknowledged (or below a FIN or RST) is
real, but a capture may show the ACK a little before the data it acknowledges (mirror ports,
merged or reordered captures). So such a hole is declared a gap only after a grace of
`reorder_grace_packets` more packets of the connection and `reorder_grace_ns` of packet time,
both counted from the first packet that confirmed that hole (not an earlier one: when ACKs
keep overtaking their data, some hole is always open, but each is young). Both, because in a
reordered capture packet time jumps (a late packet carries an older time, the next token a
much newer one), and a connection that goes quiet keeps its hole until it closes anyway.
A RST closes the connection only after a grace of `reset_grace_packets` packets of the whole
capture (few packets of a reset connection follow) or `reorder_grace_ns`: bytes the RST
overtook in the capture may still come, from its sender and from the peer, whose data in
flight no ACK confirmed (the server's last chunk when the client resets right after reading).
A buffer limit, the idle timeout and the end of input declare every
remaining hole at once. After a gap marker, delivery goes on with the next bytes.
A trailing hole of exactly one byte that no FIN accounts for is taken as an uncaptured FIN
(the ACK of a FIN is one past the last byte), not as a gap.

Order across the two directions: a segment whose ACK covers bytes of the peer that are not
delivered yet was sent after those bytes arrived, so it waits for them (see `Stream.waits`):
a reordered capture must not show a response before the late segment of its request. The
peer's missing bytes are confirmed by that very ACK, so the wait ends at the latest when
their grace makes them a gap; a close or a buffer limit ends it at once.

Time is packet time only: the idle timeout and the graces compare packet timestamps, so a
replay of the same capture yields the same events.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field

from zerotrace_collector.packets.decode import TcpPacket
from zerotrace_collector.packets.tcp_stream import MAX_WAITS, Insert, Stream, seq_diff

MiB = 1024 * 1024
SECOND_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ReassemblyLimits:
    # Out-of-order bytes and segments held per connection (both directions); past either, the
    # earliest hole is declared a gap. 4 MiB holds a full receive window of a fast local link.
    max_held_bytes_per_flow: int = 4 * MiB
    max_held_segments_per_flow: int = 4096
    # Across all connections; past it the current connection, then the least recently active
    # ones, give up their holes.
    max_held_bytes_total: int = 256 * MiB
    # Open connections tracked; past it the least recently active one is closed (EVICTED).
    max_flows: int = 65536
    # A connection with no packet for this long (packet time) is closed (IDLE).
    idle_timeout_ns: int = 300 * SECOND_NS
    # See the module doc: how long a hole the peer acknowledged may wait for late data.
    reorder_grace_packets: int = 16
    reorder_grace_ns: int = SECOND_NS // 5
    # Packets of the whole capture a RST waits for late bytes: a capture reordered in blocks
    # of 8 with duplicates moves a packet up to ~16 places, so twice as many again, and more
    # since the peer's late bytes are not confirmed by anything.
    reset_grace_packets: int = 64
    # Packets of a closed connection (the last ACK after FIN, a late retransmission) are
    # ignored for this long (TCP's TIME_WAIT is 60 s on Linux), in at most this many entries.
    closed_memory_ns: int = 60 * SECOND_NS
    max_closed_remembered: int = 65536


DEFAULT_LIMITS = ReassemblyLimits()


class Direction(enum.StrEnum):
    CLIENT_TO_SERVER = "c2s"
    SERVER_TO_CLIENT = "s2c"


class CloseReason(enum.StrEnum):
    FIN = "fin"  # both sides sent FIN and every byte before them was delivered
    RST = "rst"  # once the bytes it (or the peer) acknowledged came, or after the grace
    IDLE = "idle"
    EVICTED = "evicted"  # max_flows reached
    REUSED = "reused"  # a SYN with a new sequence number on the same 5-tuple
    END_OF_INPUT = "end_of_input"


@dataclass(frozen=True, slots=True)
class Endpoint:
    addr: str
    port: int


@dataclass(frozen=True, slots=True)
class FlowId:
    client: Endpoint
    server: Endpoint
    # Its SYN's time; when the SYN was not captured, its SYN-ACK's, or else its first packet's.
    # For a UDP flow (udp_flows.py), its first datagram's.
    opened_ns: int
    transport: str = "tcp"  # "udp" for udp_flows.py's flows


@dataclass(frozen=True, slots=True)
class FlowOpened:
    flow: FlowId
    ts_ns: int  # the SYN (or SYN-ACK, when the SYN was not captured)


@dataclass(frozen=True, slots=True)
class DataPiece:
    flow: FlowId
    direction: Direction
    ts_ns: int  # when they were readable: their packet's time or a later one's before them
    seq: int  # TCP sequence number of the first byte
    offset: int  # offset of the first byte in this direction's stream
    data: bytes  # empty for a gap marker
    gap: int = 0  # > 0: a gap marker for this many missing bytes


@dataclass(frozen=True, slots=True)
class FlowClosed:
    flow: FlowId
    ts_ns: int
    reason: CloseReason


FlowEvent = FlowOpened | DataPiece | FlowClosed


@dataclass
class ReassemblyCounters:
    segments: int = 0  # TCP packets fed
    flows: int = 0  # connections seen
    flows_without_syn: int = 0  # of which the handshake was not captured
    bytes: int = 0  # payload bytes delivered
    retransmissions: int = 0  # segments carrying bytes already seen (whole or in part)
    retransmitted_bytes: int = 0
    overlap_conflicts: int = 0  # bytes of a later copy that differ from the first (kept)
    out_of_order: int = 0  # segments that arrived beyond a hole and were buffered
    gaps: int = 0
    gap_bytes: int = 0
    limit_gaps: int = 0  # of the gaps, those forced by a buffer limit
    orphan_packets: int = 0  # packets of a closed connection, RSTs of no known one
    idle_closed: int = 0
    evicted_flows: int = 0


_Key = tuple[Endpoint, Endpoint]


@dataclass
class _Flow:
    client: Endpoint
    server: Endpoint
    opened_ns: int
    last_ns: int
    roles_firm: bool  # a SYN or SYN-ACK, or bytes emitted, settled who the client is
    c2s: Stream = field(default_factory=Stream)
    s2c: Stream = field(default_factory=Stream)
    packets: int = 0
    accounted: int = 0  # this flow's share of TcpReassembler._held_total
    reset: tuple[int, int] | None = None  # (capture packet number, ts_ns) of its first RST
    syn_seen: bool = False  # a SYN or SYN-ACK
    emitted: bool = False  # an event carried its id: opened_ns and the roles are final
    # (sender, data seq, ack) of segments that came before both streams were anchored: their
    # waits for the peer (see `Stream.waits`) are filed once offsets exist. By sender, not
    # direction: a SYN that comes later may still swap the roles.
    early_waits: list[tuple[Endpoint, int, int]] = field(default_factory=list)

    @property
    def id(self) -> FlowId:
        return FlowId(self.client, self.server, self.opened_ns)

    @property
    def held(self) -> int:
        return self.c2s.held + self.s2c.held

    def stream(self, direction: Direction) -> Stream:
        return self.c2s if direction is Direction.CLIENT_TO_SERVER else self.s2c

    def swap_roles(self) -> None:
        self.client, self.server = self.server, self.client
        self.c2s, self.s2c = self.s2c, self.c2s


class TcpReassembler:
    """Feed TCP packets in capture order; each call returns the events it completed.
    Not thread-safe; one instance per capture."""

    def __init__(self, limits: ReassemblyLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.counters = ReassemblyCounters()
        self._flows: OrderedDict[_Key, _Flow] = OrderedDict()  # least recently active first
        # key -> (forget after (ns), each side's sequence number just past all it sent)
        self._closed: OrderedDict[_Key, tuple[int, dict[Endpoint, int | None]]] = OrderedDict()
        self._resetting: OrderedDict[_Key, _Flow] = OrderedDict()  # by time of their RST
        self._held_total = 0
        self._now = 0

    def feed(self, pkt: TcpPacket) -> list[FlowEvent]:
        self._now = max(self._now, pkt.ts_ns)
        self.counters.segments += 1
        events: list[FlowEvent] = []
        self._expire(events)
        src, dst = Endpoint(pkt.src, pkt.src_port), Endpoint(pkt.dst, pkt.dst_port)
        key = (src, dst) if (src.addr, src.port) <= (dst.addr, dst.port) else (dst, src)
        opening_syn = pkt.syn and not pkt.has_ack
        flow = self._flows.get(key)
        if flow is not None and opening_syn and flow.roles_firm and flow.client == src:
            base = flow.c2s.base
            if base is not None and (pkt.seq + 1) % (1 << 32) != base:
                self._close(flow, key, CloseReason.REUSED, pkt.ts_ns, events)
                flow = None
        if flow is None:
            late = key in self._closed and not opening_syn and not self._reuses(key, src, pkt)
            if late or (pkt.rst and not pkt.payload):
                self.counters.orphan_packets += 1
                return events
            self._closed.pop(key, None)
            flow = self._open(key, pkt, src, dst, events)
        self._flows.move_to_end(key)
        flow.last_ns = pkt.ts_ns
        flow.packets += 1
        self._segment(flow, key, pkt, src, events)
        if key in self._flows:
            self._sync(flow)
            self._enforce_limits(flow, events)
        return events

    def finish(self) -> list[FlowEvent]:
        """End of input: every open connection is closed (END_OF_INPUT), holes declared."""
        events: list[FlowEvent] = []
        for key, flow in list(self._flows.items()):
            self._close(flow, key, CloseReason.END_OF_INPUT, self._now, events)
        return events

    def _reuses(self, key: _Key, src: Endpoint, pkt: TcpPacket) -> bool:
        """A packet on the 5-tuple of a closed connection that its sender could not have sent
        in it (past all it sent, FIN included): a new connection whose SYN the capture shows
        later (the client reused its port at once, its ISN a little above the old one)."""
        end = self._closed[key][1].get(src)
        return end is not None and seq_diff(pkt.seq, end) > 0

    @property
    def open_flows(self) -> int:
        return len(self._flows)

    def _open(
        self, key: _Key, pkt: TcpPacket, src: Endpoint, dst: Endpoint, events: list[FlowEvent]
    ) -> _Flow:
        while len(self._flows) >= self.limits.max_flows:
            old_key, old = next(iter(self._flows.items()))
            self.counters.evicted_flows += 1
            self._close(old, old_key, CloseReason.EVICTED, self._now, events)
        if pkt.syn:
            client, server = (src, dst) if not pkt.has_ack else (dst, src)
        elif src.port != dst.port:
            client, server = (src, dst) if src.port > dst.port else (dst, src)
        else:
            client, server = src, dst
        flow = _Flow(client, server, pkt.ts_ns, pkt.ts_ns, roles_firm=False)
        self._flows[key] = flow
        self.counters.flows += 1
        self.counters.flows_without_syn += 1  # until _segment sees its SYN
        return flow

    def _segment(
        self, flow: _Flow, key: _Key, pkt: TcpPacket, src: Endpoint, events: list[FlowEvent]
    ) -> None:
        since = (flow.packets, pkt.ts_ns)
        if pkt.syn and not flow.emitted:
            self._handshake(flow, pkt, src, events)
        direction = _direction_of(flow, src)
        mine = flow.stream(direction)
        peer = flow.stream(_other(direction))
        data_seq = pkt.seq + 1 if pkt.syn else pkt.seq  # a SYN takes one sequence number
        if pkt.syn and not mine.anchored:
            self._count(mine.anchor(data_seq % (1 << 32)))
        if pkt.syn and pkt.has_ack and not peer.anchored:
            self._count(peer.anchor(pkt.ack))  # a SYN-ACK acknowledges the client's ISN + 1
        early = pkt.payload and pkt.has_ack and not (mine.anchored and peer.anchored)
        if early and len(flow.early_waits) < MAX_WAITS:
            flow.early_waits.append((src, data_seq, pkt.ack))
        if mine.anchored:
            if pkt.payload:
                insert = mine.insert(mine.offset(data_seq), pkt.payload, pkt.ts_ns)
                self._count(insert)
                if insert.new_bytes and pkt.has_ack and peer.anchored:
                    self._wait(mine, peer, data_seq, pkt.ack)
            if pkt.fin and mine.fin_off is None:
                fin_off = mine.offset(data_seq + len(pkt.payload))
                mine.set_fin(fin_off)
                mine.confirm(fin_off, since)  # a FIN says every byte before it was sent
        else:
            mine.hold(data_seq, pkt.payload, since)
            if pkt.fin:
                mine.pending_fin_seq = data_seq + len(pkt.payload)
        if pkt.has_ack and peer.anchored:
            peer.confirm(peer.offset(pkt.ack), since)
        if pkt.rst and flow.reset is None:
            if mine.anchored:  # like a FIN: every byte before it was sent
                mine.confirm(mine.offset(data_seq + len(pkt.payload)), since)
            flow.reset = (self.counters.segments, pkt.ts_ns)
            self._resetting[key] = flow
        delivered = -1
        while delivered != flow.c2s.next_off + flow.s2c.next_off:  # one side may free the other
            delivered = flow.c2s.next_off + flow.s2c.next_off
            for d in Direction:
                self._resolve(flow, d, pkt.ts_ns, events, force=False)
        if flow.c2s.finished and flow.s2c.finished:
            self._close(flow, key, CloseReason.FIN, pkt.ts_ns, events)

    def _handshake(
        self, flow: _Flow, pkt: TcpPacket, src: Endpoint, events: list[FlowEvent]
    ) -> None:
        """A SYN or SYN-ACK before anything of the connection was emitted: it settles the roles
        (the guess from the ports was wrong or right) and the connection's time. A SYN opens it
        at once; a SYN-ACK waits for its SYN, which a reordered capture may show a little later,
        until the first event of the connection (see `_announce`)."""
        if not flow.roles_firm:
            if (src == flow.client) == pkt.has_ack:
                flow.swap_roles()
            flow.roles_firm = True
        if not pkt.has_ack or not flow.syn_seen:
            flow.opened_ns = pkt.ts_ns
        if not flow.syn_seen:
            flow.syn_seen = True
            self.counters.flows_without_syn -= 1
        if not pkt.has_ack:
            self._announce(flow, events)

    def _announce(self, flow: _Flow, events: list[FlowEvent]) -> None:
        """Called before every event that carries the connection's id."""
        if not flow.emitted:
            flow.emitted = flow.roles_firm = True
            if flow.syn_seen:
                events.append(FlowOpened(flow.id, flow.opened_ns))

    def _resolve(
        self, flow: _Flow, direction: Direction, ts_ns: int, events: list[FlowEvent], force: bool
    ) -> None:
        """Deliver what is contiguous; declare the holes whose grace is over (all, if force)."""
        stream = flow.stream(direction)
        if not stream.anchored:
            if not stream.pending or not (force or self._grace_over(flow, stream.pending_since)):
                return
            self._count(stream.anchor(stream.earliest_pending_seq()))
        self._deliver(flow, direction, ts_ns, events, force)
        while stream.confirmed > stream.next_off and (
            force or self._grace_over(flow, stream.confirmed_since())
        ):
            first = stream.first_buffered()
            if first == stream.next_off:
                break  # no hole: the bytes there wait for the peer's
            if first is None and stream.fin_off is None and stream.confirmed - stream.next_off == 1:
                stream.cap_confirmed(stream.next_off)  # the ACK of an uncaptured FIN
                break
            end = stream.confirmed if first is None else min(first, stream.confirmed)
            self._gap(flow, direction, end, ts_ns, events, force)
        while force and stream.segments:
            self._gap(flow, direction, stream.segments[0][0], ts_ns, events, force)

    @staticmethod
    def _wait(mine: Stream, peer: Stream, data_seq: int, ack: int) -> None:
        acked = peer.offset(ack)
        if acked > peer.next_off:
            mine.wait_for_peer(mine.offset(data_seq), acked)

    def _file_early_waits(self, flow: _Flow) -> None:
        """The ACKs of segments held before anchoring confirm the peer's bytes too (from now:
        their grace starts when they could first be named)."""
        if flow.early_waits and flow.c2s.anchored and flow.s2c.anchored:
            since = (flow.packets, flow.last_ns)
            for sender, data_seq, ack in flow.early_waits:
                direction = _direction_of(flow, sender)
                peer = flow.stream(_other(direction))
                peer.confirm(peer.offset(ack), since)
                self._wait(flow.stream(direction), peer, data_seq, ack)
            flow.early_waits.clear()

    def _grace_over(self, flow: _Flow, since: tuple[int, int] | None) -> bool:
        if since is None:
            return False
        packets, ts_ns = since
        return (
            flow.packets - packets >= self.limits.reorder_grace_packets
            and flow.last_ns - ts_ns >= self.limits.reorder_grace_ns
        )

    def _gap(
        self,
        flow: _Flow,
        direction: Direction,
        end: int,
        ts_ns: int,
        events: list[FlowEvent],
        force: bool = False,
    ) -> None:
        stream = flow.stream(direction)
        start = stream.next_off
        gap = stream.skip_to(end)
        self.counters.gaps += 1
        self.counters.gap_bytes += gap
        self._announce(flow, events)
        events.append(DataPiece(flow.id, direction, ts_ns, stream.seq_at(start), start, b"", gap))
        self._deliver(flow, direction, ts_ns, events, force)

    def _deliver(
        self,
        flow: _Flow,
        direction: Direction,
        ts_ns: int,
        events: list[FlowEvent],
        force: bool = False,
    ) -> None:
        """Deliver the contiguous bytes; unless force, only those sent before anything of the
        peer's that is not delivered yet."""
        self._file_early_waits(flow)
        stream = flow.stream(direction)
        until = None if force else stream.deliverable_until(flow.stream(_other(direction)))
        for off, data, readable_ns in stream.take(until):
            self.counters.bytes += len(data)
            self._announce(flow, events)
            events.append(DataPiece(flow.id, direction, readable_ns, stream.seq_at(off), off, data))

    def _count(self, insert: Insert) -> None:
        if insert.dup_bytes:
            self.counters.retransmissions += 1
            self.counters.retransmitted_bytes += insert.dup_bytes
            self.counters.overlap_conflicts += insert.conflict_bytes
        if insert.ahead:
            self.counters.out_of_order += 1

    def _sync(self, flow: _Flow) -> None:
        self._held_total += flow.held - flow.accounted
        flow.accounted = flow.held

    def _enforce_limits(self, flow: _Flow, events: list[FlowEvent]) -> None:
        limits = self.limits
        while flow.held and (
            flow.held > limits.max_held_bytes_per_flow
            or flow.c2s.held_segments + flow.s2c.held_segments > limits.max_held_segments_per_flow
            or self._held_total > limits.max_held_bytes_total
        ):
            self._release_first_hole(flow, events)
            self._sync(flow)
        while self._held_total > limits.max_held_bytes_total and self._flows:
            old_key, old = next(iter(self._flows.items()))
            self.counters.evicted_flows += 1
            self._close(old, old_key, CloseReason.EVICTED, self._now, events)

    def _release_first_hole(self, flow: _Flow, events: list[FlowEvent]) -> None:
        direction = max(Direction, key=lambda d: flow.stream(d).held)
        stream = flow.stream(direction)
        if not stream.anchored:
            self._count(stream.anchor(stream.earliest_pending_seq()))
        self._deliver(flow, direction, flow.last_ns, events, force=True)
        if stream.segments:
            self.counters.limit_gaps += 1
            self._gap(flow, direction, stream.segments[0][0], flow.last_ns, events)

    def _close(
        self, flow: _Flow, key: _Key, reason: CloseReason, ts_ns: int, events: list[FlowEvent]
    ) -> None:
        if flow.reset is not None and reason is not CloseReason.FIN:
            # Its RST's time, or that of a late packet it waited for.
            reason, ts_ns = CloseReason.RST, max(flow.reset[1], flow.last_ns)
        for d in Direction:
            self._resolve(flow, d, ts_ns, events, force=True)
        self._sync(flow)
        del self._flows[key]
        self._resetting.pop(key, None)
        self._announce(flow, events)
        events.append(FlowClosed(flow.id, ts_ns, reason))
        if reason is not CloseReason.END_OF_INPUT:
            ends = {flow.client: _end_seq(flow.c2s), flow.server: _end_seq(flow.s2c)}
            self._closed[key] = (ts_ns + self.limits.closed_memory_ns, ends)
            self._closed.move_to_end(key)
            while len(self._closed) > self.limits.max_closed_remembered:
                self._closed.popitem(last=False)

    def _expire(self, events: list[FlowEvent]) -> None:
        limits = self.limits
        while self._resetting:
            key, flow = next(iter(self._resetting.items()))
            assert flow.reset is not None
            packets, ts_ns = flow.reset
            if (
                self.counters.segments - packets < limits.reset_grace_packets
                and self._now - ts_ns < limits.reorder_grace_ns
            ):
                break
            self._close(flow, key, CloseReason.RST, flow.last_ns, events)
        idle = limits.idle_timeout_ns
        while self._flows:
            key, flow = next(iter(self._flows.items()))
            if flow.last_ns + idle > self._now:
                break
            self.counters.idle_closed += 1
            self._close(flow, key, CloseReason.IDLE, flow.last_ns + idle, events)
        while self._closed:
            key, (forget_at, _ends) = next(iter(self._closed.items()))
            if forget_at > self._now:
                break
            del self._closed[key]


def _end_seq(stream: Stream) -> int | None:
    """The sequence number just past what a closed side sent (its FIN included)."""
    if not stream.anchored:
        return None
    end = stream.seq_at(stream.next_off)
    return (end + 1) % (1 << 32) if stream.fin_off is not None else end


def _direction_of(flow: _Flow, sender: Endpoint) -> Direction:
    return Direction.CLIENT_TO_SERVER if sender == flow.client else Direction.SERVER_TO_CLIENT


def _other(direction: Direction) -> Direction:
    if direction is Direction.CLIENT_TO_SERVER:
        return Direction.SERVER_TO_CLIENT
    return Direction.CLIENT_TO_SERVER
