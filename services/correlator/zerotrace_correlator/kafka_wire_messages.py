"""What the bytes of a Kafka request or response mean: the request header and the bodies of
Produce (v0-13), Fetch (v0-18) and Metadata (v0-13). Pure.

Layouts follow the broker's JSON schemas (clients/src/main/resources/common/message) as of
Kafka 4.1. Flexible versions (Produce and Metadata from v9, Fetch from v12) use compact
lengths (a varint of n + 1) and tagged fields, which are stepped over.

A message is read by a generator (`Reader`) that yields what it needs next: n > 0 asks for
the next n bytes, sent back to it; n < 0 steps over -n bytes. The caller (kafka_wire.py) feeds
it as bytes arrive, so a split anywhere gives the same result, and keeps `Frame.remaining`
current so a declared length is checked against what its message can still hold. What a
body tells lands in its `Call`; a body that does not read raises Malformed, a header that
cannot be Kafka's raises NotKafka. Record batches are stepped over after their 61-byte
header (the record count): record data is never held.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from dataclasses import dataclass, field

from zerotrace_correlator.kafka_wire_codes import is_known_api

# Topic names are at most 249 characters (Kafka's own limit) and client ids are short names
# ("producer-1", "rdkafka"); a longer string keeps its first 1 KiB (long_strings).
MAX_STRING_BYTES = 1024
# Span attributes list topics joined by commas: a request naming more keeps the first ones.
MAX_TOPICS_KEPT = 16
# Distinct error codes kept per request; a response with more repeats a few across partitions.
MAX_ERRORS_KEPT = 8
# Topic id -> name learned from Metadata responses (v10+), for Produce/Fetch v13, which send
# ids only. A client's metadata names the topics it uses: tens, rarely thousands.
MAX_TOPIC_IDS = 1024
# A header past these is not Kafka's: keys are numbered from 0 as APIs are added (92 so far)
# and no API has reached version 20 (Fetch is at 18).
MAX_API_KEY = 1023
MAX_API_VERSION = 63

# Counter names (the parser's `counters`) for what is counted here.
UNDECODED_VERSIONS = "undecoded_versions"  # Produce/Fetch/Metadata past the versions decoded
UNKNOWN_API_KEYS = "unknown_api_keys"  # api keys this module does not name
LONG_STRINGS = "long_strings"  # MAX_STRING_BYTES
CAPPED_TOPIC_IDS = "capped_topic_ids"  # MAX_TOPIC_IDS

PRODUCE, FETCH, METADATA, SASL_HANDSHAKE = 0, 1, 3, 17
# api key -> (highest version decoded, first flexible version)
_DECODED = {PRODUCE: (13, 9), FETCH: (18, 12), METADATA: (13, 9)}
_REQUEST_HEAD = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_PARTITION_RESULT = struct.Struct(">ihq")  # index, error_code, base offset or high watermark
_BATCH = struct.Struct(">qiiB")  # v2 record batch: base offset, length, leader epoch, magic
_BATCH_HEADER_BYTES = 61  # up to and with the record count, at byte 57
_NO_ID = bytes(16)

Topic = tuple[str, bool]  # (name, or the topic id in hex; True for an id)
Reader = Generator[int, bytes, None]


class Malformed(Exception):
    """A body that does not read as its API's schema: stepped over, counted."""


class NotKafka(Exception):
    """A header that cannot be Kafka's: the framing is lost, the parser stops."""


