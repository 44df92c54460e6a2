"""One TCP connection of a protocol other than HTTP/1.x: socket calls in, `ProtoExchange`s out.
Pure.

`Conversation` (HTTP/1.x) reads a connection's first bytes; when they are not HTTP but one of
`protocols.PROTOCOLS` recognises them, it hands the connection over (`Conversation.handover`)
and the correlator (http_llm_step.py) puts a `ProtoConversation` in its place, which is fed
that first call and every later one. The parser (protocol_span.py's contract) pairs requests
and responses; this class only maps the connection's directions to its sides, keeps who and
where (the origin fields of the first call, as an HTTP exchange keeps them) and ranks spans
that start at the same nanosecond, so their ids are the same in a replay.

Times as for HTTP: bytes we write were sent at the write's start, bytes we read had arrived
by the read's end; a packet has one time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zerotrace_correlator import http_counters as c
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtocolParser, ProtoSpan
from zerotrace_correlator.protocols import ProtocolEntry
from zerotrace_correlator.socket_call import SocketCall

CLIENT, SERVER, NETWORK = "CLIENT", "SERVER", "NETWORK"
# Starts whose span count is kept for ranks: as many as HTTP/2 streams open at once
# (http2.MAX_OPEN_STREAMS); other protocols' spans of one start come out together.
RANKED_STARTS = 1024
_ORIGIN_FIELDS = (
    "node_id", "pid", "process_name", "service", "container_id",
    "local_addr", "local_port", "remote_addr", "remote_port",
)  # fmt: skip


@dataclass(frozen=True)
class ProtoExchange:
    """A span of a non-HTTP protocol, with where it was seen."""

    conn_id: str
    span: ProtoSpan
    start_rank: int  # spans before it on the connection that started at the same nanosecond
    observation_point: str  # CLIENT, SERVER or NETWORK
    origin: Mapping[str, Any]
    requests_sent_locally: bool  # the local end asks: it is the client


class ProtoConversation:
    def __init__(
        self, conn_id: str, entry: ProtocolEntry, first: SocketCall, counters: Counter[str]
    ) -> None:
        """first: the call whose bytes `entry` recognised (fed next, like every call)."""
        self.conn_id = conn_id
        self.protocol = entry.name
        self.counters = counters
        packet = first.source == "PACKET"
        # The recognised bytes are a request, or, for a protocol whose server speaks first
        # (MySQL's greeting), a response.
        server_spoke = entry.sent_by_server(first.payload)
        asks = _other(first.direction) if server_spoke else first.direction
        self._request_direction = asks
        self.observation_point = NETWORK if packet else CLIENT if asks == "EGRESS" else SERVER
        client = self.observation_point == CLIENT
        make = entry.make_client if client and entry.make_client else entry.make
        self.parser: ProtocolParser = make()
        self.origin = _origin_of(first)
        self.last_ns = 0
        self.gave_up: str | None = None
        # start_ns -> spans so far that started then: HTTP/2 streams end out of order, so
        # spans of one start need not come out one after the other.
        self._ranks: dict[int, int] = {}
        self._busy = False

    @property
    def at_rest(self) -> bool:
        """No request known to wait: a restarted worker reading on from the next call
        derives the same spans. After a request's bytes, busy until spans come out."""
        return not self._busy or self.gave_up is not None

    def feed(self, call: SocketCall) -> list[ProtoExchange]:
        if call.size <= 0 or self.gave_up is not None:
            return []
        packet = call.source == "PACKET"
        t = call.start_ns if call.direction == "EGRESS" or packet else call.end_ns
        self.last_ns = max(self.last_ns, t)
        side = REQUEST if call.direction == self._request_direction else RESPONSE
        if side == REQUEST and not self._busy:
            # A request after the answers to the ones before: its spans are the thread's that
            # asked (a pooled connection serves many threads) at this first byte.
            self.origin = {
                **self.origin,
                "tid": call.tid,
                "tcp_seq": call.tcp_seq,
                "py_task": call.py_task,
            }
        spans = self.parser.feed(side, call.payload, t, t)
        if side == REQUEST:
            self._busy = True
        elif spans:
            self._busy = False
        if self.parser.error:
            self.gave_up = self.parser.error
            self.counters[c.PROTO_PARSE_ERRORS] += 1
            spans += self.parser.close(t)
        return self._exchanges(spans)

    def close(self, reason: str) -> list[ProtoExchange]:
        """The connection closed or is dropped: requests still waiting, as incomplete."""
        spans = [] if self.gave_up is not None else self.parser.close(self.last_ns)
        if self.gave_up is None:
            self.gave_up = reason
        return self._exchanges(spans)

    def _exchanges(self, spans: list[ProtoSpan]) -> list[ProtoExchange]:
        out = []
        for span in spans:
            self.counters[c.PROTO_SPANS] += 1
            rank = self._ranks.pop(span.start_ns, 0)
            self._ranks[span.start_ns] = rank + 1
            if len(self._ranks) > RANKED_STARTS:
                del self._ranks[next(iter(self._ranks))]  # the least recent start
            out.append(
                ProtoExchange(
                    self.conn_id,
                    span,
                    rank,
                    self.observation_point,
                    self.origin,
                    self._request_direction == "EGRESS",
                )
            )
        return out


def _other(direction: str) -> str:
    return "INGRESS" if direction == "EGRESS" else "EGRESS"


def _origin_of(call: SocketCall) -> dict[str, Any]:
    conn = call.conn
    origin = {key: conn[key] for key in _ORIGIN_FIELDS if key in conn}
    origin["tid"] = call.tid
    origin["tcp_seq"] = call.tcp_seq
    origin["py_task"] = call.py_task
    return origin
