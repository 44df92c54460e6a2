"""Kafka spans of one client connection, from the wire protocol (kafka.apache.org/protocol).
Pure.

Every message is a 4-byte size and that many bytes. A request starts with api_key,
api_version, correlation_id and client_id; a response starts with the correlation_id alone
and is paired by it with its request, since it carries no api key. Requests may be
pipelined (several in flight, answered in order); a Produce with acks=0 gets no response and
is a span of its own. kafka_wire_messages.py reads what each message says: this module frames
the bytes of both directions, feeds its readers wherever the bytes are split, pairs and builds
spans. Produce, Fetch and Metadata give topics, partitions, error codes, Produce's base offset
and record counts; every other API is named and its body stepped over.

Spans follow OpenTelemetry's messaging conventions, with v1.45's names (messaging.system.name,
kafka.offset). messaging.operation.name is "send" for Produce and "receive" for Fetch, and
messaging.operation.type the same, so a span reads like one from an instrumented client; any
other API is named by itself in snake case ("metadata", "api_versions"), with no type. The
span name is "<operation> <topic>" when one topic is involved ("send orders"), else the
operation alone; a non-zero error code anywhere makes the status "error", error.type the
first code's name ("NOT_LEADER_OR_FOLLOWER").

Bounded whatever a peer sends: a direction buffers one field at most (the size prefix, a
record batch header, a string of MAX_STRING_BYTES), record data and undecoded bodies are
stepped over as they pass, at most MAX_PENDING requests wait. A header that cannot be Kafka's
puts the parser in the terminal error state (the framing is lost); a body that does not
decode is stepped over by its size and counted (malformed_bodies).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from zerotrace import names
from zerotrace_correlator import kafka_wire_codes as codes
from zerotrace_correlator import kafka_wire_messages as msg
from zerotrace_correlator.protocol_span import (
    REQUEST,
    RESPONSE,
    AttributeValue,
    ProtoSpan,
    Side,
    Status,
)

# Frames past this have their header read and their body stepped over undecoded: a broker
# refuses requests over socket.request.max.bytes (100 MiB by default) and closes the
# connection, and consumers ask for at most fetch.max.bytes (50 MiB by default) per response.
MAX_FRAME_BYTES = 100 * 1024 * 1024
# Java clients keep at most max.in.flight.requests.per.connection (5 by default) unanswered;
# librdkafka and franz-go pipeline more. Past this the oldest goes out as incomplete.
MAX_PENDING = 256

# Counter names (`counters`), besides those kafka_wire_messages counts.
OVERSIZED_FRAMES = "oversized_frames"  # over MAX_FRAME_BYTES: body stepped over undecoded
MALFORMED_BODIES = "malformed_bodies"  # a decoded body did not read: the rest stepped over
UNREAD_TAILS = "unread_tails"  # a decoded body ended before its frame did
UNMATCHED_RESPONSES = "unmatched_responses"  # no request waits for their correlation id
EVICTED_REQUESTS = "evicted_requests"  # MAX_PENDING, or a correlation id reused: incomplete
CAPPED_TOPIC_LISTS = "capped_topic_lists"  # kafka_wire_messages.MAX_TOPICS_KEPT

OPERATION_SEND = "send"
OPERATION_RECEIVE = "receive"
_OPERATIONS = {msg.PRODUCE: OPERATION_SEND, msg.FETCH: OPERATION_RECEIVE}
_SASL_V0 = "SaslHandshake v0: raw SASL tokens follow, not Kafka framing"
_I32 = struct.Struct(">i")
_RECOGNISE_HEAD = struct.Struct(">ihhih")  # size, then the request header to client_id's length
_MIN_REQUEST = 10  # api key, version, correlation id, client id's length
_MIN_RESPONSE = 4  # correlation id


class _Direction:
    __slots__ = ("buf", "first_ns", "frame", "reader", "side", "want")

    def __init__(self, side: Side) -> None:
        self.side = side
        self.buf = bytearray()  # the size prefix, or a field split across feeds
        self.frame: msg.Frame | None = None
        self.reader: msg.Reader | None = None
        self.want = 0
        self.first_ns = 0


class KafkaWireParser:
    """A ProtocolParser for Kafka: the client's requests on REQUEST, the broker's on RESPONSE."""

    protocol = names.PROTOCOL_KAFKA

    def __init__(self) -> None:
        self._error = ""
        self._counters: dict[str, int] = {}
        self._pending: dict[int, msg.Call] = {}  # by correlation id, oldest first
        self._topic_names: dict[str, str] = {}
        self._sasl_v0: int | None = None  # correlation id of a SaslHandshake v0
        self._request = _Direction(REQUEST)
        self._response = _Direction(RESPONSE)

    @property
    def error(self) -> str:
        return self._error

    @property
    def counters(self) -> Mapping[str, int]:
        return self._counters

    def buffered_bytes(self) -> int:
        """Bytes held for fields not yet whole: at most 2 * MAX_STRING_BYTES."""
        return len(self._request.buf) + len(self._response.buf)

    def pending_requests(self) -> int:
        return len(self._pending)

    def feed(self, side: Side, data: bytes, start_ns: int, end_ns: int) -> list[ProtoSpan]:
        out: list[ProtoSpan] = []
        if not self._error and data:
            direction = self._request if side == REQUEST else self._response
            self._read(direction, data, start_ns, end_ns, out)
        return out

    def close(self, now_ns: int) -> list[ProtoSpan]:
        """Every request without its whole response, as an incomplete span ending now: those
        waiting, one whose response was being read, one whose own bytes were cut."""
        calls = list(self._pending.values())
        self._pending.clear()
        for d in (self._response, self._request):
            if d.frame is not None and d.frame.call is not None:
                calls.append(d.frame.call)
            d.frame, d.reader, d.want = None, None, 0
            d.buf.clear()
        return [self._span(call, now_ns, incomplete=True) for call in calls]

    # -- reading --------------------------------------------------------------------------

    def _read(
        self, d: _Direction, data: bytes, start_ns: int, end_ns: int, out: list[ProtoSpan]
    ) -> None:
        pos, end = 0, len(data)
        while pos < end and not self._error:
            frame, want = d.frame, d.want
            if frame is None:  # between messages: the size prefix
                if not d.buf:
                    d.first_ns = start_ns
                take = min(4 - len(d.buf), end - pos)
                d.buf += data[pos : pos + take]
                pos += take
                if len(d.buf) == 4:
                    size = int.from_bytes(d.buf, "big", signed=True)
                    d.buf.clear()
                    self._begin(d, size, end_ns, out)
            elif want < 0:  # stepping over
                take = min(-want, end - pos)
                pos += take
                frame.remaining -= take
                d.want += take
                if d.want == 0:
                    self._resume(d, b"", end_ns, out)
            elif d.buf or end - pos < want:  # a field split across feeds
                take = min(want - len(d.buf), end - pos)
                d.buf += data[pos : pos + take]
                pos += take
                if len(d.buf) == want:
                    chunk = bytes(d.buf)
                    d.buf.clear()
                    frame.remaining -= want
                    self._resume(d, chunk, end_ns, out)
            else:
                frame.remaining -= want
                pos += want
                self._resume(d, data[pos - want : pos], end_ns, out)

    def _begin(self, d: _Direction, size: int, end_ns: int, out: list[ProtoSpan]) -> None:
        request = d.side == REQUEST
        if self._sasl_v0 is not None and (request or self._sasl_v0 not in self._pending):
            self._error = _SASL_V0
            return
        if size < (_MIN_REQUEST if request else _MIN_RESPONSE):
            what = "request" if request else "response"
            self._error = f"frame of {size} bytes cannot hold a Kafka {what} header"
            return
        frame = msg.Frame(size, size, d.first_ns, self._counters, self._topic_names)
        if size > MAX_FRAME_BYTES:
            _count(self._counters, OVERSIZED_FRAMES)
            frame.undecoded = True
        d.frame = frame
        d.reader = msg.read_request(frame) if request else self._read_response(frame)
        self._resume(d, None, end_ns, out)

    def _resume(
        self, d: _Direction, value: bytes | None, end_ns: int, out: list[ProtoSpan]
    ) -> None:
        """Hands the reader what it asked for and takes its next want; at the end of its
        frame, the message is done."""
        frame, reader = d.frame, d.reader
        assert frame is not None
        want = -frame.remaining
        if reader is not None:
            try:
                asked = next(reader) if value is None else reader.send(value)
                while asked == 0:  # an empty field: answered at once
                    asked = reader.send(b"")
                if abs(asked) > frame.remaining:
                    reader.close()
                    raise msg.Malformed
                want = asked
            except StopIteration:
                d.reader = None
                if frame.remaining and not frame.undecoded:
                    _count(self._counters, UNREAD_TAILS)
            except msg.Malformed:
                d.reader = None
                _count(self._counters, MALFORMED_BODIES)
            except msg.NotKafka as reason:
                self._error = str(reason)
                return
        if want:
            d.want = want
            return
        d.frame, d.reader, d.want = None, None, 0
        if d.side == REQUEST:
            self._request_done(frame, end_ns, out)
        elif frame.call is not None:
            frame.call.response_bytes = frame.size + 4
            out.append(self._span(frame.call, end_ns))
            if self._sasl_v0 == frame.call.correlation_id:
                self._error = _SASL_V0

    def _request_done(self, frame: msg.Frame, end_ns: int, out: list[ProtoSpan]) -> None:
        call = frame.call
        assert call is not None  # the header was read, or the parser stopped
        call.request_bytes = frame.size + 4
        if call.topics_capped:
            _count(self._counters, CAPPED_TOPIC_LISTS)
        if call.api_key == msg.PRODUCE and call.acks == 0:
            out.append(self._span(call, end_ns))  # no response comes
            return
        if call.api_key == msg.SASL_HANDSHAKE and call.version == 0:
            self._sasl_v0 = call.correlation_id
        old = self._pending.pop(call.correlation_id, None)
        if old is None and len(self._pending) >= MAX_PENDING:
            old = self._pending.pop(next(iter(self._pending)))
        if old is not None:
            _count(self._counters, EVICTED_REQUESTS)
            out.append(self._span(old, call.start_ns, incomplete=True))
        self._pending[call.correlation_id] = call

    # -- messages -------------------------------------------------------------------------

    def _read_response(self, frame: msg.Frame) -> msg.Reader:
        correlation_id = _I32.unpack((yield 4))[0]
        call = self._pending.pop(correlation_id, None)
        if call is None:
            if frame.size > MAX_FRAME_BYTES:
                raise msg.NotKafka(f"response of {frame.size} bytes answers no request")
            _count(self._counters, UNMATCHED_RESPONSES)
            frame.undecoded = True
            return
        frame.call = call
        yield from msg.read_response(frame, call)

    # -- spans ----------------------------------------------------------------------------

    def _span(self, call: msg.Call, end_ns: int, incomplete: bool = False) -> ProtoSpan:
        operation = _OPERATIONS.get(call.api_key) or codes.snake_name(call.api_key)
        attributes: dict[str, AttributeValue] = {
            names.ATTR_MESSAGING_SYSTEM: names.PROTOCOL_KAFKA,
            names.ATTR_MESSAGING_OPERATION_NAME: operation,
            names.ATTR_KAFKA_API_KEY: call.api_key,
            names.ATTR_KAFKA_API_NAME: codes.api_name(call.api_key),
            names.ATTR_KAFKA_API_VERSION: call.version,
        }
        if call.api_key in _OPERATIONS:
            attributes[names.ATTR_MESSAGING_OPERATION_TYPE] = operation
        if call.client_id:
            attributes[names.ATTR_MESSAGING_CLIENT_ID] = call.client_id
        topics = [self._topic_names.get(t, t) if is_id else t for t, is_id in call.topics]
        name = operation
        if len(topics) == 1 and not call.topics_capped:
            name = f"{operation} {topics[0]}"
            attributes[names.ATTR_MESSAGING_DESTINATION] = topics[0]
            if call.topics[0][1]:
                attributes[names.ATTR_KAFKA_TOPIC_ID] = call.topics[0][0]
        elif topics:
            attributes[names.ATTR_KAFKA_TOPICS] = ",".join(topics)
        if call.partition is not None and not call.several_partitions:
            attributes[names.ATTR_MESSAGING_PARTITION] = str(call.partition[1])
            if call.base_offset is not None and call.base_offset >= 0 and not call.errors:
                attributes[names.ATTR_KAFKA_OFFSET] = call.base_offset
        if call.records is not None and call.records >= 0:
            attributes[names.ATTR_MESSAGING_BATCH_COUNT] = call.records
        errors = [codes.error_name(code) for code in call.errors]
        if errors:
            attributes[names.ATTR_ERROR_TYPE] = errors[0]
            if len(errors) > 1:
                attributes[names.ATTR_KAFKA_ERRORS] = ",".join(errors)
        status: Status = "incomplete" if incomplete else "error" if errors else "ok"
        return ProtoSpan(
            protocol=self.protocol,
            name=name,
            start_ns=call.start_ns,
            end_ns=max(end_ns, call.start_ns),
            status=status,
            attributes=attributes,
            error_type=errors[0] if errors and not incomplete else "",
            request_bytes=call.request_bytes,
            response_bytes=call.response_bytes,
        )


def recognise(first_request_bytes: bytes) -> bool:
    """Does a connection's first write start like a Kafka request? Needs the size and the
    header up to the client id's length (14 bytes): a size a broker takes, an api key Kafka
    names, a plausible version, a client id that fits and is printable. The bytes present are
    then read as the request: a body that does not decode, or acks other than -1, 0 or 1,
    rejects (bytes left after a body do not: librdkafka's all-topics Metadata has three).
    HTTP, TLS, Redis and SSH start with sizes over MAX_FRAME_BYTES; PostgreSQL's startup has
    NULs in its would-be client id; DNS over TCP fails the body."""
    data = first_request_bytes
    if len(data) < _RECOGNISE_HEAD.size:
        return False
    size, api_key, version, _, length = _RECOGNISE_HEAD.unpack_from(data)
    if not _MIN_REQUEST <= size <= MAX_FRAME_BYTES or not codes.is_known_api(api_key):
        return False
    if not 0 <= version <= msg.MAX_API_VERSION or not -1 <= length <= size - _MIN_REQUEST:
        return False
    client_id = data[_RECOGNISE_HEAD.size : _RECOGNISE_HEAD.size + max(length, 0)]
    if any(byte < 0x20 or byte == 0x7F for byte in client_id):
        return False
    parser = KafkaWireParser()
    parser.feed(REQUEST, data[: size + 4], 0, 0)
    frame = parser._request.frame
    call = frame.call if frame is not None else next(iter(parser._pending.values()), None)
    return (
        not parser.error
        and MALFORMED_BODIES not in parser.counters
        and (call is None or call.acks in (None, -1, 0, 1))
    )


def _count(counters: dict[str, int], name: str) -> None:
    counters[name] = counters.get(name, 0) + 1
