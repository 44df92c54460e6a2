"""Trace assembly: links between spans found with no instrumentation. Pure.

Spans come in as the correlator writes them, one per exchange, each standing alone. Assembly
writes a TraceEdge (parent, child, rule) for each link it finds and never rewrites a span;
traces are put together from the links when read (zerotrace_query/trace_trees.py).

Two stages, each keyed so that its joins need no state across partitions:

- `ExchangeLinks` (spans keyed by their exchange: the connection's client and server address
  and port, `exchange_key`): the client's span and the server's span of one exchange, seen in
  two processes or on two hosts, are one request. Joined by the TCP sequence number of the
  request's first byte, the same at the client's write and the server's read (rule tcp_sequence;
  DeepFlow joins hosts so). Where a side has no sequence number (bytes read through the TLS
  library's uprobes), the server span of the same name on the same connection whose start is
  nearest the client span's, inside it (rule same_connection: one connection carries one
  HTTP/1 request at a time).
- `ProcessLinks` (spans keyed by node and process): a call a thread makes while it serves a
  request is that request's child (rule same_thread: DeepFlow's syscall trace id). A thread
  seen serving two requests at once (an asyncio event loop, a gevent hub) is multiplexed: no
  same-thread link is made on it, and those made before it was found so are taken back (a
  link with no parent replaces them). Calls inside a request that carry the request's own
  propagated ids (the W3C traceparent's trace id, b3's trace id, X-Request-ID) are its
  children on any thread, an asyncio server's included. So are the calls an asyncio task
  made while it served a request it answered (rule same_task: the collector reads the task at
  each write, bpf/socket.c): an event loop's requests, each linked to its own calls.

Both hold spans for HOLD_NS of event time (the newest span end seen), so a parent that ends
after its child still finds it; a connection, thread or id holding more than MAX_PER_KEY spans
forgets its oldest and counts them; a span that ended before the hold is counted late.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from zerotrace import names
from zerotrace_correlator.fileio_spans import stable_id

HOLD_NS = 120_000_000_000
# same_connection: how far outside the client's span a server span's start may fall and still
# be its exchange (the two ends' clocks differ across hosts).
CLOCK_SKEW_NS = 50_000_000
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
_B3_TRACE_ID = re.compile(r"^([0-9a-f]{16}|[0-9a-f]{32})(?:-|$)")
MAX_REQUEST_ID = 128

# Counter names
LINKED = "trace.links"
TAKEN_BACK = "trace.links.taken_back"
MULTIPLEXED_THREADS = "trace.threads.multiplexed"
FORGOTTEN = "trace.spans.forgotten"  # held spans dropped for room, before their time
LATE = "trace.spans.late"  # spans that ended before the hold: nothing they could join is held
AMBIGUOUS = "trace.links.ambiguous"  # a call inside two requests that carry its id: not linked


@dataclass(frozen=True)
class SpanView:
    """What assembly needs of a span."""

    span_id: str
    trace_id: str
    node_id: str
    pid: int
    tid: int
    side: str  # "client" or "server"
    name: str
    start_ns: int
    end_ns: int
    exchange: str | None
    seq: int | None
    propagated: tuple[tuple[str, str], ...]  # (rule, id) of each propagated id it carries

    def encloses(self, other: SpanView) -> bool:
        return self.start_ns <= other.start_ns and other.end_ns <= self.end_ns


def exchange_key(span: Mapping[str, Any]) -> str | None:
    """The exchange a span belongs to: its connection's client and server ends, the same
    whichever end saw it; None for a span with no connection (a file open)."""
    attrs = span.get("attributes") or {}
    parts = [
        attrs.get(key)
        for key in (
            names.ATTR_CLIENT_ADDRESS,
            names.ATTR_CLIENT_PORT,
            names.ATTR_SERVER_ADDRESS,
            names.ATTR_SERVER_PORT,
        )
    ]
    if not all(parts):
        return None
    return f"{parts[0]}:{parts[1]}>{parts[2]}:{parts[3]}"


def propagated_ids(attrs: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """(rule, id) of the ids the request carried: the trace ids of traceparent and b3 (a
    service passes its caller's trace id on, with a span id of its own), X-Request-ID as it is
    (gateways pass it on unchanged). Malformed values are left out."""
    out = []
    traceparent = _TRACEPARENT.match(attrs.get(names.ATTR_HEADER_TRACEPARENT, "").lower())
    if traceparent and traceparent.group(1) != "0" * 32:
        out.append((names.TRACE_RULE_TRACEPARENT, traceparent.group(1)))
    b3 = _B3_TRACE_ID.match(attrs.get(names.ATTR_HEADER_B3, "").lower())
    if b3:
        out.append((names.TRACE_RULE_B3, b3.group(1).rjust(32, "0")))
    request_id = attrs.get(names.ATTR_HEADER_REQUEST_ID, "").strip()
    if request_id and len(request_id) <= MAX_REQUEST_ID:
        out.append((names.TRACE_RULE_REQUEST_ID, request_id))
    return tuple(out)


def view(span: Mapping[str, Any]) -> SpanView | None:
    """The span as assembly sees it; None for one it does not link (no client or server side,
    or seen on the network between the two ends)."""
    kind = str(span.get("kind", ""))
    side = kind.rsplit(".", 1)[-1]
    attrs = span.get("attributes") or {}
    if side not in ("client", "server") or attrs.get(names.ATTR_OBSERVATION_POINT) == "NETWORK":
        return None
    seq = attrs.get(names.ATTR_TCP_REQUEST_SEQ)
    return SpanView(
        span_id=str(span["span_id"]),
        trace_id=str(span["trace_id"]),
        node_id=str(span.get("node_id", "")),
        pid=int(span.get("pid") or 0),
        tid=int(span.get("tid") or 0),
        side=side,
        name=str(span.get("name", "")),
        start_ns=int(span["start_ns"]),
        end_ns=int(span["end_ns"]),
        exchange=exchange_key(span),
        seq=int(seq) if seq not in (None, "") else None,
        propagated=propagated_ids(attrs) + _task(attrs),
    )


def _task(attrs: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The asyncio task that wrote the span's side, as an id shared with the calls it made, on
    any thread of the process: a task's key is the address of its root coroutine's frame,
    which no other live object has, and the collector gives a worker thread running in a
    context the task copied (asyncio.to_thread, Starlette's run_in_threadpool) the task's
    key (bpf/python_stack.h "Tasks made by tasks"). A freed task's address given to a later
    one is told apart by time: the call must lie inside the request's span, and two requests
    holding it link neither."""
    task = attrs.get(names.ATTR_ASYNC_TASK, "")
    return ((names.TRACE_RULE_SAME_TASK, task),) if task not in ("", "0") else ()


def edge(parent: SpanView | None, child: SpanView, rule: str) -> dict[str, Any]:
    """The TraceEdge record. Its id names the child and the rule (a child has one parent by
    each rule), so a link taken back (parent None: parent_span_id "") replaces it."""
    return {
        "edge_id": stable_id("edge", rule, child.span_id),
        "trace_id": parent.trace_id if parent is not None else child.trace_id,
        "parent_span_id": parent.span_id if parent is not None else "",
        "child_span_id": child.span_id,
        "rule": rule,
        "ts_ns": child.start_ns,
    }


# Spans come out about in the order they end (a span's timings may fill in a little later,
# a partition may lag another): a scan of held spans, newest first, stops once this many in a
# row ended ORDER_SLACK_NS before what it looks for, so the cost of a span does not grow with
# the hold, and a span out of order does not end the scan early.
ORDER_SLACK_NS = 500_000_000
OLD_IN_A_ROW = 32
# Spans held per connection, per thread and per propagated id at most: the oldest go first.
MAX_PER_KEY = 10_000


def _recent(spans: dict[str, SpanView], since_ns: int) -> Iterator[SpanView]:
    """Held spans, newest first, until OLD_IN_A_ROW in a row ended ORDER_SLACK_NS before
    since_ns."""
    old = 0
    for v in reversed(spans.values()):
        if v.end_ns < since_ns - ORDER_SLACK_NS:
            old += 1
            if old >= OLD_IN_A_ROW:
                return
            continue
        old = 0
        yield v


def _put(index: dict[Any, dict[str, SpanView]], key: Any, v: SpanView) -> int:
    """Holds v under key (a span written again keeps its place: its end is the same);
    returns how many of the oldest were let go to stay within MAX_PER_KEY."""
    spans = index.setdefault(key, {})
    spans[v.span_id] = v
    dropped = 0
    while len(spans) > MAX_PER_KEY:
        del spans[next(iter(spans))]
        dropped += 1
    return dropped


def _expire(index: dict[Any, dict[str, SpanView]], before_ns: int) -> list[str]:
    gone = []
    for key in list(index):
        spans = index[key]
        old = [k for k, v in spans.items() if v.end_ns < before_ns]
        for k in old:
            del spans[k]
        gone += old
        if not spans:
            del index[key]
    return gone


class ExchangeLinks:
    """Client span -> server span of the same exchange (rules tcp_sequence, same_connection)."""

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self._by_exchange: dict[str, dict[str, SpanView]] = {}
        self._by_seq: dict[tuple[str, str, int], SpanView] = {}  # (exchange, side, seq)
        # span id -> its end, of server spans given a parent and of client spans made one
        # by same_connection (a client asks one request: it is the parent of one server span)
        self._linked: dict[str, int] = {}
        self._parents: dict[str, int] = {}
        self._newest_ns = 0

    def holds(self, span_id: str, exchange: str | None) -> bool:
        return exchange is not None and span_id in self._by_exchange.get(exchange, {})

    def add(self, v: SpanView) -> list[dict[str, Any]]:
        self._newest_ns = max(self._newest_ns, v.end_ns)
        if v.exchange is None:
            return []
        if v.end_ns < self._newest_ns - HOLD_NS:
            self.counters[LATE] += 1
            return []
        if v.span_id in self._linked or v.span_id in self._parents:
            return []  # joined already (a span written again with its timings filled in)
        self.counters[FORGOTTEN] += _put(self._by_exchange, v.exchange, v)
        if v.seq is not None:
            self._by_seq[(v.exchange, v.side, v.seq)] = v
        spans = self._by_exchange[v.exchange]
        out = []
        if v.side == "server":
            pair = self._client_of(v, spans)
            if pair is not None:
                out.append(edge(pair[0], v, pair[1]))
        else:
            server = None if v.seq is None else self._by_seq.get((v.exchange, "server", v.seq))
            if server is not None and server.span_id not in self._linked:
                out.append(edge(v, server, names.TRACE_RULE_TCP_SEQ))
            else:
                for server in _recent(spans, v.start_ns - CLOCK_SKEW_NS):
                    if server.side == "server" and server.span_id not in self._linked:
                        pair = self._client_of(server, spans)
                        if pair is not None and pair[0].span_id == v.span_id:
                            out.append(edge(v, server, pair[1]))
                            break
        for e in out:
            self._joined(spans, e)
        self.counters[LINKED] += len(out)
        return out

    def _joined(self, spans: dict[str, SpanView], e: Mapping[str, Any]) -> None:
        """Both ends of a joined exchange leave the held spans (a later request on the
        connection is never theirs); their ids stay known until the hold ends."""
        for span_id, known in (
            (e["child_span_id"], self._linked),
            (e["parent_span_id"], self._parents),
        ):
            v = spans.pop(span_id, None)
            if v is not None:
                known[span_id] = v.end_ns
                if v.seq is not None:
                    self._by_seq.pop((str(v.exchange), v.side, v.seq), None)

    def _client_of(
        self, server: SpanView, spans: dict[str, SpanView]
    ) -> tuple[SpanView, str] | None:
        exchange = str(server.exchange)
        if server.seq is not None:
            client = self._by_seq.get((exchange, "client", server.seq))
            if client is not None:
                return client, names.TRACE_RULE_TCP_SEQ
        # No sequence number at one end: the client span of the same name whose time holds
        # the server's whole span (one HTTP/1 request at a time on a connection; the next
        # request starts after the client had its answer), the nearest start first.
        near = [
            c
            for c in _recent(spans, server.start_ns - CLOCK_SKEW_NS)
            if c.side == "client"
            and (c.seq is None or server.seq is None)
            and c.name == server.name
            and c.start_ns - CLOCK_SKEW_NS <= server.start_ns
            and server.end_ns <= c.end_ns + CLOCK_SKEW_NS
            and server.start_ns <= c.end_ns
        ]
        if not near:
            return None
        best = min(near, key=lambda c: (abs(server.start_ns - c.start_ns), c.span_id))
        return best, names.TRACE_RULE_CONNECTION

    def expire(self) -> None:
        before = self._newest_ns - HOLD_NS
        gone = set(_expire(self._by_exchange, before))
        self._by_seq = {k: v for k, v in self._by_seq.items() if v.span_id not in gone}
        self._linked = {k: end for k, end in self._linked.items() if end >= before}
        self._parents = {k: end for k, end in self._parents.items() if end >= before}

    def held_spans(self) -> int:
        return sum(len(spans) for spans in self._by_exchange.values())


class _Process:
    def __init__(self) -> None:
        self.servers: dict[int, dict[str, SpanView]] = {}  # by thread
        self.clients: dict[int, dict[str, SpanView]] = {}
        self.servers_by_id: dict[tuple[str, str], dict[str, SpanView]] = {}
        self.clients_by_id: dict[tuple[str, str], dict[str, SpanView]] = {}
        self.same_thread: dict[str, str] = {}  # client span id -> its same-thread parent
        # (client span id, rule) -> the server span it was linked to by that propagated id
        self.by_ids: dict[tuple[str, str], str] = {}


# A thread found multiplexed stays so this long after its last span (a restart that reads
# only the spans still held must not take a quiet event loop for a plain thread).
MULTIPLEXED_NS = 10 * HOLD_NS


class ProcessLinks:
    """Links inside one process: same thread, propagated ids, the asyncio task."""

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self._processes: dict[tuple[str, int], _Process] = {}
        self._multiplexed: dict[tuple[str, int, int], int] = {}  # (node, pid, tid) -> last
        self._newest_ns = 0

    def holds(self, v: SpanView) -> bool:
        proc = self._processes.get((v.node_id, v.pid))
        side = None if proc is None else proc.servers if v.side == "server" else proc.clients
        return side is not None and v.span_id in side.get(v.tid, {})

    def add(self, v: SpanView) -> list[dict[str, Any]]:
        self._newest_ns = max(self._newest_ns, v.end_ns)
        if v.end_ns < self._newest_ns - HOLD_NS:
            self.counters[LATE] += 1
            return []
        proc = self._processes.setdefault((v.node_id, v.pid), _Process())
        thread = (v.node_id, v.pid, v.tid)
        if thread in self._multiplexed:
            self._multiplexed[thread] = max(self._multiplexed[thread], v.end_ns)
        out: list[dict[str, Any]] = []
        if v.side == "server":
            self.counters[FORGOTTEN] += _put(proc.servers, v.tid, v)
            for key in v.propagated:
                self.counters[FORGOTTEN] += _put(proc.servers_by_id, key, v)
            out += self._server_came(proc, v)
            for key in v.propagated:
                for c in list(_recent(proc.clients_by_id.get(key, {}), v.start_ns)):
                    if v.encloses(c):
                        out += self._by_id(proc, c, key)
        else:
            self.counters[FORGOTTEN] += _put(proc.clients, v.tid, v)
            for key in v.propagated:
                self.counters[FORGOTTEN] += _put(proc.clients_by_id, key, v)
                out += self._by_id(proc, v, key)
            out += self._client_came(proc, v)
        self.counters[LINKED] += sum(1 for e in out if e["parent_span_id"])
        return out

    def _server_came(self, proc: _Process, server: SpanView) -> list[dict[str, Any]]:
        tid, thread = server.tid, (server.node_id, server.pid, server.tid)
        if thread in self._multiplexed:
            return []
        on_thread = proc.servers.get(tid, {})
        overlapping = any(
            s.span_id != server.span_id and s.start_ns < server.end_ns
            for s in _recent(on_thread, server.start_ns)
            if server.start_ns < s.end_ns
        )
        if overlapping:  # two requests at once on one thread: take its same-thread links back
            self._multiplexed[thread] = server.end_ns
            self.counters[MULTIPLEXED_THREADS] += 1
            out = []
            for child_id in list(proc.same_thread):
                child = proc.clients.get(tid, {}).get(child_id)
                if child is not None:
                    out.append(edge(None, child, names.TRACE_RULE_SAME_THREAD))
                    del proc.same_thread[child_id]
            self.counters[TAKEN_BACK] += len(out)
            return out
        out = []
        for c in _recent(proc.clients.get(tid, {}), server.start_ns):
            if c.span_id not in proc.same_thread and server.encloses(c):
                proc.same_thread[c.span_id] = server.span_id
                out.append(edge(server, c, names.TRACE_RULE_SAME_THREAD))
        out.reverse()  # oldest first, as they came
        return out

    def _client_came(self, proc: _Process, client: SpanView) -> list[dict[str, Any]]:
        thread = (client.node_id, client.pid, client.tid)
        if thread in self._multiplexed or client.span_id in proc.same_thread:
            return []
        around = [
            s
            for s in _recent(proc.servers.get(client.tid, {}), client.start_ns)
            if s.encloses(client)
        ]
        if len(around) != 1:  # more than one would overlap: the thread is then multiplexed
            return []
        proc.same_thread[client.span_id] = around[0].span_id
        return [edge(around[0], client, names.TRACE_RULE_SAME_THREAD)]

    def _by_id(
        self, proc: _Process, client: SpanView, key: tuple[str, str]
    ) -> list[dict[str, Any]]:
        """A client span inside a server span of the process that carries the same
        propagated id (or asyncio task) is its child by that rule, when exactly one held
        server span does; a second one found later takes the link back (two requests of one
        trace served side by side: which one made the call is not known)."""
        rule = key[0]
        around = [
            s
            for s in _recent(proc.servers_by_id.get(key, {}), client.start_ns)
            if s.encloses(client)
        ]
        linked = proc.by_ids.get((client.span_id, rule))
        if len(around) == 1 and linked is None:
            proc.by_ids[(client.span_id, rule)] = around[0].span_id
            return [edge(around[0], client, rule)]
        if len(around) > 1:
            self.counters[AMBIGUOUS] += 1
            if linked:
                proc.by_ids[(client.span_id, rule)] = ""
                self.counters[TAKEN_BACK] += 1
                return [edge(None, client, rule)]
            proc.by_ids[(client.span_id, rule)] = ""
        return []

    def expire(self) -> None:
        before = self._newest_ns - HOLD_NS
        for key in list(self._processes):
            proc = self._processes[key]
            _expire(proc.servers, before)
            gone_clients = set(_expire(proc.clients, before))
            _expire(proc.servers_by_id, before)
            _expire(proc.clients_by_id, before)
            for child in gone_clients:
                proc.same_thread.pop(child, None)
            proc.by_ids = {k: v for k, v in proc.by_ids.items() if k[0] not in gone_clients}
            if not proc.servers and not proc.clients:
                del self._processes[key]
        quiet = self._newest_ns - MULTIPLEXED_NS
        self._multiplexed = {k: t for k, t in self._multiplexed.items() if t >= quiet}

    def held_spans(self) -> int:
        return sum(
            sum(len(d) for d in p.servers.values()) + sum(len(d) for d in p.clients.values())
            for p in self._processes.values()
        )
