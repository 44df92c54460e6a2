"""Where a span's time went: connection set-up, request/server/response phases, file I/O.
Pure: time comes only from the records.

- Phases of an HTTP exchange, from the byte times conversation.py already keeps (writes at
  their start, reads at their end): request send (first to last request byte), server (last
  request byte to first response byte: on a server span the handler's time, on a client span
  also the network both ways) and response transfer (first to last response byte). Other
  protocols' parsers give a span's start and end only, so their spans get no phases.
- Connection set-up, from raw.conn: the connect time and TLS_HANDSHAKE's duration_ns (tls.c: the
  SSL*'s first SSL_do_handshake entry to the call that returned 1). The connect time is
  ESTABLISHED's duration_ns when there is one (a non-blocking connect: connect(2) entry to the
  socket's established state, socket.c "Non-blocking connects"), else CONNECT's (connect(2)
  entry to return, which is the established state for a blocking connect). A non-blocking
  connect's CONNECT has duration_ns 0 (connect returned EINPROGRESS at once; the collector
  writes 0, socket_records.conn_event_record), which is not a connect time: with no ESTABLISHED
  (a kernel without the tracepoint or the BTF offsets, or a connect that never completed) the
  span gets none. The records come in either order, before or after the first span; the
  CONNECT's start and peer still serve the DNS match. They go on the first span of the
  connection only: later requests on a kept-alive connection did not wait for them.
- DNS: the DNS client spans of the same process that ended before its connect started, at
  most DNS_WINDOW_NS before, one of whose answers is the connected peer's address; a resolver
  asks A and AAAA at once, so the resolution is every such span of that name from the first
  start to the last end. Looked up when the connection's first span is made (the DNS span has
  surely been made by then, even when raw.conn is read ahead of the DNS flow).
- File I/O: raw.fileio READ and WRITE records (fileio.c ZT_FILE_RW), kept per thread for
  FILE_KEEP_NS of event time; a SERVER span gets those its thread (the one that read the
  request) made inside the span: bytes, the calls' own time summed, calls, paths, and bytes
  under the configured KV-cache and model directories. A file record read after its span was
  made is not put on it (raw.fileio is its own topic): in the embedded node the read comes
  from the ring before the response it precedes, so it is there in time.

Memory is bounded: MAX_CONNECTIONS set-ups (least recently seen go first), MAX_DNS_PER_PID
DNS spans for each of MAX_PIDS processes, MAX_OPS_PER_THREAD file calls for each of
MAX_THREADS threads; everything dropped at a bound is counted.
"""

from __future__ import annotations

import ipaddress
import posixpath
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zerotrace import names

MAX_CONNECTIONS = 65_536  # as http_llm_step.MAX_CONNECTIONS
MAX_PIDS = 4_096
MAX_DNS_PER_PID = 64
MAX_THREADS = 4_096
MAX_OPS_PER_THREAD = 4_096
# getaddrinfo() then connect() follow each other at once; a process that resolved a name a
# while ago and connects now (a cached address) did not wait for that resolution.
DNS_WINDOW_NS = 2_000_000_000
# A/AAAA queries of one getaddrinfo() start together; spans of the name that started this much
# before the matching one belong to an earlier resolution.
DNS_GROUP_NS = 1_000_000_000
# File calls are kept this long (event time) for the span that will cover them: longer than a
# slow request, shorter than what a thread reading a model for minutes would pile up.
FILE_KEEP_NS = 120_000_000_000
MAX_PATHS = 8  # distinct paths listed on a span
# raw.conn and raw.socket are separate topics: a CONNECT or TLS_HANDSHAKE may be read after
# the connection's first span was made. That span is kept this long (event time past its end)
# and up to MAX_MADE of them, to be made again with the times (http_llm_step.CLOSE_GRACE_NS
# bounds the same skew).
LATE_NS = 30_000_000_000
MAX_MADE = 4_096
# Server spans of a thread kept for its file calls that come after them (as LATE_NS is for
# set-up times); a thread serves one request at a time, so a few are enough.
MAX_SERVED_PER_THREAD = 8
# The tags of file I/O under the configured directories (names.ATTR_FILE_TAGS).
TAG_KV_CACHE, TAG_MODEL = "kv_cache", "model"

DNS_CLIENT_KIND = names.protocol_span_kind(names.PROTOCOL_DNS, "client")
_READ_KEYS = (names.ATTR_FILE_READ_BYTES, names.ATTR_FILE_READ_DURATION, names.ATTR_FILE_READ_CALLS)
_WRITE_KEYS = (
    names.ATTR_FILE_WRITE_BYTES,
    names.ATTR_FILE_WRITE_DURATION,
    names.ATTR_FILE_WRITE_CALLS,
)