@dataclass(slots=True)
class Call:
    """One request and what its response told; grows as the bytes are decoded."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    start_ns: int
    request_bytes: int = 0
    response_bytes: int = 0
    acks: int | None = None
    topics: list[Topic] = field(default_factory=list)
    topics_capped: bool = False
    partition: tuple[Topic, int] | None = None  # the first partition named
    several_partitions: bool = False
    errors: list[int] = field(default_factory=list)
    base_offset: int | None = None
    records: int | None = None  # None until a records field; -1 once an old-format one

    def add_topic(self, topic: Topic) -> None:
        if topic in self.topics:
            return
        if len(self.topics) < MAX_TOPICS_KEPT:
            self.topics.append(topic)
        else:
            self.topics_capped = True

    def add_partition(self, topic: Topic, index: int) -> None:
        self.add_topic(topic)
        if self.partition is None:
            self.partition = (topic, index)
        elif self.partition != (topic, index):
            self.several_partitions = True

    def add_error(self, code: int) -> None:
        if code and code not in self.errors and len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(code)


@dataclass(slots=True)
class Frame:
    """The message being read on one side: `remaining` is kept current by the reader, so a
    decoder checks a declared length against what its message can still hold."""

    size: int
    remaining: int
    first_ns: int
    counters: dict[str, int]
    topic_names: dict[str, str]
    call: Call | None = None
    undecoded: bool = False  # the body is stepped over on purpose: no tail to count


def read_request(frame: Frame) -> Reader:
    """The request header (api key, version, correlation id, client id) into a new
    frame.call, then the body when it is one decoded here and the frame is not `undecoded`."""
    api_key, version, correlation_id = _REQUEST_HEAD.unpack((yield 8))
    if not 0 <= api_key <= MAX_API_KEY or not 0 <= version <= MAX_API_VERSION:
        raise NotKafka(f"not a Kafka request header (api key {api_key}, version {version})")
    length = _I16.unpack((yield 2))[0]
    if not -1 <= length <= frame.remaining:
        raise NotKafka(f"client id of {length} bytes does not fit its request")
    client_id = (yield from _text(frame, length)) if length > 0 else None
    frame.call = call = Call(api_key, version, correlation_id, client_id, frame.first_ns)
    if not is_known_api(api_key):
        _count(frame.counters, UNKNOWN_API_KEYS)
    if _decodable(frame, api_key, version):
        yield from _REQUEST_BODIES[api_key](frame, call, version, _flexible(api_key, version))


def read_response(frame: Frame, call: Call) -> Reader:
    """A response's body after its correlation id, for the request `call` it answers."""
    key, version = call.api_key, call.version
    if _decodable(frame, key, version):
        yield from _RESPONSE_BODIES[key](frame, call, version, _flexible(key, version))


def _decodable(frame: Frame, api_key: int, version: int) -> bool:
    """Is this body one to decode? If not, the frame is marked so its rest is stepped over
    without being counted as an unread tail."""
    if not frame.undecoded and api_key in _DECODED:
        if version <= _DECODED[api_key][0]:
            return True
        _count(frame.counters, UNDECODED_VERSIONS)
    frame.undecoded = True
    return False


def _flexible(api_key: int, version: int) -> bool:
    return version >= _DECODED[api_key][1]


# -- bodies -------------------------------------------------------------------------------
# Each reads one API's body for one version, after the header (flexible: from the header's
# tagged fields on).


def _produce_request(f: Frame, call: Call, v: int, flexible: bool) -> Reader:
    if flexible:  # the header's
        yield from _tags(f)
    if v >= 3:
        yield from _skip_string(f, flexible)  # transactional id
    call.acks = _I16.unpack((yield 2))[0]
    yield -4  # timeout
    for _ in range((yield from _array(f, flexible, 2))):
        topic = yield from _topic(f, v >= 13, flexible)
        for _ in range((yield from _array(f, flexible, 5))):
            call.add_partition(topic, _I32.unpack((yield 4))[0])
            yield from _records(f, call, flexible)
            if flexible:
                yield from _tags(f)
        if flexible:
            yield from _tags(f)
    if flexible:
        yield from _tags(f)


def _produce_response(f: Frame, call: Call, v: int, flexible: bool) -> Reader:
    if flexible:  # the header's
        yield from _tags(f)
    for _ in range((yield from _array(f, flexible, 2))):
        topic = yield from _topic(f, v >= 13, flexible)
        for _ in range((yield from _array(f, flexible, 14))):
            # index, error, base offset; log append time (v2+), log start offset (v5+)
            fixed = yield 14 + (8 if v >= 2 else 0) + (8 if v >= 5 else 0)
            partition, error, base_offset = _PARTITION_RESULT.unpack_from(fixed)
            if call.base_offset is None:
                call.base_offset = base_offset
            call.add_partition(topic, partition)
            call.add_error(error)
            if v >= 8:
                for _ in range((yield from _array(f, flexible, 5))):  # record errors
                    yield -4
                    yield from _skip_string(f, flexible)
                    if flexible:
                        yield from _tags(f)
                yield from _skip_string(f, flexible)  # error message
            if flexible:
                yield from _tags(f)
        if flexible:
            yield from _tags(f)
    if v >= 1:
        yield -4  # throttle time
    if flexible:
        yield from _tags(f)


