"""TCP reassembly: order, duplicates, overlaps, wraparound, gaps, roles, lifecycle, limits."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict, deque
from dataclasses import dataclass, replace
from typing import TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_collector.packets import frames
from zerotrace_collector.packets.analysis import PcapAnalysis
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.decode import TcpPacket
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET
from zerotrace_collector.packets.pcap import pcap_bytes
from zerotrace_collector.packets.tcp import ACK, FIN, PSH, RST, SYN
from zerotrace_collector.packets.tcp_reassembly import (
    CloseReason,
    DataPiece,
    Direction,
    Endpoint,
    FlowClosed,
    FlowEvent,
    FlowOpened,
    ReassemblyLimits,
    TcpReassembler,
)

C = Endpoint("10.0.0.1", 40000)
S = Endpoint("10.0.0.2", 8080)
C2S, S2C = Direction.CLIENT_TO_SERVER, Direction.SERVER_TO_CLIENT
MOD = 1 << 32
T = TypeVar("T")


def pkt(
    src: Endpoint,
    dst: Endpoint,
    seq: int,
    ack: int = 0,
    flags: int = ACK,
    payload: bytes = b"",
    ts: int = 0,
) -> TcpPacket:
    return TcpPacket(
        ts, src.addr, src.port, dst.addr, dst.port, seq % MOD, ack % MOD, flags, 65535, (), payload
    )


class Conversation:
    """Feeds packets with increasing timestamps and collects what comes out."""

    def __init__(self, limits: ReassemblyLimits | None = None) -> None:
        self.r = TcpReassembler(limits) if limits else TcpReassembler()
        self.events: list[FlowEvent] = []
        self.ts = 1_000

    def feed(self, p: TcpPacket) -> list[FlowEvent]:
        self.ts += 1_000
        out = self.r.feed(replace(p, ts_ns=p.ts_ns or self.ts))
        self.events += out
        return out

    def finish(self) -> list[FlowEvent]:
        out = self.r.finish()
        self.events += out
        return out

    def pieces(self, direction: Direction) -> list[DataPiece]:
        return [e for e in self.events if isinstance(e, DataPiece) and e.direction is direction]

    def stream(self, direction: Direction) -> bytes:
        return b"".join(p.data for p in self.pieces(direction))

    def closes(self) -> list[FlowClosed]:
        return [e for e in self.events if isinstance(e, FlowClosed)]


def handshake(conv: Conversation, c_isn: int, s_isn: int) -> None:
    conv.feed(pkt(C, S, c_isn, 0, SYN))
    conv.feed(pkt(S, C, s_isn, c_isn + 1, SYN | ACK))
    conv.feed(pkt(C, S, c_isn + 1, s_isn + 1, ACK))


def segments_of(data: bytes, cuts: list[int]) -> list[tuple[int, bytes]]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [(a, data[a:b]) for a, b in itertools.pairwise(points) if b > a]


isns = st.one_of(st.integers(0, MOD - 1), st.integers(MOD - 3000, MOD - 1))


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=3000),
    cuts=st.lists(st.integers(0, 3000), max_size=40),
    extra=st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 400)), max_size=15),
    isn=isns,
    order=st.randoms(use_true_random=False),
)
def test_shuffled_duplicated_overlapping_segments_reassemble_to_the_stream(
    data: bytes,
    cuts: list[int],
    extra: list[tuple[int, int]],
    isn: int,
    order: object,
) -> None:
    segments = segments_of(data, cuts)
    # Retransmissions and overlaps: arbitrary ranges of the same stream, same bytes.
    segments += [(a % len(data), data[a % len(data) : a % len(data) + n]) for a, n in extra]
    order.shuffle(segments)  # type: ignore[attr-defined]
    conv = Conversation()
    handshake(conv, isn, 7)
    received = bytearray(len(data))
    have = [False] * len(data)
    for off, chunk in segments:
        conv.feed(pkt(C, S, isn + 1 + off, 8, ACK | PSH, chunk))
        for i in range(off, off + len(chunk)):
            received[i], have[i] = data[i], True
        # The server acknowledges what it has contiguously, as a real receiver does.
        contiguous = have.index(False) if False in have else len(data)
        conv.feed(pkt(S, C, 8, isn + 1 + contiguous, ACK))
    assert conv.stream(C2S) == data
    assert conv.r.counters.gaps == 0
    assert conv.r.counters.bytes == len(data)
    pieces = conv.pieces(C2S)
    assert [p.offset for p in pieces] == sorted(p.offset for p in pieces)
    assert all(p.seq == (isn + 1 + p.offset) % MOD for p in pieces)
    if len(segments) > len(segments_of(data, cuts)):
        assert conv.r.counters.retransmissions > 0


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=3, max_size=3000),
    cuts=st.lists(st.integers(1, 2999), min_size=2, max_size=30),
    pick=st.integers(0, 1000),
    isn=isns,
    shuffle=st.booleans(),
    order=st.randoms(use_true_random=False),
)
def test_a_dropped_segment_becomes_one_gap_at_its_offset_and_the_rest_still_comes_out(
    data: bytes, cuts: list[int], pick: int, isn: int, shuffle: bool, order: object
) -> None:
    segments = segments_of(data, cuts)
    dropped_at, dropped = segments.pop(pick % len(segments))
    if shuffle:
        order.shuffle(segments)  # type: ignore[attr-defined]
    conv = Conversation()
    handshake(conv, isn, 7)
    for off, chunk in segments:
        conv.feed(pkt(C, S, isn + 1 + off, 8, ACK | PSH, chunk))
    conv.feed(pkt(C, S, isn + 1 + len(data), 8, ACK | FIN))
    # The server got everything (the capture missed one segment) and says so, FIN included;
    # after the reorder grace the hole is declared, before the end of input.
    later = conv.ts + ReassemblyLimits().reorder_grace_ns
    for _ in range(ReassemblyLimits().reorder_grace_packets + 1):
        conv.feed(pkt(S, C, 8, isn + 2 + len(data), ACK, ts=later))
    gaps = [p for p in conv.pieces(C2S) if p.gap]
    assert [(g.offset, g.gap, g.seq) for g in gaps] == [
        (dropped_at, len(dropped), (isn + 1 + dropped_at) % MOD)
    ]
    assert conv.stream(C2S) == data[:dropped_at] + data[dropped_at + len(dropped) :]
    assert all(not p.data for p in gaps)
    # Everything after the gap comes right after it, in order.
    pieces = conv.pieces(C2S)
    assert [p.offset for p in pieces] == sorted(p.offset for p in pieces)
    assert conv.r.counters.gap_bytes == len(dropped)


def test_a_dropped_segment_with_no_ack_is_declared_at_the_end_of_input() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 101, 8, ACK, b"aaaa"))
    conv.feed(pkt(C, S, 109, 8, ACK, b"cccc"))
    assert conv.stream(C2S) == b"aaaa"
    conv.finish()
    assert [(p.offset, p.data, p.gap) for p in conv.pieces(C2S)] == [
        (0, b"aaaa", 0),
        (4, b"", 4),
        (8, b"cccc", 0),
    ]
    assert conv.closes()[0].reason is CloseReason.END_OF_INPUT


def test_an_ack_before_its_data_within_the_grace_makes_no_gap() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(S, C, 8, 109, ACK))  # the capture shows the ACK first
    conv.feed(pkt(C, S, 105, 8, ACK, b"bbbb"))
    conv.feed(pkt(C, S, 101, 8, ACK, b"aaaa"))
    for _ in range(20):
        conv.feed(pkt(S, C, 8, 109, ACK))
    assert conv.stream(C2S) == b"aaaabbbb" and conv.r.counters.gaps == 0
    assert conv.r.counters.out_of_order == 1


def test_piece_time_is_that_of_the_packet_that_made_the_bytes_contiguous() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 105, 8, ACK, b"bbbb", ts=50_000))
    conv.feed(pkt(C, S, 101, 8, ACK, b"aaaa", ts=60_000))
    [piece] = conv.pieces(C2S)
    assert piece.data == b"aaaabbbb" and piece.ts_ns == 60_000


def test_sequence_numbers_wrap_around() -> None:
    conv = Conversation()
    isn = MOD - 6
    handshake(conv, isn, MOD - 1)
    conv.feed(pkt(C, S, isn + 1, 0, ACK, b"0123456789"))  # crosses 2**32
    conv.feed(pkt(C, S, isn + 11, 0, ACK, b"abc"))
    conv.feed(pkt(S, C, 0, isn + 14, ACK, b"xyz"))  # server ISN 2**32-1: data starts at 0
    assert conv.stream(C2S) == b"0123456789abc"
    assert conv.stream(S2C) == b"xyz"
    assert [p.seq for p in conv.pieces(C2S)] == [MOD - 5, 5]
    assert conv.pieces(S2C)[0].seq == 0


def test_overlaps_keep_the_first_copy_and_count_the_conflicting_bytes() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 105, 8, ACK, b"BBBB"))
    conv.feed(pkt(C, S, 103, 8, ACK, b"xxXXYY"))  # overlaps 2 buffered bytes, differently
    conv.feed(pkt(C, S, 101, 8, ACK, b"aa"))
    assert conv.stream(C2S) == b"aaxxBBBB"
    c = conv.r.counters
    assert c.retransmissions == 1 and c.retransmitted_bytes == 4 and c.overlap_conflicts == 4


def test_fin_from_both_sides_closes_after_the_last_byte_and_late_packets_are_ignored() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 105, 8, ACK | FIN, b"tail"))  # FIN before the bytes before it
    conv.feed(pkt(S, C, 8, 110, ACK | FIN, b"bye"))
    assert not conv.closes()
    conv.feed(pkt(C, S, 101, 12, ACK, b"head"))
    [close] = conv.closes()
    assert close.reason is CloseReason.FIN and close.ts_ns == conv.ts
    conv.feed(pkt(C, S, 110, 12, ACK))  # the last ACK
    assert conv.r.counters.orphan_packets == 1 and conv.r.open_flows == 0
    assert conv.stream(C2S) == b"headtail" and conv.stream(S2C) == b"bye"
    kinds = [type(e).__name__ for e in conv.events]
    assert kinds[0] == "FlowOpened" and kinds[-1] == "FlowClosed"


def let_the_reset_grace_pass(conv: Conversation) -> None:
    """Bare ACKs of another connection: a RST waits for late bytes this many packets."""
    other = Endpoint("10.0.0.9", 50999)
    for _ in range(ReassemblyLimits().reset_grace_packets):
        conv.feed(pkt(other, S, 1, 1, ACK))


def test_rst_closes_after_the_grace_declaring_holes() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 101, 8, ACK, b"ab"))
    conv.feed(pkt(C, S, 105, 8, ACK, b"ef"))
    conv.feed(pkt(S, C, 8, 103, RST | ACK))
    assert not conv.closes()
    let_the_reset_grace_pass(conv)
    assert [(p.data, p.gap) for p in conv.pieces(C2S)] == [(b"ab", 0), (b"", 2), (b"ef", 0)]
    assert conv.closes()[0].reason is CloseReason.RST


def test_a_fin_ack_past_the_last_byte_is_not_a_gap_when_the_fin_was_missed() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 101, 8, ACK, b"abcd"))
    conv.feed(pkt(S, C, 8, 106, ACK))  # acknowledges 4 bytes and a FIN we did not capture
    conv.finish()
    assert conv.r.counters.gaps == 0


def test_idle_connections_close_by_packet_time() -> None:
    limits = ReassemblyLimits(idle_timeout_ns=1_000_000)
    conv = Conversation(limits)
    conv.feed(pkt(C, S, 100, 0, SYN, ts=10_000))
    other = Endpoint("10.0.0.3", 50000)
    out = conv.feed(pkt(other, S, 1, 0, SYN, ts=10_000 + 2_000_000))
    assert isinstance(out[0], FlowClosed) and out[0].reason is CloseReason.IDLE
    assert out[0].ts_ns == 10_000 + 1_000_000
    assert isinstance(out[1], FlowOpened) and conv.r.counters.idle_closed == 1


def test_the_client_is_the_syn_sender() -> None:
    conv = Conversation()
    server = Endpoint("10.0.0.9", 60000)  # the server on the higher port
    conv.feed(pkt(C, server, 100, 0, SYN))
    conv.feed(pkt(server, C, 7, 101, SYN | ACK))
    conv.feed(pkt(server, C, 8, 101, ACK, b"banner"))
    opened = conv.events[0]
    assert isinstance(opened, FlowOpened) and opened.flow.client == C
    assert conv.stream(S2C) == b"banner"


def test_the_client_is_the_syn_ack_receiver_when_the_syn_was_missed() -> None:
    conv = Conversation()
    server = Endpoint("10.0.0.9", 60000)
    conv.feed(pkt(server, C, 7, 101, SYN | ACK))
    conv.feed(pkt(C, server, 101, 8, ACK, b"hi"))
    opened = conv.events[0]
    assert isinstance(opened, FlowOpened) and opened.flow.client == C
    assert conv.stream(C2S) == b"hi"


def test_without_a_handshake_the_lower_port_is_the_server() -> None:
    conv = Conversation()
    conv.feed(pkt(S, C, 5000, 900, ACK, b"response"))  # first packet seen: server -> client
    conv.feed(pkt(C, S, 900, 5008, ACK, b"next request"))
    conv.finish()
    data = [e for e in conv.events if isinstance(e, DataPiece)]
    assert {e.flow.client for e in data} == {C}
    assert conv.stream(S2C) == b"response" and conv.stream(C2S) == b"next request"
    assert not [e for e in conv.events if isinstance(e, FlowOpened)]
    assert conv.r.counters.flows_without_syn == 1


def test_mid_stream_segments_out_of_order_anchor_at_the_earliest() -> None:
    conv = Conversation()
    conv.feed(pkt(C, S, 2006, 1, ACK, b"world"))
    conv.feed(pkt(C, S, 2000, 1, ACK, b"hel"))
    conv.feed(pkt(C, S, 2002, 1, ACK, b"llo "))  # partly a retransmission
    conv.finish()
    assert conv.stream(C2S) == b"hello world"
    assert conv.pieces(C2S)[0].seq == 2000


def test_a_late_syn_corrects_the_port_guess() -> None:
    conv = Conversation()
    client, server = Endpoint("10.0.0.1", 1000), Endpoint("10.0.0.2", 5000)
    conv.feed(pkt(client, server, 101, 8, ACK, b"req"))  # guess: 1000 is the server
    conv.feed(pkt(client, server, 100, 0, SYN))  # a reordered capture: the SYN comes late
    conv.finish()
    opened = [e for e in conv.events if isinstance(e, FlowOpened)]
    assert opened[0].flow.client == client
    assert conv.stream(C2S) == b"req"


def test_a_syn_with_a_new_isn_on_the_same_ports_starts_a_new_connection() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 101, 8, ACK, b"one"))
    conv.feed(pkt(C, S, 90_000, 0, SYN))
    conv.feed(pkt(S, C, 500, 90_001, SYN | ACK))
    conv.feed(pkt(C, S, 90_001, 501, ACK, b"two"))
    closes = conv.closes()
    assert [c.reason for c in closes] == [CloseReason.REUSED]
    flows = {p.flow for p in conv.pieces(C2S)}
    assert len(flows) == 2 and conv.stream(C2S) == b"onetwo"


def test_the_per_flow_buffer_limit_declares_the_first_hole() -> None:
    conv = Conversation(ReassemblyLimits(max_held_bytes_per_flow=10))
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 111, 8, ACK, b"0123456789"))  # a 10-byte hole, 10 bytes held
    assert not conv.pieces(C2S)
    conv.feed(pkt(C, S, 121, 8, ACK, b"x"))  # 11 bytes held: over the limit
    # Each segment keeps its own packet's time: two pieces after the gap.
    assert [(p.gap, p.data) for p in conv.pieces(C2S)] == [(10, b""), (0, b"0123456789"), (0, b"x")]
    assert conv.r.counters.limit_gaps == 1


def test_the_flow_limit_evicts_the_least_recently_active() -> None:
    conv = Conversation(ReassemblyLimits(max_flows=2))
    ends = [Endpoint("10.0.0.1", 40000 + i) for i in range(3)]
    for end in ends:
        conv.feed(pkt(end, S, 1, 0, SYN))
    [closed] = conv.closes()
    assert closed.reason is CloseReason.EVICTED and closed.flow.client == ends[0]
    assert conv.r.open_flows == 2 and conv.r.counters.evicted_flows == 1


def test_the_total_buffer_limit_releases_holes() -> None:
    conv = Conversation(ReassemblyLimits(max_held_bytes_total=8))
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 111, 8, ACK, b"123456789"))
    assert [p.gap for p in conv.pieces(C2S)] == [10, 0]


def test_a_syn_with_data_delivers_it() -> None:
    conv = Conversation()
    conv.feed(pkt(C, S, 100, 0, SYN, b"fast open"))
    assert conv.stream(C2S) == b"fast open"


def test_acks_that_keep_overtaking_their_data_make_no_gap() -> None:
    # Each ACK shows up two packets before the data it acknowledges, so some hole is always
    # acknowledged: each hole's grace runs from its own ACK, not from the first hole's.
    conv = Conversation()
    handshake(conv, 100, 7)
    data = bytes(range(65, 91)) * 8
    segments = segments_of(data, list(range(4, len(data), 4)))
    for i, (off, chunk) in enumerate(segments):
        ahead = segments[min(i + 1, len(segments) - 1)]
        conv.feed(pkt(S, C, 8, 101 + ahead[0] + len(ahead[1])))
        conv.feed(pkt(C, S, 101 + off, 8, ACK | PSH, chunk))
    assert conv.r.counters.gaps == 0 and conv.stream(C2S) == data


def test_a_rst_that_overtook_the_bytes_it_acknowledges_waits_for_them() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(S, C, 8, 101, ACK, b"data: 1"))
    conv.feed(pkt(C, S, 101, 20, RST | ACK))  # acknowledges 5 bytes not captured yet
    assert not conv.closes()
    conv.feed(pkt(S, C, 15, 101, ACK | PSH, b"0\r\n\r\n"))
    late_ns = conv.ts
    let_the_reset_grace_pass(conv)
    [close] = conv.closes()
    assert close.reason is CloseReason.RST and close.ts_ns == late_ns
    assert conv.stream(S2C) == b"data: 10\r\n\r\n" and conv.r.counters.gaps == 0


def test_a_rst_that_overtook_its_own_sender_s_bytes_waits_for_them() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 101, 8, ACK, b"ab"))
    conv.feed(pkt(C, S, 105, 8, RST | ACK))  # every byte before its sequence number was sent
    conv.feed(pkt(C, S, 103, 8, ACK, b"cd"))
    let_the_reset_grace_pass(conv)
    assert conv.stream(C2S) == b"abcd" and conv.closes()[0].reason is CloseReason.RST


def test_a_rst_waits_for_the_peer_s_bytes_in_flight_that_it_overtook() -> None:
    # The client resets right after reading; the server's last chunk, which no ACK confirms,
    # shows up in the capture after the RST.
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(S, C, 8, 101, ACK, b"data: 1"))
    conv.feed(pkt(C, S, 101, 15, RST | ACK))
    conv.feed(pkt(S, C, 15, 101, ACK | PSH, b"0\r\n\r\n"))
    let_the_reset_grace_pass(conv)
    assert conv.stream(S2C) == b"data: 10\r\n\r\n" and conv.r.counters.gaps == 0
    assert conv.closes()[0].reason is CloseReason.RST


def test_a_hole_a_rst_acknowledged_becomes_a_gap_after_the_grace_of_the_capture() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(S, C, 8, 101, ACK, b"ab"))
    conv.feed(pkt(C, S, 101, 14, RST | ACK))  # 4 bytes the capture missed
    grace = ReassemblyLimits().reset_grace_packets
    other = Endpoint("10.0.0.3", 50000)
    for i in range(grace - 1):  # packets of another connection count
        conv.feed(pkt(other, S, 1 + i, 1, ACK, b"x"))
    assert not conv.closes()
    conv.feed(pkt(other, S, grace, 1, ACK, b"x"))
    [close] = conv.closes()
    assert close.reason is CloseReason.RST and close.flow.client == C
    assert [(p.data, p.gap) for p in conv.pieces(S2C)] == [(b"ab", 0), (b"", 4)]


def test_a_syn_ack_before_its_syn_names_the_connection_by_the_syn() -> None:
    conv = Conversation()
    conv.feed(pkt(S, C, 7, 101, SYN | ACK, ts=2_000))
    conv.feed(pkt(C, S, 100, 0, SYN, ts=1_000))
    conv.feed(pkt(C, S, 101, 8, ACK, b"hi", ts=3_000))
    opened, piece = conv.events
    assert isinstance(opened, FlowOpened) and opened.ts_ns == opened.flow.opened_ns == 1_000
    assert isinstance(piece, DataPiece) and piece.flow == opened.flow
    assert conv.r.counters.flows_without_syn == 0


# A loopback capture of HTTP/1.1 clients: keep-alive connections, interleaved, whose chunked
# (server-sent events) responses the client acknowledges, closed by FINs or by a RST that
# acknowledges the last chunk, as an impatient client sends it.


def http_connection(rng: random.Random, port: int, ending: str) -> list[TcpPacket]:
    """One connection in capture order (timestamps are set by `interleave`)."""
    cl, sv = Endpoint("127.0.0.1", port), Endpoint("127.0.0.1", 8080)
    c, s = rng.randrange(MOD), rng.randrange(MOD)
    out = [pkt(cl, sv, c, 0, SYN), pkt(sv, cl, s, c + 1, SYN | ACK), pkt(cl, sv, c + 1, s + 1)]
    c, s = c + 1, s + 1
    for _ in range(rng.randint(1, 3)):
        request = b"GET /v1/events HTTP/1.1\r\nx: " + b"x" * rng.randint(0, 300) + b"\r\n\r\n"
        out += [pkt(cl, sv, c, s, ACK | PSH, request), pkt(sv, cl, s, c + len(request))]
        c += len(request)
        chunks = [b"data: %d\n\n" % i * rng.randint(1, 30) for i in range(rng.randint(2, 6))]
        for chunk in [*chunks, b"0\r\n\r\n"]:
            out.append(pkt(sv, cl, s, c, ACK | PSH, chunk))
            s += len(chunk)
            if rng.random() < 0.7:
                out.append(pkt(cl, sv, c, s))
    if ending == "client_rst":
        out.append(pkt(cl, sv, c, s, RST | ACK))
    elif ending == "server_rst":
        out.append(pkt(sv, cl, s, c, RST | ACK))
    else:
        out += [pkt(cl, sv, c, s, ACK | FIN), pkt(sv, cl, s, c + 1, ACK | FIN)]
        out.append(pkt(cl, sv, c + 1, s + 1))
    return out


def interleave(rng: random.Random, connections: list[list[TcpPacket]]) -> list[TcpPacket]:
    queues = [deque(c) for c in connections]
    out = []
    while queues:
        queue = rng.choice(queues)
        out.append(queue.popleft())
        if not queue:
            queues.remove(queue)
    return [replace(p, ts_ns=1_000_000 + 1_000 * i) for i, p in enumerate(out)]


def reorder(packets: list[T], rng: random.Random, block: int, dup_every: int) -> list[T]:
    """Each block of `block` packets shuffled, then every `dup_every`-th packet written twice."""
    shuffled: list[T] = []
    for start in range(0, len(packets), block):
        chunk = packets[start : start + block]
        rng.shuffle(chunk)
        shuffled += chunk
    return [p for i, p in enumerate(shuffled) for _ in range(2 if i % dup_every == 0 else 1)]


@dataclass
class Outcome:
    gaps: int
    streams: dict[tuple[Endpoint, Direction], bytes]  # by client and direction
    closes: dict[Endpoint, CloseReason]  # by client


def reassemble(packets: list[TcpPacket]) -> Outcome:
    r = TcpReassembler()
    events = [e for p in packets for e in r.feed(p)] + r.finish()
    streams: dict[tuple[Endpoint, Direction], bytes] = defaultdict(bytes)
    for e in events:
        if isinstance(e, DataPiece):
            streams[e.flow.client, e.direction] += e.data
    closes = {e.flow.client: e.reason for e in events if isinstance(e, FlowClosed)}
    return Outcome(r.counters.gaps, dict(streams), closes)


@settings(max_examples=60, deadline=None)
@given(
    endings=st.lists(st.sampled_from(["fin", "client_rst", "server_rst"]), min_size=1, max_size=6),
    rng=st.randoms(use_true_random=False),
)
def test_interleaved_connections_reordered_in_blocks_of_8_with_duplicates_lose_nothing(
    endings: list[str], rng: random.Random
) -> None:
    connections = [http_connection(rng, 40000 + i, end) for i, end in enumerate(endings)]
    capture = interleave(rng, connections)
    want = reassemble(capture)
    got = reassemble(reorder(capture, rng, block=8, dup_every=10))
    assert want.gaps == got.gaps == 0
    assert got.streams == want.streams and got.closes == want.closes


def test_a_reordered_capture_file_of_many_connections_has_no_gap() -> None:
    # The shape of a real capture that used to show false gaps: 60 connections, most of them
    # reset by the client right after the last chunk, through frames, pcap and the analysis.
    rng = random.Random(23)
    ends = ["client_rst"] * 4 + ["fin", "server_rst"]
    capture = interleave(rng, [http_connection(rng, 40000 + i, ends[i % 6]) for i in range(60)])
    packets = []
    for p in capture:
        f = frames.tcp_frame(p.src, p.src_port, p.dst, p.dst_port, p.seq, p.ack, p.flags, p.payload)
        packets.append(CapturedPacket(p.ts_ns, LINKTYPE_ETHERNET, f, len(f)))

    def analyse(packets: list[CapturedPacket]) -> tuple[dict[str, int], dict[object, bytes]]:
        analysis = PcapAnalysis("n")
        streams: dict[object, bytes] = defaultdict(bytes)
        for _, record in analysis.records(pcap_bytes(packets, LINKTYPE_ETHERNET)):
            if "payload" in record:
                streams[record["local_port"], record["direction"]] += record["payload"]
        return analysis.summary(), dict(streams)

    want_summary, want = analyse(packets)
    assert want_summary["gaps"] == 0 and want_summary["flows"] == 60
    for block, seed in [(4, 1), (8, 23), (8, 2)]:
        summary, got = analyse(reorder(packets, random.Random(seed), block, dup_every=10))
        assert summary["gaps"] == 0 and summary["bytes"] == want_summary["bytes"]
        assert got == want


def test_a_response_waits_for_the_late_segment_of_its_request() -> None:
    # The capture shows the server's answer (which acknowledges the whole request) before the
    # request's last segment: the answer is delivered after it, not before.
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 101, 8, ACK, b"GET / HT"))
    conv.feed(pkt(S, C, 8, 115, ACK | PSH, b"HTTP/1.1 200"))  # acknowledges 14 request bytes
    assert conv.stream(S2C) == b""
    conv.feed(pkt(C, S, 109, 8, ACK | PSH, b"TP/1.1"))
    order = [(e.direction, e.data) for e in conv.events if isinstance(e, DataPiece)]
    assert order == [(C2S, b"GET / HT"), (C2S, b"TP/1.1"), (S2C, b"HTTP/1.1 200")]
    assert conv.r.counters.gaps == 0


def test_a_response_whose_request_bytes_never_come_goes_on_after_the_grace() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 101, 8, ACK, b"GET / HT"))
    conv.feed(pkt(S, C, 8, 115, ACK | PSH, b"HTTP/1.1 200"))  # 6 request bytes never captured
    limits = ReassemblyLimits()
    for i in range(limits.reorder_grace_packets):
        conv.feed(pkt(S, C, 20 + i, 115, ACK, b"x", ts=conv.ts + limits.reorder_grace_ns))
    assert conv.stream(S2C).startswith(b"HTTP/1.1 200x")
    assert [(p.data, p.gap) for p in conv.pieces(C2S)] == [(b"GET / HT", 0), (b"", 6)]


def test_bytes_keep_their_own_time_unless_a_later_packet_before_them_completes_them() -> None:
    conv = Conversation()
    handshake(conv, 100, 7)
    # A reordered capture: the late packet carries its true, older time.
    conv.feed(pkt(C, S, 103, 8, ACK, b"cd", ts=50_000))
    conv.feed(pkt(C, S, 101, 8, ACK, b"ab", ts=40_000))
    # A retransmission (newer time) fills a hole: what follows is readable only then.
    conv.feed(pkt(C, S, 107, 8, ACK, b"gh", ts=60_000))
    conv.feed(pkt(C, S, 105, 8, ACK, b"ef", ts=90_000))
    assert [(p.data, p.ts_ns) for p in conv.pieces(C2S)] == [
        (b"ab", 40_000), (b"cd", 50_000), (b"efgh", 90_000)
    ]  # fmt: skip


def test_a_new_connection_on_a_closed_5_tuple_whose_data_comes_before_its_syn() -> None:
    # The client reuses its port at once; in the capture the new connection's first segment
    # overtakes its SYN. It is not a late packet of the old connection: it lies past its FIN.
    conv = Conversation()
    handshake(conv, 100, 7)
    conv.feed(pkt(C, S, 101, 8, ACK | PSH, b"old"))
    conv.feed(pkt(C, S, 104, 8, ACK | FIN))
    conv.feed(pkt(S, C, 8, 105, ACK | FIN))
    conv.feed(pkt(C, S, 105, 9, ACK))
    assert [c.reason for c in conv.closes()] == [CloseReason.FIN]
    conv.feed(pkt(C, S, 105, 9, ACK))  # a late ACK of the old one: still ignored
    conv.feed(pkt(C, S, 6001, 901, ACK | PSH, b"new request"))
    conv.feed(pkt(C, S, 6000, 0, SYN))
    conv.feed(pkt(S, C, 900, 6001, SYN | ACK))
    conv.finish()
    assert conv.stream(C2S) == b"oldnew request" and conv.r.counters.gaps == 0
    assert conv.r.counters.orphan_packets == 2  # the old connection's last two ACKs