# Counter names (the correlator's counters).
DNS_SPANS_DROPPED = "timings_dns_spans_dropped"
FILE_OPS_DROPPED = "timings_file_ops_dropped"
SETUPS_DROPPED = "timings_setups_dropped"


@dataclass(frozen=True)
class FileDirs:
    """The directories whose files are tagged: KV cache and model weights. Absolute, normal."""

    kv_cache: tuple[str, ...] = ()
    model: tuple[str, ...] = ()

    @classmethod
    def parse(cls, kv_cache: str, model: str) -> FileDirs:
        """From ':'-separated lists (settings ZEROTRACE_KV_CACHE_DIRS, ZEROTRACE_MODEL_DIRS)."""
        return cls(_dirs(kv_cache), _dirs(model))

    def tag(self, path: str) -> str | None:
        """FILE_TAG_KV_CACHE, FILE_TAG_MODEL or None. A relative path (as the process passed
        it to open) cannot be placed and gets none."""
        if not path.startswith("/"):
            return None
        path = posixpath.normpath(path)
        for tag, dirs in (
            (TAG_KV_CACHE, self.kv_cache),
            (TAG_MODEL, self.model),
        ):
            if any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs):
                return tag
        return None


NO_DIRS = FileDirs()


def _dirs(text: str) -> tuple[str, ...]:
    return tuple(posixpath.normpath(d) for d in text.split(":") if d.strip().startswith("/"))


def phase_attributes(
    request_start_ns: int, request_end_ns: int, response_start_ns: int, response_end_ns: int
) -> dict[str, str]:
    """The three phases of an answered request (times of its first and last bytes)."""
    return {
        names.ATTR_REQUEST_SEND_DURATION: str(max(0, request_end_ns - request_start_ns)),
        names.ATTR_SERVER_DURATION: str(max(0, response_start_ns - request_end_ns)),
        names.ATTR_RESPONSE_TRANSFER_DURATION: str(max(0, response_end_ns - response_start_ns)),
    }


@dataclass
class _Setup:
    pid: int = 0
    connect_start_ns: int | None = None
    connect_ns: int | None = None  # CONNECT's, when it is a connect time (not 0)
    established_ns: int | None = None  # ESTABLISHED's: wins over connect_ns
    remote_addr: str = ""
    tls_ns: int | None = None


@dataclass(frozen=True)
class DnsLookup:
    pid: int
    start_ns: int
    end_ns: int
    name: str
    answers: frozenset[str]


@dataclass(frozen=True)
class _FileOp:
    start_ns: int
    end_ns: int
    write: bool
    size: int
    path: str


# raw.conn kinds that are set-up times.
_SETUP_KINDS = ("CONNECT", "ESTABLISHED", "TLS_HANDSHAKE")


def _take(setup: _Setup, record: Mapping[str, Any]) -> None:
    duration = int(record.get("duration_ns", 0))
    kind = record["kind"]
    if kind in ("CONNECT", "ESTABLISHED"):
        # Both start at connect()'s entry; a non-blocking CONNECT's 0 is no connect time.
        if kind == "ESTABLISHED":
            setup.established_ns = duration
        elif duration > 0:
            setup.connect_ns = duration
        setup.connect_start_ns = int(record["ts_ns"]) - duration
        setup.remote_addr = str(record.get("remote_addr", "")) or setup.remote_addr
    else:
        setup.tls_ns = duration


def _address(text: str) -> str:
    """One spelling per address: IPv4-mapped IPv6 as IPv4, IPv6 compressed."""
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        return text.strip()
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def dns_lookup_of(span: Mapping[str, Any]) -> DnsLookup | None:
    """A DNS client span (derived.span datum) as a lookup, when it carries a name."""
    attributes = span["attributes"]
    name = str(attributes.get(names.ATTR_DNS_QUESTION_NAME, ""))
    if span["kind"] != DNS_CLIENT_KIND or not name:
        return None
    answers = str(attributes.get(names.ATTR_DNS_ANSWERS, ""))
    return DnsLookup(
        int(span["pid"]),
        int(span["start_ns"]),
        int(span["end_ns"]),
        name,
        frozenset(_address(a) for a in answers.split(",") if a.strip()),
    )


def resolution_before(
    lookups: list[DnsLookup], remote_addr: str, connect_start_ns: int
) -> tuple[str, int, int] | None:
    """The resolution that gave remote_addr just before a connect that started at
    connect_start_ns: (name, first start, last end) of the lookups of that name (the
    process's own, oldest first), or None."""
    addr = _address(remote_addr)
    before = [
        lk
        for lk in lookups
        if lk.end_ns <= connect_start_ns and connect_start_ns - lk.end_ns <= DNS_WINDOW_NS
    ]
    hits = [lk for lk in before if addr in lk.answers]
    if not hits:
        return None
    match = max(hits, key=lambda lk: lk.end_ns)
    group = [
        lk
        for lk in before
        if lk.name == match.name and lk.start_ns >= match.start_ns - DNS_GROUP_NS
    ]
    return match.name, min(lk.start_ns for lk in group), max(lk.end_ns for lk in group)


