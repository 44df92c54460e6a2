"""The HTTP/LLM correlation step: raw.socket and raw.conn records in, derived.span and
derived.llm records out. Pure; time comes only from the records and from `advance`.

Records of one connection must arrive in order (raw.socket and raw.conn are keyed by
connection, so a partition keeps them in order). Each call returns (record full name, datum)
pairs ready for the codec; the caller encodes and publishes them.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from zerotrace import names
from zerotrace.holds import Holds
from zerotrace_correlator import http_counters as c
from zerotrace_correlator.conversation import SERVER, Conversation, Exchange
from zerotrace_correlator.exchange_records import http_span, llm_request
from zerotrace_correlator.h2_llm import llm_record
from zerotrace_correlator.proto_conversation import ProtoConversation, ProtoExchange
from zerotrace_correlator.proto_records import proto_span
from zerotrace_correlator.socket_call import SocketCall, call_of_record
from zerotrace_correlator.span_timings import NO_DIRS, FileDirs, SpanTimings

# Connections tracked at once. An idle tracked connection costs about 3.5 KiB (measured with
# tracemalloc), so the cap is about 230 MiB of idle state; a busy gateway holds tens of
# thousands open. Past the cap the least recently active one is dropped (its exchanges in
# flight are reported as aborted).
MAX_CONNECTIONS = 65_536
# A connection silent this long (in event time) is dropped, flushing what is in flight. LLM
# streams go quiet while a reasoning model thinks, but servers close idle keep-alive
# connections far sooner (uvicorn 5 s, nginx 75 s), so 5 minutes of silence means it is gone.
IDLE_TIMEOUT_NS = 300 * 1_000_000_000

# raw.conn and raw.socket are separate topics, so a CLOSE may be read before the last data
# records of its connection. A close takes effect once event time is this far past it (or at
# flush); data that arrives meanwhile still counts. Longer than the skew between two topics'
# consumers in one worker, far shorter than any idle timeout.
CLOSE_GRACE_NS = 5_000_000_000
# Claim kinds in `holds`: a connection with something in flight, a CLOSE in its grace.
BUSY, CLOSING = "busy", "closing"

Output = tuple[str, dict[str, Any]]


class HttpLlmCorrelator:
    def __init__(
        self,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout_ns: int = IDLE_TIMEOUT_NS,
        file_dirs: FileDirs = NO_DIRS,
    ) -> None:
        """file_dirs: where KV-cache and model files live, to tag spans' file I/O."""
        self.max_connections = max_connections
        self.idle_timeout_ns = idle_timeout_ns
        self.counters: Counter[str] = Counter()
        # Least recently active first: eviction and idle scans start at the front.
        self._conns: OrderedDict[str, Conversation | ProtoConversation] = OrderedDict()
        # conn_id -> event time of its CLOSE, in arrival order (close times are near-monotone).
        self._closing: OrderedDict[str, int] = OrderedDict()
        # Those of them that the collector shed (raw.conn SHED): cut, not closed.
        self._shed: set[str] = set()
        # What a restarted worker must read again (zerotrace/holds.py): a connection's records
        # since it was last at rest, and its CLOSE while that waits out the grace. The caller
        # tells `holds` where each record was read (`took`); records of a capture file are not.
        self.holds = Holds()
        # Connection set-up and file I/O put on the spans as they are made (span_timings.py).
        self.timings = SpanTimings(file_dirs, self.counters)

    @property
    def connections(self) -> int:
        """Connections tracked now (given-up ones included, until they close or idle out)."""
        return len(self._conns)

    def conversation(self, conn_id: str) -> Conversation | ProtoConversation | None:
        return self._conns.get(conn_id)

    def feed_socket(self, record: Mapping[str, Any]) -> list[Output]:
        """One zerotrace.raw.SocketData datum."""
        return self.feed_calls(str(record["conn_id"]), [call_of_record(record)])

    def feed_calls(self, conn_id: str, calls: list[SocketCall]) -> list[Output]:
        """Calls of one connection, in order (a zerotrace.raw.SocketBatch's, say)."""
        out: list[Output] = []
        closed_ns = self._closing.get(conn_id)
        if closed_ns is not None and calls and calls[0].end_ns - closed_ns >= CLOSE_GRACE_NS:
            # Calls past the grace of the connection's CLOSE or SHED, before event time got
            # there: the connection was taken up again after a shed (socket.c "Shedding").
            # What it had ends first, as it would have; these calls start a new conversation.
            out += self._end_now(conn_id)
        conv = self._conns.get(conn_id)
        if conv is None:
            while len(self._conns) >= self.max_connections:
                evicted, oldest = self._conns.popitem(last=False)
                self._forget(evicted)
                self.counters[c.CONNS_EVICTED] += 1
                out += _records(oldest.close("evicted: connection table full"), self.timings)
            conv = self._conns[conn_id] = Conversation(conn_id, self.counters)
        else:
            self._conns.move_to_end(conn_id)
        key = (BUSY, conn_id)
        for call in calls:
            done: list[Exchange | ProtoExchange] = list(conv.feed(call))
            if isinstance(conv, Conversation) and conv.handover is not None:
                conv = ProtoConversation(conn_id, conv.handover, call, self.counters)
                self._conns[conn_id] = conv
                done += conv.feed(call)
            if done:
                out += _records(done, self.timings)
            if conv.at_rest:
                self.holds.release(key)
            else:
                self.holds.claim(key, conv.last_ns)
        return out

    def _forget(self, conn_id: str) -> None:
        self._closing.pop(conn_id, None)
        self._shed.discard(conn_id)
        self.holds.release((BUSY, conn_id))
        self.holds.release((CLOSING, conn_id))

    def feed_conn(self, record: Mapping[str, Any]) -> list[Output]:
        """One zerotrace.raw.ConnEvent datum. CLOSE flushes the connection. CONNECT and
        TLS_HANDSHAKE only give their times to the connection's first span (span_timings.py);
        CONNECT and ACCEPT change nothing else: a conversation starts with its first bytes, and
        conn_id holds the socket cookie, so a reused fd is a new connection anyway (and raw.conn
        may be read a little out of step with raw.socket, so they must not reset one).

        SHED (the collector shed the connection from there on, socket.c "Shedding") ends it
        like a CLOSE, after the same grace for its last records, but what it had in progress
        is dropped and counted, not reported half: the exchange was cut by zerotrace, not by
        the peers."""
        # A first span made before its connection's set-up times were read: made again.
        late = [(names.DERIVED_SPAN.record, span) for span in self.timings.on_conn(record)]
        if record["kind"] not in ("CLOSE", "SHED"):
            return late
        # Kept even when no data of the connection came yet: a worker that starts on a
        # backlog may read raw.conn ahead of raw.socket, and a client that closes right after
        # the last SSE event (no terminating chunk) ends its exchange only by this CLOSE.
        conn_id = str(record["conn_id"])
        if record["kind"] == "SHED":
            self._shed.add(conn_id)
        self._closing[conn_id] = int(record["ts_ns"])
        self.holds.claim((CLOSING, conn_id), int(record["ts_ns"]))
        return []

    def _close_due(self, now_ns: int) -> list[Output]:
        out: list[Output] = []
        while self._closing:
            conn_id, closed_ns = next(iter(self._closing.items()))
            if now_ns - closed_ns < CLOSE_GRACE_NS:
                break
            out += self._end_now(conn_id)
        return out

    def _end_now(self, conn_id: str) -> list[Output]:
        """The connection's CLOSE or SHED takes effect (its grace is over)."""
        conv = self._conns.pop(conn_id, None)
        shed = conn_id in self._shed
        self._forget(conn_id)
        return [] if conv is None else self._end(conv, shed)

    def _end(self, conv: Conversation | ProtoConversation, shed: bool) -> list[Output]:
        if not shed:
            self.counters[c.CONNS_CLOSED] += 1
            return _records(conv.close("connection closed"), self.timings)
        self.counters[c.CONNS_SHED] += 1
        aborted = self.counters[c.EXCHANGES_ABORTED]
        self.counters[c.EXCHANGES_SHED] += len(conv.close("shed by the collector"))
        self.counters[c.EXCHANGES_ABORTED] = aborted  # cut by zerotrace, not by the peers
        return []

    def advance(self, now_ns: int) -> list[Output]:
        """Event time has reached now_ns: drop connections idle for the idle timeout. Scans
        from the least recently active and stops at the first live one. Spans whose file
        calls were read after them are made again with them (span_timings.py)."""
        out: list[Output] = [(names.DERIVED_SPAN.record, s) for s in self.timings.late_spans()]
        out += self._close_due(now_ns)
        while self._conns:
            conn_id, conv = next(iter(self._conns.items()))
            if now_ns - conv.last_ns < self.idle_timeout_ns:
                break
            del self._conns[conn_id]
            self._forget(conn_id)
            self.counters[c.CONNS_IDLE_TIMEOUT] += 1
            out += _records(conv.close("idle timeout"), self.timings)
        return out

    def flush(self, reason: str = "end of input") -> list[Output]:
        """Closes every connection (end of a replay, shutdown)."""
        out: list[Output] = []
        for conn_id in list(self._closing):
            conv = self._conns.pop(conn_id, None)
            if conv is not None:
                out += self._end(conv, conn_id in self._shed)
        self._closing.clear()
        self._shed.clear()
        self.holds.clear()
        while self._conns:
            _, conv = self._conns.popitem(last=False)
            out += _records(conv.close(reason), self.timings)
        out += [(names.DERIVED_SPAN.record, s) for s in self.timings.late_spans()]
        return out


def _records(exchanges: Sequence[Exchange | ProtoExchange], timings: SpanTimings) -> list[Output]:
    out: list[Output] = []
    for ex in exchanges:
        span = proto_span(ex) if isinstance(ex, ProtoExchange) else http_span(ex)
        timings.annotate(ex.conn_id, span, server=ex.observation_point == SERVER)
        out.append((names.DERIVED_SPAN.record, span))
        if isinstance(ex, ProtoExchange):  # HTTP/2 and gRPC LLM streams (h2_llm.py)
            proto_llm = llm_record(ex.span, span["span_id"], ex.origin, ex.observation_point)
            if proto_llm is not None:
                out.append((names.DERIVED_LLM.record, proto_llm))
            continue
        llm = llm_request(ex)
        if llm is not None:
            out.append((names.DERIVED_LLM.record, llm))
    return out
