"""DNS spans of one UDP flow or one TCP connection (RFC 1035, RFC 7766). Pure.

Over UDP each `feed` is one datagram and one message; over TCP each message is preceded by
its length in 2 bytes, and messages may be split across feeds or several come in one
(pipelining, RFC 7766 section 6.2.1). A query waits for the response that carries its id
and echoes its question (several can be in flight on one flow, answered in any order); the
pair is one span named "<type> <name>" ("A example.com"). dns_wire.py decodes a message.

Bounded: a TCP direction buffers at most its 2-byte length and MAX_MESSAGE_BYTES of one
message (the rest of a longer one is stepped over, counted in `cut_messages`), and at most
MAX_PENDING_QUERIES queries wait for their answers. A message whose header or question
cannot be read puts the parser in the terminal error state: the bytes are not DNS, or over
TCP the framing is lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from zerotrace import names
from zerotrace_correlator import dns_wire
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, AttributeValue, ProtoSpan, Side

Transport = Literal["udp", "tcp"]

# Bytes of one message kept for decoding. 4 KiB holds any message under the EDNS buffer sizes
# resolvers use (1232 since DNS flag day 2020, at most 4096), so every UDP answer; longer
# ones come over TCP (zone transfers, large DNSSEC sets), and their first 4 KiB still hold
# the header, the question and more than MAX_ANSWERS_KEPT answers. Also caps a UDP datagram.
MAX_MESSAGE_BYTES = 4096
# Queries waiting for an answer on one flow. A stub sends A and AAAA together; a forwarder
# reusing one socket (dnsmasq, CoreDNS) or a pipelining TCP client has tens to a few hundred
# in flight. Past this the oldest goes out as incomplete: over UDP, a lost query is never
# answered, so a long-lived socket would otherwise fill up with them.
MAX_PENDING_QUERIES = 256
_LENGTH_PREFIX = 2

# Counter names (`counters`): limits hit and messages skipped.
CUT_MESSAGES = "cut_messages"  # longer than MAX_MESSAGE_BYTES: only their start was decoded
EVICTED_QUERIES = "evicted_queries"  # MAX_PENDING_QUERIES: given as incomplete early
CAPPED_ANSWER_LISTS = "capped_answer_lists"  # dns_wire.MAX_ANSWERS_KEPT
RETRANSMITTED_QUERIES = "retransmitted_queries"  # same id and question while one waits
UNMATCHED_RESPONSES = "unmatched_responses"  # no query waits for them (joined mid-flow)
MISDIRECTED_MESSAGES = "misdirected_messages"  # a query on the response side, or the reverse
MALFORMED_RECORDS = "malformed_records"  # a record did not read: the answers stop there


def transport_of(first_request_bytes: bytes) -> Transport:
    """UDP when a flow's first query is a message by itself, TCP when it has a length before
    it. Never ambiguous for what `recognise` accepts: read from a TCP message's first byte,
    the question count is the message's flags (0x0100 with RD set, 0 without), never 1."""
    return "udp" if dns_wire.looks_like_query(first_request_bytes) else "tcp"


def recognise(first_request_bytes: bytes) -> bool:
    """Does a connection's first request start like a DNS query, over UDP (the message
    itself) or over TCP (after its 2-byte length)? See dns_wire.looks_like_query."""
    data = first_request_bytes
    if dns_wire.looks_like_query(data):
        return True
    declared = int.from_bytes(data[:_LENGTH_PREFIX], "big")
    return declared >= dns_wire.HEADER_BYTES + 5 and dns_wire.looks_like_query(
        data[_LENGTH_PREFIX : _LENGTH_PREFIX + declared]
    )


@dataclass(slots=True)
class _Query:
    message: dns_wire.Message
    start_ns: int
    wire_bytes: int


@dataclass(slots=True)
class _Framing:
    """One direction of a TCP connection: the length prefix and the message being read."""

    prefix: bytes = b""
    kept: bytearray = field(default_factory=bytearray)  # the message's first MAX_MESSAGE_BYTES
    declared: int = 0
    need: int = 0  # bytes of the message still to come
    start_ns: int = 0  # time of the feed that carried the prefix's first byte


