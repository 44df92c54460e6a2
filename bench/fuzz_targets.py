"""The fuzz targets: each parser of untrusted bytes behind one `feed(data)`, with its contract
checked. Pure; `bench.fuzz` runs them over mutated inputs, `tests/unit/test_fuzz.py` over a
short seed run.

What a crash is: any exception out of `feed` (the targets catch only the outcome a parser's
docstring names for bad input: `MalformedEvent` from the socket decoder, `PoisonInput` from
the Avro codec and `calls_of_batch`; every other parser here never raises on input), and a
broken promise (`ContractBroken`): a redacted payload of another length, a buffer past its
documented cap, a table past its limit, a derived record its Avro schema refuses.

What growth is: the parsers that live as long as a connection or a capture (the HTTP/1
parsers, the SSE decoder, a response analyzer, the correlator, the TCP reassembler, the pcap
analysis, the redactor, the codec) are fed every input of the run through one instance, and
`state()` is what is measured (`bench.fuzz_retained`); `bound()` is what their documented
limits allow, worked out per target below. Readers of a whole input (pcap, pcapng, a frame, a
socket record) keep nothing between inputs: `state()` is None.

Several targets read a control byte first (see `bench.fuzz_corpus`) so that metadata (a
direction, a connection, a link type, a time jump) is mutated along with the bytes. Their
other choices (split points, when to close) come from the input's bytes, never from a
random source of their own, so a run is the same for the same inputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bench.fuzz_base import ENTRY_BYTES, MS, KiB, Target, check, pieces
from bench.fuzz_corpus import CORPORA, avro_corpus
from bench.fuzz_protocols import PROTOCOL_CORPORA, PROTOCOL_TARGETS
from bench.fuzz_retained import retained_bytes
from bench.fuzz_script import unscript
from tests.unit.http_wire import close, sock
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.errors import PoisonInput
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_collector.errors import MalformedEvent
from zerotrace_collector.packets.analysis import PcapAnalysis
from zerotrace_collector.packets.capture_file import read_capture
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.decode import TcpPacket, decode_tcp
from zerotrace_collector.packets.flows_to_records import SOCKET_DATA, Record
from zerotrace_collector.packets.link import SUPPORTED_LINKTYPES
from zerotrace_collector.packets.tcp_reassembly import (
    DataPiece,
    FlowEvent,
    ReassemblyLimits,
    TcpReassembler,
)
from zerotrace_collector.packets.tcp_stream import MAX_CONFIRMATIONS, MAX_WAITS
from zerotrace_collector.probes.socket_decode import (
    DATA_HEADER_SIZE,
    SocketDataSample,
    decode_socket_event,
)
from zerotrace_collector.redaction import TAIL, Redactor
from zerotrace_collector.redaction_h2 import MAX_STATE_BYTES as H2_STATE_BYTES
from zerotrace_correlator.conversation import MAX_PENDING_REQUESTS, Conversation
from zerotrace_correlator.http1 import (
    MAX_HEADER_BYTES,
    Http1Parser,
    MessageHead,
    Verdict,
    sniff,
)
from zerotrace_correlator.http_llm_step import HttpLlmCorrelator
from zerotrace_correlator.llm_metrics import MAX_ITL_SAMPLES
from zerotrace_correlator.openai_stream import (
    ENDPOINT_CHAT,
    ENDPOINT_COMPLETIONS,
    ENDPOINT_RESPONSES,
    MAX_JSON_BODY_BYTES,
    ResponseAnalyzer,
    parse_request_body,
)
from zerotrace_correlator.socket_call import call_of_record, calls_of_batch
from zerotrace_correlator.sse import SseDecoder

ENDPOINTS = (ENDPOINT_CHAT, ENDPOINT_COMPLETIONS, ENDPOINT_RESPONSES)
_NOT_FILL = re.compile(rb"[^*]+")


class Http1Target(Target):
    """A request and a response parser of one connection: an input that starts like a
    status line goes to the response parser, any other to the request parser (cut in
    pieces), with a method queued per request as Conversation does (at most MAX_PENDING_REQUESTS); a
    parser in a terminal state (error, upgrade, close) is replaced, as a new connection."""

    name = "http1"

    def __init__(self) -> None:
        super().__init__()
        self._t = 0
        self._new()

    def _new(self) -> None:
        self.requests = Http1Parser(is_request=True)
        self.responses = Http1Parser(is_request=False)
        self.pending = 0

    def feed(self, data: bytes) -> None:
        self._t += MS
        response = sniff(data) is Verdict.RESPONSE
        for piece in pieces(data):
            if response:
                for event in self.responses.feed(piece, self._t):
                    if isinstance(event, MessageHead) and event.status >= 200:
                        self.pending = max(0, self.pending - 1)
                continue
            for event in self.requests.feed(piece, self._t):
                if isinstance(event, MessageHead) and self.pending < MAX_PENDING_REQUESTS:
                    self.responses.expect_response_to(event.method)
                    self.pending += 1
        if data and data[0] % 13 == 0:  # bytes the capture did not keep
            (self.responses if response else self.requests).skip(len(data), self._t)
        for parser in (self.requests, self.responses):
            check(parser.buffered_bytes() <= MAX_HEADER_BYTES, "HTTP/1 buffer past its cap")
        if data and data[-1] % 17 == 0:
            self.requests.close()
            self.responses.close()
        done = [p for p in (self.requests, self.responses) if p.error or p.upgraded]
        if done or (data and data[-1] % 17 == 0):
            self.rejected += any(p.error for p in done)
            self._new()

    def state(self) -> object:
        return (self.requests, self.responses)

    def bound(self) -> int:
        # Each parser buffers at most one header section (MAX_HEADER_BYTES), plus the queue
        # of methods and its own fields.
        return 2 * (MAX_HEADER_BYTES + 8 * KiB) + MAX_PENDING_REQUESTS * ENTRY_BYTES


class SseTarget(Target):
    """One SSE decoder fed every input as more of one endless stream, now and then told that
    bytes were lost (resync). A small event limit, so the fuzzer reaches the cut path."""

    name = "sse"
    MAX_EVENT = 16 * KiB

    def __init__(self) -> None:
        super().__init__()
        self.decoder = SseDecoder(max_event_bytes=self.MAX_EVENT)
        self._t = 0

    def feed(self, data: bytes) -> None:
        self._t += MS
        if data and data[0] % 11 == 0:
            self.decoder.resync()
        for piece in pieces(data):
            for event in self.decoder.feed(piece, self._t):
                check(len(event.data) <= self.MAX_EVENT, "an SSE event past its limit")
        check(self.decoder.buffered_bytes() <= 2 * self.MAX_EVENT, "SSE buffers past the limit")

    def state(self) -> object:
        return self.decoder

    def bound(self) -> int:
        # One line and one event's data, each at most MAX_EVENT.
        return 2 * self.MAX_EVENT + 8 * KiB


class OpenAiTarget(Target):
    """Each input as a request body (parse_request_body) and as a whole response body (a new
    ResponseAnalyzer: endpoint, status and stream or JSON chosen by its bytes, finished), and
    as more of one endless chat stream through one long-lived analyzer."""

    name = "openai_stream"

    def __init__(self) -> None:
        super().__init__()
        self.endless = ResponseAnalyzer(ENDPOINT_CHAT, 200, "text/event-stream")
        self._t = 0

    def feed(self, data: bytes) -> None:
        self._t += MS
        info = parse_request_body(data)
        check(info.model is None or isinstance(info.model, str), "a model that is not a string")
        head = data[0] if data else 0
        stream = "text/event-stream" if head & 1 else "application/json"
        status = 500 if head & 2 else 200
        analyzer = ResponseAnalyzer(ENDPOINTS[head % 3], status, stream)
        for piece in pieces(data):
            analyzer.feed(piece, self._t)
            self.endless.feed(piece, self._t)
            if head & 4 and piece[:1] == b"\n":
                analyzer.gap()
        outcome = analyzer.finish(self._t, complete=bool(head & 8), reason=None)
        self.rejected += outcome.error is not None
        for value in (outcome.input_tokens, outcome.output_tokens, outcome.cached_tokens):
            check(value is None or type(value) is int, "a token count that is not an int")
        check(len(outcome.timeline.gaps) <= MAX_ITL_SAMPLES, "ITL samples past the limit")
        check(self.endless.buffered_bytes() <= 2 * MAX_JSON_BODY_BYTES, "analyzer buffer")

    def state(self) -> object:
        return self.endless

    def bound(self) -> int:
        # An SSE line and an event's data (1 MiB each, sse.MAX_EVENT_BYTES), the inter-token
        # gaps (MAX_ITL_SAMPLES of 8 bytes) and the analyzer's own fields.
        return 2 * MAX_JSON_BODY_BYTES + 8 * MAX_ITL_SAMPLES + 64 * KiB


class ConversationTarget(Target):
    """The correlator's HTTP/LLM step (Conversation per connection, http1, openai_stream,
    exchange records) fed the socket calls of each input (a script: `bench.fuzz_script`;
    each call's control byte as `bench.fuzz_corpus.control` says). Connections closed,
    idled out and evicted; every record it derives must encode with its Avro schema, or the
    worker would fail on it."""

    name = "conversation"
    MAX_CONNECTIONS = 8

    def __init__(self) -> None:
        super().__init__()
        self.correlator = HttpLlmCorrelator(self.MAX_CONNECTIONS, idle_timeout_ns=1_000 * MS)
        self.codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
        self._seq: dict[tuple[str, str], int] = {}
        self._t = 0
        self._calls = 0

    def feed(self, data: bytes) -> None:
        for ctl, payload in unscript(data):
            self._call(ctl, payload)

    def _call(self, ctl: int, payload: bytes) -> None:
        self._t += MS
        self._calls += 1
        direction = "INGRESS" if ctl & 1 else "EGRESS"
        conn = f"c{(ctl >> 1) & 15}"
        size = len(payload) + (len(payload) // 2 + 1 if ctl & 0x20 else 0)
        seq = self._seq.get((conn, direction), 1000) + (5000 if ctl & 0x80 else 0)
        self._seq[conn, direction] = (seq + size) % 2**32
        record = sock(direction, payload, self._t, conn=conn, size=size, seq=seq % 2**32)
        out = self.correlator.feed_socket(record)
        if ctl & 0x40:
            out += self.correlator.feed_conn(close(self._t, conn))
        if self._calls % 64 == 0:
            out += self.correlator.advance(self._t)
        for name, datum in out:
            self.codec.encode(name, datum)
        check(self.correlator.connections <= self.MAX_CONNECTIONS, "connections past the cap")
        conv = self.correlator.conversation(conn)
        if isinstance(conv, Conversation):  # other protocols' parsers: their own targets
            buffered = conv.buffered_bytes()
            check(buffered <= Conversation.max_buffered_bytes(), "a connection's buffers")
        if conv is not None:
            self.rejected += conv.gave_up is not None

    def state(self) -> object:
        return self.correlator

    def bound(self) -> int:
        # Per connection, what Conversation.max_buffered_bytes allows (two header sections,
        # the kept request bodies and one response's), plus its tables (source event ids,
        # counters, holds): 64 KiB. The sharper check is the trend (`bench.fuzz`).
        return self.MAX_CONNECTIONS * (Conversation.max_buffered_bytes() + 64 * KiB)


class CaptureTarget(Target):
    """A whole input as a capture file (pcap or pcapng, sniffed). Stateless."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def feed(self, data: bytes) -> None:
        packets, report = read_capture(data)
        self.rejected += report.problem is not None
        check(report.packets == len(packets), "packets counted and yielded differ")
        check(sum(len(p.data) for p in packets) <= len(data), "more packet bytes than input")


def _packet(ctl: int, frame: bytes, ts_ns: int) -> CapturedPacket:
    """A frame of the link type the control byte's low 3 bits pick; its high bit says the
    capture cut the frame (one byte more on the wire)."""
    linktype = SUPPORTED_LINKTYPES[ctl % 8 % len(SUPPORTED_LINKTYPES)]
    return CapturedPacket(ts_ns, linktype, frame, len(frame) + (ctl >> 7))


class PacketDecodeTarget(Target):
    """A frame of any supported link type -> a TCP segment or a Skip reason. Stateless."""

    name = "packet_decode"

    def feed(self, data: bytes) -> None:
        packet = _packet(data[0] if data else 1, data[1:], 0)
        decoded = decode_tcp(packet)
        if not isinstance(decoded, TcpPacket):
            self.rejected += 1
            return
        check(len(decoded.payload) <= len(packet.data), "a payload longer than its frame")


# Small limits, so a fuzz run reaches every one of them (the defaults hold 256 MiB).
SMALL_LIMITS = ReassemblyLimits(
    max_held_bytes_per_flow=64 * KiB,
    max_held_segments_per_flow=64,
    max_held_bytes_total=256 * KiB,
    max_flows=16,
    idle_timeout_ns=2_000 * MS,
    reorder_grace_ns=20 * MS,
    max_closed_remembered=64,
)


def reassembly_bound(limits: ReassemblyLimits) -> int:
    """Held bytes (with their bytes objects' headers), and per flow the entries each limit
    counts: segments, and per stream confirmation and wait marks (MAX_CONFIRMATIONS,
    MAX_WAITS), early waits (MAX_WAITS), plus the flow's fields; and the closed flows kept."""
    per_flow = limits.max_held_segments_per_flow + 3 * MAX_WAITS + 2 * MAX_CONFIRMATIONS
    return (
        2 * limits.max_held_bytes_total
        + limits.max_flows * (per_flow * ENTRY_BYTES + 4 * KiB)
        + limits.max_closed_remembered * 2 * KiB
    )


class _PacketTime:
    """Packet time from the control byte's high bits: mostly 1 ms a packet, now and then a
    jump past the idle timeout or a step back (a reordered capture)."""

    def __init__(self) -> None:
        self.t = 10**18

    def next(self, ctl: int) -> int:
        code = ctl >> 3
        self.t += 3_000 * MS if code == 31 else -5 * MS if code == 30 else MS
        return self.t


class TcpReassemblyTarget(Target):
    """One reassembler (small limits) fed the decoded segments of every input (a script of
    frames: `bench.fuzz_script`) as one long capture: flows opened, reordered, overlapped,
    reset, idled out and evicted; every 10,000 inputs the capture ends (`finish`)."""

    name = "tcp_reassembly"

    def __init__(self) -> None:
        super().__init__()
        self.reassembler = TcpReassembler(SMALL_LIMITS)
        self._time = _PacketTime()
        self._inputs = 0

    def feed(self, data: bytes) -> None:
        self._inputs += 1
        for ctl, frame in unscript(data):
            decoded = decode_tcp(_packet(ctl, frame, self._time.next(ctl)))
            if not isinstance(decoded, TcpPacket):
                self.rejected += 1
                continue
            check_flow_events(self.reassembler.feed(decoded))
            self._check()
        if self._inputs % 10_000 == 0:  # the end of one capture; the next starts afresh
            check_flow_events(self.reassembler.finish())

    def _check(self) -> None:
        limits, r = SMALL_LIMITS, self.reassembler
        check(r.open_flows <= limits.max_flows, "flows past max_flows")
        # The reassembler's own count of held bytes, checked against its limit.
        check(r._held_total <= limits.max_held_bytes_total, "held bytes past the total limit")
        check(len(r._closed) <= limits.max_closed_remembered, "closed flows past the limit")

    def state(self) -> object:
        return self.reassembler

    def bound(self) -> int:
        return reassembly_bound(SMALL_LIMITS)


def check_flow_events(events: list[FlowEvent]) -> None:
    for event in events:
        if isinstance(event, DataPiece):
            check(bool(event.data) != (event.gap > 0), "a piece with both or neither")


class PcapAnalysisTarget(Target):
    """A pcap analysis (decode, reassembly with small limits, records, redaction) fed every
    input's frames (a script) as one long capture; every record must encode with its Avro schema."""

    name = "pcap_analysis"
    MAX_PAYLOAD = 4 * KiB

    def __init__(self) -> None:
        super().__init__()
        self.analysis = PcapAnalysis("fuzz", SMALL_LIMITS, max_payload=self.MAX_PAYLOAD)
        self.codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
        self._time = _PacketTime()

    def feed(self, data: bytes) -> None:
        for ctl, frame in unscript(data):
            skipped = self.analysis.counters.tcp
            records = self.analysis.feed(_packet(ctl, frame, self._time.next(ctl)))
            self.rejected += self.analysis.counters.tcp == skipped
            self._encode(records)

    def _encode(self, records: list[Record]) -> None:
        for name, datum in records:
            if name == SOCKET_DATA:
                check(len(datum["payload"]) <= self.MAX_PAYLOAD, "a payload past max_payload")
            self.codec.encode(name, datum)

    def state(self) -> object:
        return self.analysis

    def bound(self) -> int:
        # The reassembly's, and the redactor's streams of the open flows (TAIL bytes and a
        # few fields each, two per flow).
        return reassembly_bound(SMALL_LIMITS) + SMALL_LIMITS.max_flows * 2 * (TAIL + 2 * KiB)


class SocketDecodeTarget(Target):
    """One ring-buffer record of the socket probe (data or conn event). Stateless."""

    name = "socket_decode"

    def feed(self, data: bytes) -> None:
        try:
            sample = decode_socket_event(data)
        except MalformedEvent:
            self.rejected += 1
            return
        if isinstance(sample, SocketDataSample):
            check(len(sample.payload) <= len(data) - DATA_HEADER_SIZE, "payload past the record")
            check(len(sample.payload) <= sample.nbytes or sample.nbytes < 0, "payload > bytes")


class RedactionTarget(Target):
    """Two redactors (content masked, content kept), few connections, fed each input as a
    call of a connection and direction its bytes choose; some calls captured in part, some
    connections forgotten (closed). Masking is byte for byte: same length, and every byte
    changed is `*` (on a stream not taken for HTTP/2)."""

    name = "redaction"
    MAX_CONNS = 8

    def __init__(self) -> None:
        super().__init__()
        self.redactors = [Redactor(keep, max_conns=self.MAX_CONNS) for keep in (False, True)]

    def feed(self, data: bytes) -> None:
        conn = data[0] % 11 if data else 0
        last = data[-1] if data else 0
        for redactor in self.redactors:
            out = redactor.redact(conn, len(data) % 2, data, complete=last % 5 != 0)
            check(type(out) is bytes and len(out) == len(data), "redaction changed the length")
            # HTTP/2 header values are masked with the Huffman code of `*` (redaction_h2):
            # there, the length is what is checked (tests/unit/test_redaction_h2.py decodes).
            if out is not data and out != data and not redactor.http2(conn, len(data) % 2):
                for kept in _NOT_FILL.finditer(out):
                    a, b = kept.span()
                    check(out[a:b] == data[a:b], "redaction changed a byte to other than *")
            if last % 23 == 0:
                redactor.forget(conn)

    def state(self) -> object:
        return self.redactors

    def bound(self) -> int:
        # Per redactor, at most MAX_CONNS connections of two streams, each a TAIL of bytes
        # and a few fields, and what an HTTP/2 stream holds (redaction_h2.MAX_STATE_BYTES:
        # its HPACK table, its bodies' scanners).
        return 2 * (self.MAX_CONNS * 2 * (TAIL + 2 * KiB + H2_STATE_BYTES) + 8 * KiB)


class AvroTarget(Target):
    """An Avro single-object message (any record kind) decoded as a correlator or indexer
    reads raw and derived topics: PoisonInput is the only refusal allowed; a SocketBatch is
    then taken apart into calls, a SocketData into one (what the correlator does next)."""

    name = "avro"

    def __init__(self) -> None:
        super().__init__()
        self.codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
        self.corpus = avro_corpus(self.codec)  # registers the schemas, as writers do
        self._base = retained_bytes(self.codec)

    def feed(self, data: bytes) -> None:
        try:
            record, datum = self.codec.decode(data)
            if record == names.SOCKET_BATCH_RECORD:
                calls_of_batch(datum)
            elif record == names.RAW_SOCKET.record:
                call_of_record(datum)
        except PoisonInput:
            self.rejected += 1

    def state(self) -> object:
        return self.codec

    def bound(self) -> int:
        # The codec keeps its schemas and the fingerprints it resolved: nothing per message.
        return self._base + 64 * KiB


TARGETS: dict[str, Callable[[], Target]] = {
    "http1": Http1Target,
    "sse": SseTarget,
    "openai_stream": OpenAiTarget,
    "conversation": ConversationTarget,
    "pcap": lambda: CaptureTarget("pcap"),
    "pcapng": lambda: CaptureTarget("pcapng"),
    "packet_decode": PacketDecodeTarget,
    "tcp_reassembly": TcpReassemblyTarget,
    "pcap_analysis": PcapAnalysisTarget,
    "socket_decode": SocketDecodeTarget,
    "redaction": RedactionTarget,
    "avro": AvroTarget,
    **PROTOCOL_TARGETS,
}


def seed_corpus(name: str, target: Target) -> list[bytes]:
    """The seeds of *name*; the Avro target encodes its own (with its codec's schemas)."""
    if isinstance(target, AvroTarget):
        return list(target.corpus)
    if name in PROTOCOL_CORPORA:
        return PROTOCOL_CORPORA[name]()
    return CORPORA[name]()