def _fetch_request(f: Frame, call: Call, v: int, flexible: bool) -> Reader:
    if flexible:  # the header's
        yield from _tags(f)
    # replica id (to v14), max wait, min bytes, max bytes (v3+), isolation (v4+), session (v7+)
    yield -((4 if v <= 14 else 0) + 8 + (4 if v >= 3 else 0) + (v >= 4) + (8 if v >= 7 else 0))
    # current leader epoch (v9+), fetch offset, last fetched epoch (v12+), log start (v5+), max
    rest = (4 if v >= 9 else 0) + 8 + (4 if v >= 12 else 0) + (8 if v >= 5 else 0) + 4
    for _ in range((yield from _array(f, flexible, 2))):
        topic = yield from _topic(f, v >= 13, flexible)
        for _ in range((yield from _array(f, flexible, 4 + rest))):
            call.add_partition(topic, _I32.unpack_from((yield 4 + rest))[0])
            if flexible:
                yield from _tags(f)
        if flexible:
            yield from _tags(f)
    if v >= 7:
        for _ in range((yield from _array(f, flexible, 2))):  # forgotten topics
            yield from _topic(f, v >= 13, flexible)
            yield from _int32s(f, flexible)
            if flexible:
                yield from _tags(f)
    if v >= 11:
        yield from _skip_string(f, flexible)  # rack
    if flexible:
        yield from _tags(f)


def _fetch_response(f: Frame, call: Call, v: int, flexible: bool) -> Reader:
    if flexible:  # the header's
        yield from _tags(f)
    if v >= 1:
        yield -4  # throttle time
    if v >= 7:
        call.add_error(_I16.unpack((yield 2))[0])
        yield -4  # session id
    rest = (8 if v >= 4 else 0) + (8 if v >= 5 else 0)  # last stable offset, log start offset
    for _ in range((yield from _array(f, flexible, 2))):
        topic = yield from _topic(f, v >= 13, flexible)
        for _ in range((yield from _array(f, flexible, 14 + rest))):
            partition, error, _ = _PARTITION_RESULT.unpack_from((yield 14 + rest))
            call.add_partition(topic, partition)
            call.add_error(error)
            if v >= 4:
                for _ in range((yield from _array(f, flexible, 16))):  # aborted transactions
                    yield -16
                    if flexible:
                        yield from _tags(f)
            if v >= 11:
                yield -4  # preferred read replica
            yield from _records(f, call, flexible)
            if flexible:
                yield from _tags(f)
        if flexible:
            yield from _tags(f)
    if flexible:
        yield from _tags(f)


def _metadata_request(f: Frame, call: Call, v: int, flexible: bool) -> Reader:
    if flexible:  # the header's
        yield from _tags(f)
    for _ in range((yield from _array(f, flexible, 1))):
        topic_id = (yield 16) if v >= 10 else _NO_ID
        name = yield from _string(f, flexible)
        if name is not None:
            call.add_topic((name, False))
        elif topic_id != _NO_ID:
            call.add_topic((topic_id.hex(), True))
        if flexible:
            yield from _tags(f)
    if flags := (v >= 4) + (8 <= v <= 10) + (v >= 8):
        yield -flags  # allow auto creation, include cluster and topic authorized operations
    if flexible:
        yield from _tags(f)


def _metadata_response(f: Frame, call: Call, v: int, flexible: bool) -> Reader:
    if flexible:  # the header's
        yield from _tags(f)
    if v >= 3:
        yield -4  # throttle time
    for _ in range((yield from _array(f, flexible, 10))):  # brokers
        yield -4
        yield from _skip_string(f, flexible)  # host
        yield -4
        if v >= 1:
            yield from _skip_string(f, flexible)  # rack
        if flexible:
            yield from _tags(f)
    if v >= 2:
        yield from _skip_string(f, flexible)  # cluster id
    if v >= 1:
        yield -4  # controller id
    for _ in range((yield from _array(f, flexible, 5))):
        call.add_error(_I16.unpack((yield 2))[0])
        name = yield from _string(f, flexible)
        if v >= 10:
            topic_id = (yield 16).hex()
            if name and topic_id not in f.topic_names:
                if len(f.topic_names) < MAX_TOPIC_IDS:
                    f.topic_names[topic_id] = name
                else:
                    _count(f.counters, CAPPED_TOPIC_IDS)
        if v >= 1:
            yield -1  # is internal
        for _ in range((yield from _array(f, flexible, 10))):
            # error, partition, leader, leader epoch (v7+)
            call.add_error(_I16.unpack_from((yield 10 if v < 7 else 14))[0])
            for _ in range(3 if v >= 5 else 2):  # replicas, in-sync replicas, offline replicas
                yield from _int32s(f, flexible)
            if flexible:
                yield from _tags(f)
        if v >= 8:
            yield -4  # topic authorized operations
        if flexible:
            yield from _tags(f)
    if 8 <= v <= 10:
        yield -4  # cluster authorized operations
    if v >= 13:
        call.add_error(_I16.unpack((yield 2))[0])
    if flexible:
        yield from _tags(f)


