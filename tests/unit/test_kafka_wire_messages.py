"""kafka_wire_messages.py: what a Kafka request or response says. The messages are built here
field by field from the broker's JSON schemas (the builders below, which test_kafka_wire.py
uses too); for the versions aiokafka speaks (all before the flexible ones) the builders are
checked byte for byte against aiokafka's own encoder, and real record batches come from its
batch builder."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest
from aiokafka.protocol import fetch as ak_fetch
from aiokafka.protocol import metadata as ak_metadata
from aiokafka.protocol import produce as ak_produce
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator import kafka_wire_messages as msg
from zerotrace_correlator.kafka_wire_messages import Call, Frame

pytestmark = pytest.mark.unit

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18
ORDERS_ID = "5f1e2d3c4b5a69788796a5b4c3d2e1f0"
GONE_ID = "00112233445566778899aabbccddeeff"
NOT_LEADER, UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID, OFFSET_OUT_OF_RANGE = 6, 3, 100, 1

# --- builders (clients/src/main/resources/common/message/*.json) ---------------------------


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def string(s: str | None, flex: bool) -> bytes:
    if s is None:
        return uvarint(0) if flex else i16(-1)
    raw = s.encode()
    return (uvarint(len(raw) + 1) if flex else i16(len(raw))) + raw


def blob(b: bytes | None, flex: bool) -> bytes:
    if b is None:
        return uvarint(0) if flex else i32(-1)
    return (uvarint(len(b) + 1) if flex else i32(len(b))) + b


def array(items: Sequence[bytes] | None, flex: bool) -> bytes:
    if items is None:
        return uvarint(0) if flex else i32(-1)
    return (uvarint(len(items) + 1) if flex else i32(len(items))) + b"".join(items)


def tags(flex: bool, fields: dict[int, bytes] | None = None) -> bytes:
    """A tagged-field section (empty unless `fields`); nothing in non-flexible versions."""
    if not flex:
        return b""
    fields = fields or {}
    out = uvarint(len(fields))
    for tag, data in sorted(fields.items()):
        out += uvarint(tag) + uvarint(len(data)) + data
    return out


def topic_field(topic: str, v: int, by_id_from: int, flex: bool) -> bytes:
    return bytes.fromhex(topic) if v >= by_id_from else string(topic, flex)


def batch(count: int, payload: bytes = b"", magic: int = 2) -> bytes:
    """A record batch header (v2 layout) that says `count` records, then `payload`."""
    length = 49 + len(payload)
    return (
        i64(0) + i32(length) + i32(0) + i8(magic) + i32(0) + i16(0) + i32(count - 1)
        + i64(0) + i64(0) + i64(-1) + i16(-1) + i32(-1) + i32(count) + payload
    )  # fmt: skip


def real_batch(values: Sequence[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def request(api_key: int, v: int, corr: int, client_id: str | None, body: bytes) -> bytes:
    flex = (api_key, v) in FLEXIBLE_HEADERS
    message = i16(api_key) + i16(v) + i32(corr) + string(client_id, False) + tags(flex) + body
    return i32(len(message)) + message


def response(corr: int, body: bytes, flex: bool) -> bytes:
    message = i32(corr) + tags(flex) + body
    return i32(len(message)) + message


FLEXIBLE_HEADERS = {
    *((PRODUCE, v) for v in range(9, 14)),
    *((FETCH, v) for v in range(12, 19)),
    *((METADATA, v) for v in range(9, 14)),
    *((API_VERSIONS, v) for v in range(3, 5)),
}

Parts = Sequence[tuple[int, bytes | None]]


def produce_request(
    v: int, topics: Sequence[tuple[str, Parts]], acks: int = -1, txn: str | None = None
) -> bytes:
    flex = v >= 9
    entries = [
        topic_field(t, v, 13, flex)
        + array([i32(p) + blob(rec, flex) + tags(flex) for p, rec in parts], flex)
        + tags(flex)
        for t, parts in topics
    ]
    head = string(txn, flex) if v >= 3 else b""
    return head + i16(acks) + i32(30_000) + array(entries, flex) + tags(flex)


def produce_response(v: int, topics: Sequence[tuple[str, Sequence[tuple[int, int, int]]]]) -> bytes:
    flex = v >= 9
    entries = []
    for t, parts in topics:
        rows = []
        for p, error, base in parts:
            row = i32(p) + i16(error) + i64(base)
            row += (i64(-1) if v >= 2 else b"") + (i64(0) if v >= 5 else b"")
            if v >= 8:
                errors = [i32(0) + string("bad record", flex) + tags(flex)] if error else []
                row += array(errors, flex) + string("oops" if error else None, flex)
            # v10 puts the current leader in tag 0 of a partition that failed: stepped over.
            row += tags(flex, {0: i32(2) + i32(7)} if error and v >= 10 else None)
            rows.append(row)
        entries.append(topic_field(t, v, 13, flex) + array(rows, flex) + tags(flex))
    return array(entries, flex) + (i32(0) if v >= 1 else b"") + tags(flex)


def fetch_request(
    v: int, topics: Sequence[tuple[str, Sequence[int]]], forgotten: Sequence[str] = ()
) -> bytes:
    flex = v >= 12
    body = (i32(-1) if v <= 14 else b"") + i32(500) + i32(1)
    body += (i32(52_428_800) if v >= 3 else b"") + (i8(0) if v >= 4 else b"")
    body += i32(0) + i32(-1) if v >= 7 else b""
    entries = []
    for t, parts in topics:
        rows = [
            i32(p) + (i32(-1) if v >= 9 else b"") + i64(42) + (i32(-1) if v >= 12 else b"")
            + (i64(-1) if v >= 5 else b"") + i32(1 << 20) + tags(flex)
            for p in parts
        ]  # fmt: skip
        entries.append(topic_field(t, v, 13, flex) + array(rows, flex) + tags(flex))
    body += array(entries, flex)
    if v >= 7:
        gone = [topic_field(t, v, 13, flex) + array([i32(0)], flex) + tags(flex) for t in forgotten]
        body += array(gone, flex)
    if v >= 11:
        body += string("rack-a", flex)
    return body + tags(flex, {0: string("cluster-1", True)} if v >= 12 else None)


FetchParts = Sequence[tuple[int, int, bytes | None]]


def fetch_response(v: int, topics: Sequence[tuple[str, FetchParts]], error: int = 0) -> bytes:
    flex = v >= 12
    body = (i32(0) if v >= 1 else b"") + (i16(error) + i32(0) if v >= 7 else b"")
    entries = []
    for t, parts in topics:
        rows = []
        for p, err, records in parts:
            row = i32(p) + i16(err) + i64(100) + (i64(100) if v >= 4 else b"")
            row += i64(0) if v >= 5 else b""
            if v >= 4:  # one aborted transaction, or null
                aborted = [i64(9) + i64(50) + tags(flex)] if err == 0 else None
                row += array(aborted, flex)
            row += (i32(-1) if v >= 11 else b"") + blob(records, flex)
            rows.append(row + tags(flex, {1: i32(1) + i32(3)} if err and flex else None))
        entries.append(topic_field(t, v, 13, flex) + array(rows, flex) + tags(flex))
    return body + array(entries, flex) + tags(flex)


def metadata_request(v: int, topics: Sequence[str] | None, by_id: Sequence[str] = ()) -> bytes:
    flex = v >= 9
    entries = None
    if topics is not None:
        entries = [(bytes(16) if v >= 10 else b"") + string(t, flex) + tags(flex) for t in topics]
        entries += [bytes.fromhex(t) + string(None, flex) + tags(flex) for t in by_id]
    body = array(entries if entries is not None or v >= 1 else [], flex)
    body += (i8(1) if v >= 4 else b"") + (i8(0) if 8 <= v <= 10 else b"")
    return body + (i8(0) if v >= 8 else b"") + tags(flex)


MetaTopics = Sequence[tuple[int, str, str, Sequence[tuple[int, int]]]]


def metadata_response(v: int, topics: MetaTopics, error: int = 0) -> bytes:
    """topics: (error, name, topic id in hex, [(partition error, partition)])."""
    flex = v >= 9
    broker = i32(1) + string("broker-1", flex) + i32(9092)
    broker += (string(None, flex) if v >= 1 else b"") + tags(flex)
    body = (i32(0) if v >= 3 else b"") + array([broker], flex)
    body += (string("cluster-1", flex) if v >= 2 else b"") + (i32(1) if v >= 1 else b"")
    entries = []
    for err, name, topic_id, parts in topics:
        rows = [
            i16(perr) + i32(p) + i32(1) + (i32(0) if v >= 7 else b"")
            + array([i32(1), i32(2)], flex) + array([i32(1)], flex)
            + (array([], flex) if v >= 5 else b"") + tags(flex)
            for perr, p in parts
        ]  # fmt: skip
        entry = i16(err) + string(name, flex) + (bytes.fromhex(topic_id) if v >= 10 else b"")
        entry += (i8(0) if v >= 1 else b"") + array(rows, flex)
        entries.append(entry + (i32(0) if v >= 8 else b"") + tags(flex))
    body += array(entries, flex) + (i32(0) if 8 <= v <= 10 else b"")
    return body + (i16(error) if v >= 13 else b"") + tags(flex)


# --- a minimal driver of the Reader protocol -----------------------------------------------


def frame_for(message: bytes, topic_names: dict[str, str] | None = None) -> Frame:
    size = int.from_bytes(message[:4], "big", signed=True)
    return Frame(size, size, 0, {}, topic_names if topic_names is not None else {})


def drive(reader: msg.Reader, frame: Frame, body: bytes) -> None:
    """Gives the reader what it asks, from `body`, until it is done."""
    pos = 0
    want = next(reader)
    while True:
        if want > 0:
            value = body[pos : pos + want]
            assert len(value) == want, "the reader asked past the message"
        else:
            value = b""
        pos += abs(want)
        frame.remaining -= abs(want)
        try:
            want = reader.send(value)
        except StopIteration:
            return


def decode_request(message: bytes) -> tuple[Call, Frame]:
    frame = frame_for(message)
    drive(msg.read_request(frame), frame, message[4:])
    assert frame.call is not None
    return frame.call, frame


def decode_response(call: Call, message: bytes, names: dict[str, str] | None = None) -> Frame:
    frame = frame_for(message, names)
    frame.remaining -= 4
    drive(msg.read_response(frame, call), frame, message[8:])
    return frame


# --- the builders are the protocol: aiokafka's encoder agrees -------------------------------


@pytest.mark.parametrize("v", range(3, 9))
def test_produce_builders_match_aiokafka(v: int) -> None:
    records = batch(2)
    ours = produce_request(v, [("orders", [(0, records), (1, None)])], txn="tx-1")
    theirs = getattr(ak_produce, f"ProduceRequest_v{v}")(
        "tx-1", -1, 30_000, [("orders", [(0, records), (1, None)])]
    ).encode()
    assert ours == theirs
    parts = [(0, 0, 42)]
    response_cls = getattr(ak_produce, f"ProduceResponse_v{v}")
    extra: tuple[object, ...] = (-1, 0, [], None) if v >= 8 else (-1, 0) if v >= 5 else (-1,)
    assert (
        produce_response(v, [("orders", parts)])
        == response_cls([("orders", [(0, 0, 42, *extra)])], 0).encode()
    )


@pytest.mark.parametrize("v", range(4, 12))
def test_fetch_request_builder_matches_aiokafka(v: int) -> None:
    parts = [
        (p, *((-1,) if v >= 9 else ()), 42, *((-1,) if v >= 5 else ()), 1 << 20) for p in (0, 1)
    ]
    fields: list[object] = [-1, 500, 1, 52_428_800, 0]
    if v >= 7:
        fields += [0, -1]
    fields.append([("orders", parts)])
    if v >= 7:
        fields.append([("old", [0])])
    if v >= 11:
        fields.append("rack-a")
    theirs = getattr(ak_fetch, f"FetchRequest_v{v}")(*fields).encode()
    assert fetch_request(v, [("orders", [0, 1])], forgotten=["old"]) == theirs


@pytest.mark.parametrize("v", range(1, 6))
def test_metadata_request_builder_matches_aiokafka(v: int) -> None:
    theirs = getattr(ak_metadata, f"MetadataRequest_v{v}")(["orders"], *([True] if v >= 4 else []))
    assert metadata_request(v, ["orders"]) == theirs.encode()


# --- every version of the three decoded APIs ------------------------------------------------


@pytest.mark.parametrize("v", range(14))
def test_produce_every_version(v: int) -> None:
    topic = ORDERS_ID if v >= 13 else "orders"
    records = batch(3, b"r" * 20) + batch(2) if v >= 3 else b"\0" * 40  # v0-2: message sets
    call, frame = decode_request(
        request(PRODUCE, v, 7, "producer-1", produce_request(v, [(topic, [(4, records)])]))
    )
    assert (call.api_key, call.version, call.correlation_id) == (PRODUCE, v, 7)
    assert call.client_id == "producer-1"
    assert call.acks == -1
    assert call.topics == [(topic, v >= 13)]
    assert call.partition == ((topic, v >= 13), 4) and not call.several_partitions
    assert call.records == (5 if v >= 3 else -1)
    assert frame.remaining == 0 and frame.counters == {}
    decode_response(
        call, response(7, produce_response(v, [(topic, [(4, NOT_LEADER, 99)])]), v >= 9)
    )
    assert call.errors == [NOT_LEADER]
    assert call.base_offset == 99


@pytest.mark.parametrize("v", range(19))
def test_fetch_every_version(v: int) -> None:
    topic = ORDERS_ID if v >= 13 else "orders"
    call, frame = decode_request(
        request(
            FETCH,
            v,
            1,
            "consumer-1",
            fetch_request(v, [(topic, [0, 1])], [GONE_ID if v >= 13 else "gone"]),
        )
    )
    assert call.topics == [(topic, v >= 13)]
    assert call.several_partitions
    assert frame.remaining == 0 and frame.counters == {}
    records = real_batch([b"a", b"b", b"c"]) if v >= 4 else None
    body = fetch_response(v, [(topic, [(0, 0, records), (1, OFFSET_OUT_OF_RANGE, None)])], 0)
    frame = decode_response(call, response(1, body, v >= 12))
    assert frame.remaining == 0
    assert call.errors == [OFFSET_OUT_OF_RANGE]
    assert call.records == (3 if v >= 4 else 0)


@pytest.mark.parametrize("v", range(14))
def test_metadata_every_version(v: int) -> None:
    call, frame = decode_request(request(METADATA, v, 2, None, metadata_request(v, ["orders"])))
    assert call.client_id is None
    assert call.topics == [("orders", False)]
    assert frame.remaining == 0
    names: dict[str, str] = {}
    topics = [(UNKNOWN_TOPIC, "orders", ORDERS_ID, [(0, 0), (5, 1)])]
    frame = decode_response(call, response(2, metadata_response(v, topics), v >= 9), names)
    assert frame.remaining == 0
    assert call.errors == [UNKNOWN_TOPIC, 5]
    assert names == ({ORDERS_ID: "orders"} if v >= 10 else {})


def test_metadata_for_all_topics_and_by_id() -> None:
    call, _ = decode_request(request(METADATA, 12, 2, None, metadata_request(12, None)))
    assert call.topics == []
    by_id = metadata_request(12, [], by_id=[ORDERS_ID])
    call, _ = decode_request(request(METADATA, 12, 3, None, by_id))
    assert call.topics == [(ORDERS_ID, True)]
    call = Call(METADATA, 13, 4, None, 0)
    decode_response(call, response(4, metadata_response(13, [], error=129), True))
    assert call.errors == [129]  # REBOOTSTRAP_REQUIRED, the top-level code of v13


def test_topic_ids_learned_up_to_the_cap() -> None:
    names = {f"{i:032x}": f"t{i}" for i in range(msg.MAX_TOPIC_IDS)}
    call = Call(METADATA, 12, 1, None, 0)
    frame = decode_response(
        call, response(1, metadata_response(12, [(0, "orders", ORDERS_ID, [])]), True), names
    )
    assert ORDERS_ID not in names and len(names) == msg.MAX_TOPIC_IDS
    assert frame.counters == {msg.CAPPED_TOPIC_IDS: 1}


# --- records ---------------------------------------------------------------------------------


def produce_with(records: bytes | None) -> Call:
    return decode_request(request(PRODUCE, 9, 1, "p", produce_request(9, [("t", [(0, records)])])))[
        0
    ]


def test_real_batches_are_counted() -> None:
    records = real_batch([b"x" * 100] * 7) + real_batch([b"y"] * 5)
    assert produce_with(records).records == 12


def test_a_partial_last_batch_is_not_counted() -> None:
    whole = real_batch([b"a"] * 4)
    assert produce_with(whole + whole[:70]).records == 4
    assert produce_with(whole + whole[:30]).records == 4


def test_old_message_sets_make_the_count_unknown() -> None:
    assert produce_with(batch(3, magic=1)).records == -1
    assert produce_with(b"\0" * 30).records == -1  # shorter than any v2 batch header
    assert produce_with(None).records == 0
    assert produce_with(b"").records == 0


# --- hostile bytes -----------------------------------------------------------------------------


def partial(message: bytes) -> tuple[msg.Reader, Frame]:
    frame = frame_for(message)
    return msg.read_request(frame), frame


def test_huge_array_counts_are_refused_at_once() -> None:
    body = string(None, False) + i16(1) + i32(0) + i32(0x7FFFFFFF)
    with pytest.raises(msg.Malformed):
        decode_request(request(PRODUCE, 3, 1, "p", body))
    flex = uvarint(0) + i16(1) + i32(0) + uvarint(1 << 28)
    with pytest.raises(msg.Malformed):
        decode_request(request(PRODUCE, 9, 1, "p", flex))


def test_overlong_varints_and_lengths_are_refused() -> None:
    with pytest.raises(msg.Malformed):
        decode_request(request(PRODUCE, 9, 1, "p", b"\xff" * 6))
    with pytest.raises(msg.Malformed):
        decode_request(request(PRODUCE, 3, 1, "p", i16(-5)))
    with pytest.raises(msg.Malformed):  # a string longer than its message
        decode_request(request(METADATA, 1, 1, "p", i32(1) + i16(300) + b"x" * 10))


def test_tagged_field_counts_are_refused_past_the_message() -> None:
    with pytest.raises(msg.Malformed):
        decode_request(request(METADATA, 12, 1, "p", uvarint(100) + b"\0"))


def test_long_strings_keep_their_start() -> None:
    name = "t" * (msg.MAX_STRING_BYTES + 500)
    call, frame = decode_request(request(METADATA, 1, 1, "c" * 5000, metadata_request(1, [name])))
    assert call.topics == [(name[: msg.MAX_STRING_BYTES], False)]
    assert call.client_id == "c" * msg.MAX_STRING_BYTES
    assert frame.counters == {msg.LONG_STRINGS: 2}
    assert frame.remaining == 0


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (i16(-1) + i16(0) + i32(0) + i16(-1), "api key -1"),
        (i16(3) + i16(500) + i32(0) + i16(-1), "version 500"),
        (i16(3) + i16(1) + i32(0) + i16(200), "client id of 200 bytes"),
        (i16(3) + i16(1) + i32(0) + i16(-7), "client id of -7 bytes"),
    ],
)
def test_headers_that_cannot_be_kafka(head: bytes, reason: str) -> None:
    message = i32(len(head)) + head
    with pytest.raises(msg.NotKafka, match=reason):
        decode_request(message)


def test_versions_past_those_decoded_are_stepped_over() -> None:
    message = request(PRODUCE, 14, 1, "p", b"\0" * 50)
    call, frame = decode_request(message)
    assert frame.undecoded and frame.remaining == 50
    assert frame.counters == {msg.UNDECODED_VERSIONS: 1}
    assert call.topics == []


def test_other_apis_are_header_only() -> None:
    call, frame = decode_request(request(API_VERSIONS, 3, 0, "adminclient-1", b"\x07rdkafka\0"))
    assert (call.api_key, call.client_id) == (API_VERSIONS, "adminclient-1")
    assert frame.undecoded and frame.counters == {}
    _, frame = decode_request(request(500, 0, 0, None, b""))
    assert frame.counters == {msg.UNKNOWN_API_KEYS: 1}


@settings(max_examples=400, deadline=None)
@given(
    api=st.sampled_from([PRODUCE, FETCH, METADATA]),
    v=st.integers(0, 18),
    body=st.binary(max_size=300),
)
def test_garbage_bodies_end_in_malformed_or_a_clean_read(api: int, v: int, body: bytes) -> None:
    """Whatever the body, the reader ends by returning or by Malformed (never another
    exception), and never asks to be handed more than one string's worth of bytes at once:
    the most a parser ever buffers."""
    message = request(api, v, 1, "c", body)
    reader, frame = partial(message)
    data, pos = message[4:], 0
    try:
        want = next(reader)
        while abs(want) <= frame.remaining:
            assert want <= msg.MAX_STRING_BYTES
            value = data[pos : pos + want] if want > 0 else b""
            pos += abs(want)
            frame.remaining -= abs(want)
            want = reader.send(value)
    except (StopIteration, msg.Malformed):
        pass
