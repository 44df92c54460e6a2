"""One TCP connection's HTTP/1.x conversation: socket records in, finished exchanges out. Pure.

The direction whose first bytes are a request line carries requests: EGRESS requests mean we
sit in the client (observation point CLIENT), INGRESS ones in the server (SERVER); packet
captures are NETWORK. Responses pair with requests FIFO (RFC 9112 section 9.3.2).

Times: bytes we write are sent at the write's start_ns; bytes we read arrived by the read's
end_ns; a packet has one time. A message starts at its first byte's record and ends at its
last byte's record.

Memory is bounded per connection (see `max_buffered_bytes`): headers are capped by the
parsers, bodies are kept only for LLM endpoints and only up to MAX_JSON_BODY_BYTES, a
response's body streams through the analyzer, and at most MAX_PENDING_REQUESTS requests wait
for their responses. Every limit hit increments a counter; nothing raises on input.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zerotrace_correlator import dns, protocols
from zerotrace_correlator import http_counters as c
from zerotrace_correlator.content_encoding import decoding
from zerotrace_correlator.http1 import (
    MAX_HEADER_BYTES,
    BodyGap,
    BodyPiece,
    Event,
    Http1Parser,
    MessageEnd,
    MessageHead,
    Verdict,
    sniff,
)
from zerotrace_correlator.llm_apis import LlmAnalyzer, LlmApi, api_for
from zerotrace_correlator.openai_stream import MAX_JSON_BODY_BYTES, LlmOutcome, LlmRequestInfo
from zerotrace_correlator.protocols import ProtocolEntry
from zerotrace_correlator.socket_call import SocketCall

# Pipelined requests waiting for responses. Clients pipeline a handful at most; past this the
# peer is not a real HTTP client and we stop rather than hold up to 1 MiB of body for each.
MAX_PENDING_REQUESTS = 32
# Raw event ids kept on a span: a long stream is thousands of reads, and the first ones are
# enough to find the rest (same conn_id, time range). The total is kept as a count.
MAX_SOURCE_EVENT_IDS = 64

CLIENT, SERVER, NETWORK = "CLIENT", "SERVER", "NETWORK"
# What an exchange keeps of the call that started it (not the payload: an idle keep-alive
# connection would otherwise hold a captured payload until its next request).
ORIGIN_FIELDS = (
    "event_id", "node_id", "pid", "tid", "process_name", "service", "container_id",
    "local_addr", "local_port", "remote_addr", "remote_port",
)  # fmt: skip
_CONN_ORIGIN_FIELDS = tuple(f for f in ORIGIN_FIELDS if f not in ("event_id", "tid"))
_LIMIT_ERRORS = {
    "header section too large",
    "trailer section too large",
    "start line too long",
    "chunk-size line too long",
}


@dataclass(eq=False)
class Exchange:
    """A request and its response (or what was seen of them). Filled while in flight."""

    conn_id: str
    index: int  # requests seen before this one on the connection (since tracking began)
    # Exchanges before this one on the connection that started at the same nanosecond
    # (pipelined requests in one record). With start_ns it names the exchange in its ids:
    # unlike `index`, it is the same when a worker rebuilds the connection from a later
    # record (a replay after a restart starts where the connection was at rest).
    start_rank: int
    observation_point: str
    request: MessageHead
    origin: Mapping[str, Any]  # who and where: ORIGIN_FIELDS of the request's first record
    requests_sent_locally: bool  # the request travelled EGRESS: the local end is the client
    endpoint: str | None  # LLM API endpoint (llm_apis.py), when the request names one
    request_end_ns: int
    api: LlmApi | None = None  # the LLM API of `endpoint`
    request_body_bytes: int = 0
    request_complete: bool = False
    request_info: LlmRequestInfo | None = None
    response: MessageHead | None = None
    response_end_ns: int | None = None
    response_body_bytes: int = 0
    response_complete: bool = False
    llm: LlmOutcome | None = None
    error: str | None = None  # why the exchange is incomplete (aborted, framing lost)
    # The asyncio task that wrote the response's first bytes (a server's own side: trace
    # assembly links the calls that task made to this request); 0 when none was read.
    response_task: int = 0
    gap: bool = False  # the capture missed bytes of it (framing may have survived)
    source_event_ids: list[str] = field(default_factory=list)
    source_events: int = 0
    _last_call: SocketCall | None = field(default=None, repr=False)
    _body: bytearray = field(default_factory=bytearray, repr=False)
    _analyzer: LlmAnalyzer | None = field(default=None, repr=False)

    @property
    def start_ns(self) -> int:
        return self.request.start_ns

    @property
    def end_ns(self) -> int:
        """The last byte seen of the exchange."""
        return self.response_end_ns if self.response_end_ns is not None else self.request_end_ns


def _unseen(size: int) -> str:
    return f"{size} bytes not seen (events lost, or a call not traced such as sendfile)"


class Conversation:
    def __init__(self, conn_id: str, counters: Counter[str]) -> None:
        self.conn_id = conn_id
        self.counters = counters
        self.last_ns = 0
        self.gave_up: str | None = None  # why this connection is no longer parsed
        self.observation_point: str | None = None
        self._request_direction: str | None = None
        self._joined_late = False
        self._not_http = False
        # Set when the first bytes are another protocol's: its parser takes the connection.
        self.handover: ProtocolEntry | None = None
        self._requests = Http1Parser(is_request=True)
        self._responses = Http1Parser(is_request=False)
        self._pending: deque[Exchange] = deque()  # requests seen, responses not started
        self._in_request: Exchange | None = None
        self._in_response: Exchange | None = None
        self._interim = False  # framing a 1xx response, which answers nothing
        # Per direction, the thread of the last syscall record and the TCP sequence number
        # its next one should start at: a record past it means the records between were lost
        # (a full ring buffer) or moved by a call not traced (sendfile).
        self._next_seq: dict[str, tuple[int, int]] = {}
        self._origin: Mapping[str, Any] | None = None
        self._next_index = 0
        self._last_start: tuple[int, int] = (-1, 0)  # start_ns and rank of the newest exchange

    @staticmethod
    def max_buffered_bytes() -> int:
        """The most `buffered_bytes` can ever reach: two header buffers, the kept request
        bodies and one response body (or an SSE line plus its event's data)."""
        return 2 * MAX_HEADER_BYTES + (MAX_PENDING_REQUESTS + 2) * MAX_JSON_BODY_BYTES

    @property
    def at_rest(self) -> bool:
        """Nothing in flight: no exchange open, no bytes held by a parser. A reader that
        starts at the next record of the connection derives the same exchanges from there
        (the shells' commits rely on it: see zerotrace/step.py)."""
        if self.gave_up is not None:
            return True
        return (
            not self._pending
            and self._in_request is None
            and self._in_response is None
            and not self._requests.in_message
            and not self._responses.in_message
            and self._requests.buffered_bytes() == 0
            and self._responses.buffered_bytes() == 0
        )

    def _rank_of(self, start_ns: int) -> int:
        last_ns, rank = self._last_start
        self._last_start = (start_ns, rank + 1 if start_ns == last_ns else 0)
        return self._last_start[1]

    def buffered_bytes(self) -> int:
        held = self._requests.buffered_bytes() + self._responses.buffered_bytes()
        held += sum(len(ex._body) for ex in self._pending)
        if self._in_request is not None and self._in_request not in self._pending:
            held += len(self._in_request._body)
        if self._in_response is not None and self._in_response._analyzer is not None:
            held += self._in_response._analyzer.buffered_bytes()
        return held

    def feed(self, call: SocketCall) -> list[Exchange]:
        """One raw.socket call of this connection, in order. Returns finished exchanges."""
        size, payload = call.size, call.payload
        if size <= 0:
            return []
        direction, packet = call.direction, call.source == "PACKET"
        t = call.start_ns if direction == "EGRESS" or packet else call.end_ns
        if t > self.last_ns:
            self.last_ns = t
        lost = 0 if packet or call.tcp_seq is None else self._bytes_lost_before(call)
        if lost < 0:
            self.counters[c.RECORDS_REPEATED] += 1
            return []
        if self.gave_up is not None:
            self.counters[c.RECORDS_IGNORED] += 1
            return []
        if self._request_direction is None and not self._decide_roles(payload, direction, packet):
            return self._give_up("not HTTP/1.x") if self._not_http else []
        missing = size - len(payload)
        if missing > 0:
            self.counters[c.CAPTURE_TRUNCATED_RECORDS] += 1
        out: list[Exchange] = []
        requests = direction == self._request_direction
        parser = self._requests if requests else self._responses
        if requests and not parser.in_message:
            self._origin = _origin_of(call)
            if self.observation_point == SERVER:
                t = _arrived(call, t)
        handle = self._on_request_event if requests else self._on_response_event
        if lost:  # the parser skips them first, then reads what came after
            events = parser.skip(lost, t, _unseen(lost))
            events += parser.feed(payload, t)
        else:
            events = parser.feed(payload, t)
        if missing > 0:
            events += parser.skip(missing, t)
        for event in events:
            if self.gave_up is None:
                handle(event, call, out)
        if self.gave_up is None and parser.error is not None:
            limit = parser.error in _LIMIT_ERRORS
            self.counters[c.LIMIT_HEADER_BYTES if limit else c.PARSE_ERRORS] += 1
            out += self._give_up(parser.error)
        elif self.gave_up is None and parser.upgraded:
            self.counters[c.UPGRADES] += 1
            out += self._give_up("protocol upgrade")
        return out

    def _bytes_lost_before(self, call: SocketCall) -> int:
        """Bytes this direction moved, by TCP sequence numbers, between the previous syscall
        record of the same thread and this one; -1 when this one holds only bytes already
        seen (a peek read again, a replayed event). 0 when the thread changes: calls of two
        threads on one socket can end in either order. Called only for calls with sequence
        numbers; packets need none of this: the reassembly reports its holes as gap records."""
        seq, tid, size, direction = int(call.tcp_seq or 0), call.tid, call.size, call.direction
        end = (seq + size) % 2**32
        previous = self._next_seq.get(direction)
        if previous is None or previous[0] != tid:
            self._next_seq[direction] = (tid, end)
            return 0
        ahead = (seq - previous[1]) % 2**32
        if ahead >= 2**31:  # behind: all of it seen already, or some
            if (previous[1] - seq) % 2**32 >= size:
                return -1
            ahead = 0
        self._next_seq[direction] = (tid, end)
        if ahead:
            self.counters[c.BYTES_LOST_BY_TCP_SEQ] += ahead
        return ahead

    def _decide_roles(self, payload: bytes, direction: str, packet: bool) -> bool:
        """Judges the first records: True once a request line shows which way requests go."""
        verdict = sniff(payload)
        if verdict is Verdict.TLS and not packet:
            # Ciphertext read by the syscall before the TLS uprobes linked the connection (a
            # server that feeds libssl from memory, like uvicorn, reads the ClientHello
            # first): the plaintext comes as TLS records of the same connection.
            self.counters[c.RECORDS_TLS_BEFORE_LINK] += 1
            return False
        if verdict is Verdict.BODY and dns.recognise(payload):
            # A DNS query starts with a random id, which starts like a JSON body ("{", "[")
            # once in 128 (a UDP flow's first datagram): its exact check wins.
            verdict = Verdict.OTHER
        self._joined_late |= verdict is Verdict.RESPONSE or verdict is Verdict.BODY
        if verdict is Verdict.REQUEST:
            self._request_direction = direction
            sent = direction == "EGRESS"
            self.observation_point = NETWORK if packet else CLIENT if sent else SERVER
            return True
        if self._joined_late or verdict is Verdict.UNKNOWN:
            # We joined mid-way (a status line or the rest of a body came first): skip the
            # rest of the exchange we missed until a request line starts one we can follow.
            self.counters[c.RECORDS_BEFORE_FIRST_REQUEST] += 1
        elif (entry := protocols.recognise(payload)) is not None:
            # Another protocol: the correlator hands the connection over (proto_conversation).
            self.handover = entry
            self.gave_up = f"{entry.name} connection"
            self.counters[c.CONNS_HANDED_OVER] += 1
        else:
            self.counters[c.CONNS_NOT_HTTP] += 1
            self._not_http = True
        return False

    def close(self, reason: str) -> list[Exchange]:
        """The connection closed or is dropped (idle, evicted): flush what is in flight."""
        out: list[Exchange] = []
        for event in self._responses.close(reason):
            self._on_response_event(event, None, out)
        for event in self._requests.close(reason):
            self._on_request_event(event, None, out)
        self._flush_pending(f"no response: {reason}", out)
        if self.gave_up is None:
            self.gave_up = reason
        return out

    # -- requests -------------------------------------------------------------------------

    def _on_request_event(self, event: Event, call: SocketCall | None, out: list[Exchange]) -> None:
        if isinstance(event, MessageHead):
            if len(self._pending) >= MAX_PENDING_REQUESTS:
                self.counters[c.LIMIT_PENDING_REQUESTS] += 1
                out += self._give_up("too many pipelined requests")
                return
            origin = self._origin or ({} if call is None else _origin_of(call))
            self._origin = origin  # a request starting later in the same record
            api = api_for(event.method, event.target)
            new = Exchange(
                conn_id=self.conn_id,
                index=self._next_index,
                start_rank=self._rank_of(event.start_ns),
                observation_point=self.observation_point or NETWORK,
                request=event,
                origin=origin,
                requests_sent_locally=self._request_direction == "EGRESS",
                endpoint=None if api is None else api.endpoint,
                request_end_ns=event.end_ns,
                api=api,
            )
            self._next_index += 1
            self._responses.expect_response_to(event.method)
            self._pending.append(new)
            self._in_request = new
            self.counters[c.EXCHANGES] += 1
        ex = self._in_request
        if ex is None:
            return
        self._touch(ex, call)
        if isinstance(event, BodyPiece):
            ex.request_body_bytes += len(event.data)
            ex.request_end_ns = event.time_ns
            if ex.endpoint is not None and ex.request_info is None:
                room = MAX_JSON_BODY_BYTES - len(ex._body)
                if len(event.data) > room and room >= 0:
                    self.counters[c.LIMIT_JSON_BODY_BYTES] += 1
                ex._body += event.data[: max(0, room)]
        elif isinstance(event, BodyGap):
            ex.request_body_bytes += event.size
            ex.request_end_ns = event.time_ns
            ex.gap = True
        elif isinstance(event, MessageEnd):
            ex.request_end_ns = event.time_ns
            ex.request_complete = event.complete
            if not event.complete and ex.error is None:
                ex.error = event.reason
            self._read_request(ex)
            self._in_request = None

    def _read_request(self, ex: Exchange) -> None:
        if ex.api is not None and ex.request_info is None:
            ex.request_info = ex.api.parse_request(bytes(ex._body), ex.request.target)
            ex._body = bytearray()

    # -- responses ------------------------------------------------------------------------

    def _on_response_event(
        self, event: Event, call: SocketCall | None, out: list[Exchange]
    ) -> None:
        if isinstance(event, MessageHead):
            self._interim = event.status < 200 and event.status != 101
            if self._interim:
                return
            if not self._pending:
                self.counters[c.UNPAIRED_RESPONSES] += 1
                out += self._give_up("response without a request")
                return
            answered = self._pending.popleft()
            answered.response = event
            if call is not None and call.direction == "EGRESS":
                answered.response_task = call.py_task
            answered.response_end_ns = event.end_ns
            if answered.api is not None and event.status != 101:
                answered._analyzer = decoding(  # a compressed body decoded first, bounded
                    answered.api.analyzer(
                        answered.api.endpoint, event.status, event.header("content-type")
                    ),
                    event.header("content-encoding"),
                )
            self._in_response = answered
        if self._interim:
            self._interim = not isinstance(event, MessageEnd)
            return
        ex = self._in_response
        if ex is None:
            return
        self._touch(ex, call)
        analyzer = ex._analyzer
        if isinstance(event, BodyPiece):
            ex.response_body_bytes += len(event.data)
            ex.response_end_ns = event.time_ns
            if analyzer is not None:
                hit = analyzer.body_limit_hit
                analyzer.feed(event.data, event.time_ns)
                if analyzer.body_limit_hit and not hit:
                    self.counters[c.LIMIT_JSON_BODY_BYTES] += 1
        elif isinstance(event, BodyGap):
            ex.response_body_bytes += event.size
            ex.response_end_ns = event.time_ns
            ex.gap = True
            if analyzer is not None:
                analyzer.gap()
        elif isinstance(event, MessageEnd):
            ex.response_end_ns = event.time_ns
            self._in_response = None
            self._finish(ex, event.complete, event.reason, out)

    def _finish(
        self, ex: Exchange, complete: bool, reason: str | None, out: list[Exchange]
    ) -> None:
        ex.response_complete = complete
        if not complete:
            ex.error = ex.error or reason or "incomplete"
        self._read_request(ex)
        if ex._analyzer is not None:
            ex.llm = ex._analyzer.finish(ex.end_ns, complete, reason)
            if ex._analyzer.sse_truncated_events:
                self.counters[c.LIMIT_SSE_EVENT_BYTES] += ex._analyzer.sse_truncated_events
            if ex.llm.timeline.samples_dropped:
                self.counters[c.LIMIT_ITL_SAMPLES] += ex.llm.timeline.samples_dropped
            if ex._analyzer.errors_dropped:
                self.counters[c.LIMIT_STREAM_ERRORS] += ex._analyzer.errors_dropped
            ex._analyzer = None
        if not complete:
            self.counters[c.EXCHANGES_ABORTED] += 1
        elif ex.llm is not None and ex.llm.failed:
            self.counters[c.EXCHANGES_FAILED] += 1
        out.append(ex)

    # -- giving up ------------------------------------------------------------------------

    def _give_up(self, reason: str) -> list[Exchange]:
        """Stop parsing this connection; flush what is in flight as incomplete."""
        out: list[Exchange] = []
        if self.gave_up is not None:
            return out
        self.gave_up = reason
        if self._in_response is not None:
            ex, self._in_response = self._in_response, None
            self._finish(ex, False, reason, out)
        if self._in_request is not None and self._in_request not in self._pending:
            self._in_request.request_complete = False  # already answered; stop filling it
        self._in_request = None
        self._flush_pending(reason, out)
        return out

    def _flush_pending(self, reason: str, out: list[Exchange]) -> None:
        while self._pending:
            ex = self._pending.popleft()
            if ex.error is None:
                ex.error = reason
            self._finish(ex, False, reason, out)

    def _touch(self, ex: Exchange, call: SocketCall | None) -> None:
        """*call* carried bytes of *ex* (one call may carry several events of it)."""
        if call is None or ex._last_call is call:
            return
        ex._last_call = call
        ex.source_events += 1
        if len(ex.source_event_ids) < MAX_SOURCE_EVENT_IDS:
            ex.source_event_ids.append(call.event_id)
        else:
            self.counters[c.LIMIT_SOURCE_EVENT_IDS] += 1


def _origin_of(call: SocketCall) -> dict[str, Any]:
    conn = call.conn
    origin = {key: conn[key] for key in _CONN_ORIGIN_FIELDS if key in conn}
    origin["event_id"] = call.event_id
    origin["tid"] = call.tid
    origin["tcp_seq"] = call.tcp_seq  # the request's first byte: trace assembly joins on it
    origin["py_task"] = call.py_task  # the asyncio task that wrote it (egress calls only)
    return origin


def _arrived(call: SocketCall, read_ns: int) -> int:
    """When a request a server read had arrived: a busy server reads it late, and its client's
    time to first token counts that wait. The probe's waited_ns runs from the socket's last
    segment (received or sent), so it never makes the wait longer than it was."""
    waited = call.waited_ns
    if waited is None or waited <= 0:
        return read_ns
    return min(read_ns, call.start_ns - waited)