class DnsParser:
    """A ProtocolParser for DNS: queries on the REQUEST side, responses on the RESPONSE side."""

    protocol = names.PROTOCOL_DNS

    def __init__(self, transport: Transport | None = None) -> None:
        """transport None: told by the first bytes fed, a query (`transport_of`): the
        correlator hands a flow over with its first datagram or TCP bytes, and does not
        know whether a socket is UDP or TCP."""
        self.transport: Transport | None = transport
        self._error = ""
        self._counters: dict[str, int] = {}
        # Waiting queries by (id, question name lower-cased, type), oldest first. The name is
        # compared without case: resolvers randomise it (DNS 0x20) and some echo it lowered.
        self._pending: dict[tuple[int, str, int], _Query] = {}
        self._framing = {REQUEST: _Framing(), RESPONSE: _Framing()}

    @property
    def error(self) -> str:
        return self._error

    @property
    def counters(self) -> Mapping[str, int]:
        return self._counters

    def buffered_bytes(self) -> int:
        """Bytes held for messages not yet whole (TCP): at most 2 * (2 + MAX_MESSAGE_BYTES)."""
        return sum(len(f.prefix) + len(f.kept) for f in self._framing.values())

    def pending_queries(self) -> int:
        return len(self._pending)

    def feed(self, side: Side, data: bytes, start_ns: int, end_ns: int) -> list[ProtoSpan]:
        out: list[ProtoSpan] = []
        if self._error or not data:
            return out
        if self.transport is None:
            self.transport = transport_of(data) if side == REQUEST else "tcp"
        if self.transport == "udp":
            cut = data[:MAX_MESSAGE_BYTES]
            self._message(side, cut, len(cut) == len(data), start_ns, end_ns, len(data), out)
        else:
            self._frame(side, data, start_ns, end_ns, out)
        return out

    def close(self, now_ns: int) -> list[ProtoSpan]:
        """Every query still waiting, as an incomplete span ending now; the error state, if
        any, does not hide queries read before it."""
        out = [self._incomplete(query, now_ns) for query in self._pending.values()]
        self._pending.clear()
        self._drop_partial()
        return out

    # -- framing --------------------------------------------------------------------------

    def _frame(
        self, side: Side, data: bytes, start_ns: int, end_ns: int, out: list[ProtoSpan]
    ) -> None:
        f = self._framing[side]
        pos, size = 0, len(data)
        while pos < size and not self._error:
            if f.need == 0:
                if not f.prefix and size - pos >= _LENGTH_PREFIX:
                    # Nothing buffered and a whole message here (the usual case): no buffering.
                    declared = int.from_bytes(data[pos : pos + _LENGTH_PREFIX], "big")
                    body = pos + _LENGTH_PREFIX
                    if dns_wire.HEADER_BYTES <= declared <= min(MAX_MESSAGE_BYTES, size - body):
                        message = data[body : body + declared]
                        wire = declared + _LENGTH_PREFIX
                        self._message(side, message, True, start_ns, end_ns, wire, out)
                        pos = body + declared
                        continue
                if not f.prefix:
                    f.start_ns = start_ns
                take = _LENGTH_PREFIX - len(f.prefix)
                f.prefix += data[pos : pos + take]
                pos += take
                if len(f.prefix) < _LENGTH_PREFIX:
                    return
                f.declared = f.need = int.from_bytes(f.prefix, "big")
                if f.declared < dns_wire.HEADER_BYTES:
                    self._fail(f"message shorter than a DNS header ({f.declared} bytes)")
                    return
                continue
            take = min(f.need, size - pos)
            room = MAX_MESSAGE_BYTES - len(f.kept)
            if room > 0:
                f.kept += data[pos : pos + min(take, room)]
            pos += take
            f.need -= take
            if f.need == 0:
                message, complete = bytes(f.kept), f.declared <= MAX_MESSAGE_BYTES
                f.prefix = b""
                f.kept.clear()
                wire = f.declared + _LENGTH_PREFIX
                self._message(side, message, complete, f.start_ns, end_ns, wire, out)

    # -- pairing --------------------------------------------------------------------------

    def _message(
        self, side: Side, buf: bytes, complete: bool, start_ns: int, end_ns: int,
        wire_bytes: int, out: list[ProtoSpan],
    ) -> None:  # fmt: skip
        message = dns_wire.decode(buf, complete)
        if isinstance(message, str):
            self._fail(message)
            return
        if not complete:
            self._count(CUT_MESSAGES)
        if message.answers_capped:
            self._count(CAPPED_ANSWER_LISTS)
        if message.records_malformed:
            self._count(MALFORMED_RECORDS)
        if message.is_response != (side == RESPONSE):
            self._count(MISDIRECTED_MESSAGES)
        elif side == REQUEST:
            self._query(message, start_ns, wire_bytes, out)
        else:
            self._response(message, end_ns, wire_bytes, out)

    def _query(
        self, message: dns_wire.Message, start_ns: int, wire_bytes: int, out: list[ProtoSpan]
    ) -> None:
        key = _key(message)
        if key in self._pending:
            # A retry of a query still waiting: the span runs from the first send, which is
            # when the asking application started waiting.
            self._count(RETRANSMITTED_QUERIES)
            return
        if len(self._pending) >= MAX_PENDING_QUERIES:
            oldest = next(iter(self._pending))
            out.append(self._incomplete(self._pending.pop(oldest), start_ns))
            self._count(EVICTED_QUERIES)
        self._pending[key] = _Query(message, start_ns, wire_bytes)

    def _response(
        self, message: dns_wire.Message, end_ns: int, wire_bytes: int, out: list[ProtoSpan]
    ) -> None:
        query = self._pending.pop(_key(message), None)
        if query is None and message.question_name is None:
            # Some error responses (FORMERR, NOTIMP) drop the question: the id alone pairs.
            key = next((k for k in self._pending if k[0] == message.id), None)
            query = None if key is None else self._pending.pop(key)
        if query is None:
            self._count(UNMATCHED_RESPONSES)
            return
        attributes = self._attributes(query.message)
        rcode = dns_wire.rcode_name(message.rcode)
        attributes[names.ATTR_DNS_RESPONSE_CODE] = rcode
        attributes[names.ATTR_DNS_ANSWER_COUNT] = message.answer_count
        attributes[names.ATTR_DNS_TRUNCATED] = message.truncated
        if message.answers:
            # OpenTelemetry's dns.answers is a string array; span attributes here are scalars.
            attributes[names.ATTR_DNS_ANSWERS] = ",".join(message.answers)
        failed = message.rcode != dns_wire.RCODE_NOERROR
        out.append(
            ProtoSpan(
                protocol=self.protocol,
                name=_span_name(query.message),
                start_ns=query.start_ns,
                end_ns=max(end_ns, query.start_ns),
                status="error" if failed else "ok",
                attributes=attributes,
                error_type=rcode if failed else "",
                request_bytes=query.wire_bytes,
                response_bytes=wire_bytes,
            )
        )

    def _incomplete(self, query: _Query, now_ns: int) -> ProtoSpan:
        return ProtoSpan(
            protocol=self.protocol,
            name=_span_name(query.message),
            start_ns=query.start_ns,
            end_ns=max(now_ns, query.start_ns),
            status="incomplete",
            attributes=self._attributes(query.message),
            request_bytes=query.wire_bytes,
        )

    def _attributes(self, query: dns_wire.Message) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {
            names.ATTR_NETWORK_TRANSPORT: self.transport or "tcp"
        }
        if query.question_name is not None:
            attributes[names.ATTR_DNS_QUESTION_NAME] = query.question_name
            attributes[names.ATTR_DNS_QUESTION_TYPE] = dns_wire.type_name(query.question_type)
        return attributes

    def _count(self, name: str) -> None:
        self._counters[name] = self._counters.get(name, 0) + 1

    def _fail(self, reason: str) -> None:
        self._error = reason
        self._drop_partial()

    def _drop_partial(self) -> None:
        for framing in self._framing.values():
            framing.prefix, framing.need = b"", 0
            framing.kept.clear()


def _key(message: dns_wire.Message) -> tuple[int, str, int]:
    return message.id, (message.question_name or "").lower(), message.question_type


def _span_name(query: dns_wire.Message) -> str:
    """The type and name for a query ("A example.com"), the opcode and name for the other
    opcodes ("NOTIFY example.com"), the opcode alone without a question."""
    if query.question_name is None:
        return dns_wire.opcode_name(query.opcode)
    if query.opcode == dns_wire.OPCODE_QUERY:
        what = dns_wire.type_name(query.question_type)
    else:
        what = dns_wire.opcode_name(query.opcode)
    return f"{what} {query.question_name}"