_REQUEST_BODIES = {
    PRODUCE: _produce_request,
    FETCH: _fetch_request,
    METADATA: _metadata_request,
}
_RESPONSE_BODIES = {
    PRODUCE: _produce_response,
    FETCH: _fetch_response,
    METADATA: _metadata_response,
}


# -- fields -------------------------------------------------------------------------------


def _uvarint() -> Generator[int, bytes, int]:
    value = shift = 0
    while True:
        byte = (yield 1)[0]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
        if shift > 28:
            raise Malformed


def _length(f: Frame, flexible: bool, wide: bool) -> Generator[int, bytes, int]:
    """A length: compact (varint of n + 1) in flexible versions, else int16 for strings and
    int32 for bytes and arrays; -1 is null. Never more than the message still holds."""
    if flexible:
        n = (yield 1)[0]  # a one-byte varint, nearly always
        if n & 0x80:
            n = (n & 0x7F) | (yield from _uvarint()) << 7
        n -= 1
    else:
        n = (_I32 if wide else _I16).unpack((yield 4 if wide else 2))[0]
    if not -1 <= n <= f.remaining:
        raise Malformed
    return n


def _text(f: Frame, n: int) -> Generator[int, bytes, str]:
    keep = min(n, MAX_STRING_BYTES)
    raw = yield keep
    if n > keep:
        _count(f.counters, LONG_STRINGS)
        yield keep - n
    return raw.decode("utf-8", "replace")


def _string(f: Frame, flexible: bool) -> Generator[int, bytes, str | None]:
    n = yield from _length(f, flexible, wide=False)
    if n < 0:
        return None
    return (yield from _text(f, n)) if n else ""


def _skip_string(f: Frame, flexible: bool) -> Reader:
    n = yield from _length(f, flexible, wide=False)
    if n > 0:
        yield -n


def _topic(f: Frame, by_id: bool, flexible: bool) -> Generator[int, bytes, Topic]:
    if by_id:
        return (yield 16).hex(), True
    return (yield from _string(f, flexible)) or "", False


def _array(f: Frame, flexible: bool, least: int) -> Generator[int, bytes, int]:
    """An array's element count (0 for null), refused when `least` bytes per element would
    not fit in the message: a hostile count never drives a long loop."""
    n = yield from _length(f, flexible, wide=True)
    if n * least > f.remaining:
        raise Malformed
    return max(n, 0)


def _int32s(f: Frame, flexible: bool) -> Reader:
    if n := (yield from _array(f, flexible, 4)):
        yield -4 * n


def _tags(f: Frame) -> Reader:
    """Tagged fields: none that we read, each stepped over by its size."""
    count = (yield 1)[0]
    if count == 0:  # nearly always: no tagged field
        return
    if count & 0x80:
        count = (count & 0x7F) | (yield from _uvarint()) << 7
    if count * 2 > f.remaining:
        raise Malformed
    for _ in range(count):
        yield from _uvarint()
        if size := (yield from _uvarint()):
            yield -size


def _records(f: Frame, call: Call, flexible: bool) -> Reader:
    """A records field: v2 batches are counted from their headers and stepped over; a
    message set of the older formats (magic 0 and 1) makes the count unknown. A fetch may end
    in a partial batch, which clients drop: it is not counted."""
    n = yield from _length(f, flexible, wide=True)
    if call.records is None:
        call.records = 0
    if 0 < n < _BATCH_HEADER_BYTES:
        call.records = -1  # shorter than any v2 batch: an old message set
    while n >= _BATCH_HEADER_BYTES:
        header = yield _BATCH_HEADER_BYTES
        n -= _BATCH_HEADER_BYTES
        _, length, _, magic = _BATCH.unpack_from(header)
        rest = length - (_BATCH_HEADER_BYTES - 12)
        if magic != 2:
            call.records = -1
        if magic != 2 or not 0 <= rest <= n:
            break
        if call.records >= 0:
            call.records += max(_I32.unpack_from(header, 57)[0], 0)
        if rest:
            yield -rest
            n -= rest
    if n > 0:
        yield -n


def _count(counters: dict[str, int], name: str) -> None:
    counters[name] = counters.get(name, 0) + 1