class SpanTimings:
    """Feed it raw.conn and raw.fileio records and every span made; `annotate` adds the
    attributes to a span as it is made."""

    def __init__(self, dirs: FileDirs = NO_DIRS, counters: Counter[str] | None = None) -> None:
        self.dirs = dirs
        self.counters: Counter[str] = Counter() if counters is None else counters
        self._setups: OrderedDict[str, _Setup] = OrderedDict()
        # conn_id -> its first span, oldest first.
        self._made: OrderedDict[str, dict[str, Any]] = OrderedDict()
        # (pid, tid) -> its latest server spans, for file calls read after them; and those
        # of them that such a call falls in, by span id, to be made again (`late_spans`).
        self._served: OrderedDict[tuple[int, int], deque[dict[str, Any]]] = OrderedDict()
        self._dirty: dict[str, dict[str, Any]] = {}
        self._dns: OrderedDict[int, deque[DnsLookup]] = OrderedDict()
        self._files: OrderedDict[tuple[int, int], deque[_FileOp]] = OrderedDict()

    def on_conn(self, record: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A raw.conn datum: CONNECT, ESTABLISHED and TLS_HANDSHAKE are kept for the
        connection's first span; other kinds are not timings. When that span was made already
        (raw.conn is read out of step with raw.socket), it is returned again with the times
        added (when they change it): the same span id, for the store to replace."""
        kind = record["kind"]
        if kind not in _SETUP_KINDS:
            return []
        conn_id = str(record["conn_id"])
        self._expire(int(record["ts_ns"]))
        made = self._made.get(conn_id)
        if made is not None:
            late = _Setup(pid=int(record["pid"]))
            _take(late, record)
            added = self._setup_attributes(late)
            if all(made["attributes"].get(k) == v for k, v in added.items()):
                return []  # nothing new (a non-blocking CONNECT after its ESTABLISHED)
            again = {**made, "attributes": {**made["attributes"], **added}}
            self._made[conn_id] = again
            return [again]
        setup = self._setups.get(conn_id)
        if setup is None:
            while len(self._setups) >= MAX_CONNECTIONS:
                self._setups.popitem(last=False)
                self.counters[SETUPS_DROPPED] += 1
            setup = self._setups[conn_id] = _Setup(pid=int(record["pid"]))
        _take(setup, record)
        return []

    def _expire(self, now_ns: int) -> None:
        while self._made:
            conn_id, made = next(iter(self._made.items()))
            if now_ns - int(made["end_ns"]) < LATE_NS:
                break
            del self._made[conn_id]

    def on_file(self, record: Mapping[str, Any]) -> bool:
        """A raw.fileio datum: READ and WRITE are kept (True), OPEN is not (False)."""
        op = record["op"]
        if op not in ("READ", "WRITE"):
            return False
        key = (int(record["pid"]), int(record["tid"]))
        ops = self._files.get(key)
        if ops is None:
            while len(self._files) >= MAX_THREADS:
                _, dropped = self._files.popitem(last=False)
                self.counters[FILE_OPS_DROPPED] += len(dropped)
            ops = self._files[key] = deque()
        else:
            self._files.move_to_end(key)
        end_ns = int(record["end_ns"])
        while ops and (end_ns - ops[0].end_ns > FILE_KEEP_NS or len(ops) >= MAX_OPS_PER_THREAD):
            if len(ops) >= MAX_OPS_PER_THREAD:
                self.counters[FILE_OPS_DROPPED] += 1
            ops.popleft()
        size = max(0, int(record["result"]))
        start_ns = int(record["start_ns"])
        ops.append(_FileOp(start_ns, end_ns, op == "WRITE", size, str(record["path"])))
        for span in self._served.get(key, ()):
            if int(span["start_ns"]) <= start_ns and end_ns <= int(span["end_ns"]):
                self._dirty[str(span["span_id"])] = span  # a call read after its span
        return True

    def late_spans(self) -> list[dict[str, Any]]:
        """Server spans made before file calls inside them were read (raw.fileio is its own
        topic), made again with all of them: the same span id, for the store to replace.
        Called as event time moves (http_llm_step.advance) and at the end, so a span whose
        thread reads a file in many calls is made again once, not once a call."""
        out = []
        for span in self._dirty.values():
            span["attributes"].update(
                self.file_attributes(
                    int(span["pid"]), int(span["tid"]), int(span["start_ns"]), int(span["end_ns"])
                )
            )
            out.append({**span, "attributes": {**span["attributes"]}})
        self._dirty.clear()
        return out

    def annotate(self, conn_id: str, span: dict[str, Any], server: bool) -> None:
        """A span of connection conn_id as it is made: its attributes get the connection's
        set-up (first span only) and, on a server span, its thread's file I/O."""
        attributes = span["attributes"]
        setup = self._setups.pop(conn_id, None)
        if setup is not None:
            attributes.update(self._setup_attributes(setup))
        if conn_id not in self._made:
            # The connection's first span, kept a while for set-up times that come late.
            while len(self._made) >= MAX_MADE:
                self._made.popitem(last=False)
            self._made[conn_id] = span
        if server:
            key = (int(span["pid"]), int(span["tid"]))
            attributes.update(
                self.file_attributes(*key, int(span["start_ns"]), int(span["end_ns"]))
            )
            self._serve(key, span)

    def _serve(self, key: tuple[int, int], span: dict[str, Any]) -> None:
        spans = self._served.get(key)
        if spans is None:
            while len(self._served) >= MAX_THREADS:
                self._served.popitem(last=False)
            spans = self._served[key] = deque(maxlen=MAX_SERVED_PER_THREAD)
        else:
            self._served.move_to_end(key)
        spans.append(span)

    def on_span(self, span: Mapping[str, Any]) -> None:
        """Every span made (derived.span datum), whoever made it: DNS client spans are
        remembered for the connections that follow."""
        lookup = dns_lookup_of(span)
        if lookup is not None:
            self._remember(lookup)

    def _remember(self, lookup: DnsLookup) -> None:
        kept = self._dns.get(lookup.pid)
        if kept is None:
            while len(self._dns) >= MAX_PIDS:
                _, dropped = self._dns.popitem(last=False)
                self.counters[DNS_SPANS_DROPPED] += len(dropped)
            kept = self._dns[lookup.pid] = deque()
        else:
            self._dns.move_to_end(lookup.pid)
        if len(kept) >= MAX_DNS_PER_PID:
            kept.popleft()
            self.counters[DNS_SPANS_DROPPED] += 1
        kept.append(lookup)

    def _setup_attributes(self, setup: _Setup) -> dict[str, str]:
        out: dict[str, str] = {}
        connect_ns = setup.established_ns if setup.established_ns is not None else setup.connect_ns
        if connect_ns is not None:
            out[names.ATTR_CONNECT_DURATION] = str(connect_ns)
        if setup.connect_start_ns is not None:
            found = resolution_before(
                list(self._dns.get(setup.pid, ())), setup.remote_addr, setup.connect_start_ns
            )
            if found is not None:
                name, start_ns, end_ns = found
                out[names.ATTR_DNS_DURATION] = str(end_ns - start_ns)
                out[names.ATTR_DNS_RESOLVED_NAME] = name
        if setup.tls_ns is not None:
            out[names.ATTR_TLS_HANDSHAKE_DURATION] = str(setup.tls_ns)
        return out

    def file_attributes(self, pid: int, tid: int, start_ns: int, end_ns: int) -> dict[str, str]:
        """The reads and writes thread (pid, tid) made inside [start_ns, end_ns]."""
        ops = [
            op
            for op in self._files.get((pid, tid), ())
            if op.start_ns >= start_ns and op.end_ns <= end_ns
        ]
        if not ops:
            return {}
        out: dict[str, str] = {}
        for write, keys in ((False, _READ_KEYS), (True, _WRITE_KEYS)):
            mine = [op for op in ops if op.write == write]
            if mine:
                size_key, time_key, calls_key = keys
                out[size_key] = str(sum(op.size for op in mine))
                out[time_key] = str(sum(op.end_ns - op.start_ns for op in mine))
                out[calls_key] = str(len(mine))
        paths = list(dict.fromkeys(op.path for op in ops if op.path))
        if paths:
            out[names.ATTR_FILE_PATHS] = ",".join(paths[:MAX_PATHS])
        tagged: dict[str, int] = {}
        for op in ops:
            tag = self.dirs.tag(op.path)
            if tag is not None:
                tagged[tag] = tagged.get(tag, 0) + op.size
        if TAG_KV_CACHE in tagged:
            out[names.ATTR_FILE_KV_CACHE_BYTES] = str(tagged[TAG_KV_CACHE])
        if TAG_MODEL in tagged:
            out[names.ATTR_FILE_MODEL_BYTES] = str(tagged[TAG_MODEL])
        if tagged:
            out[names.ATTR_FILE_TAGS] = ",".join(sorted(tagged))
        return out
