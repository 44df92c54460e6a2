"""Dead letters: a refused message goes to the dead-letter topic, keyed by where it came from,
with the reason and its original bytes untouched, readable by any reader of the registry."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.deadletter import DEAD_LETTER_RECORD, dead_letter
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir

pytestmark = pytest.mark.unit

SCHEMAS = load_schema_dir()
NOW_NS = 1_700_000_000_123_456_789


def message(key: bytes | None = b"42", value: bytes = b"\x00junk\xff") -> Message:
    return Message(names.RAW_SOCKET.name, 3, 1_234_567, key, value, 1_700_000_000_000)


def test_the_letter_goes_to_the_dead_letter_topic_keyed_by_its_source(codec: AvroCodec) -> None:
    topic, key, _value = dead_letter(codec, message(), "correlator", "not Avro", NOW_NS)
    assert topic == names.DEAD_LETTER.name
    assert key == names.RAW_SOCKET.name.encode()
    assert names.DEAD_LETTER.record == DEAD_LETTER_RECORD


def test_the_letter_holds_where_who_why_when_and_the_original_bytes(codec: AvroCodec) -> None:
    original = message()
    _topic, _key, value = dead_letter(codec, original, "correlator", "not Avro (5 bytes)", NOW_NS)
    assert codec.decode(value) == (
        DEAD_LETTER_RECORD,
        {
            "source_topic": names.RAW_SOCKET.name,
            "source_partition": 3,
            "source_offset": 1_234_567,
            "consumer": "correlator",
            "reason": "not Avro (5 bytes)",
            "ts_ns": NOW_NS,  # the time it was refused, as given: not the message's time
            "key": b"42",
            "value": b"\x00junk\xff",
        },
    )


def test_a_keyless_message_keeps_no_key(codec: AvroCodec) -> None:
    _topic, key, value = dead_letter(codec, message(key=None), "indexer", "why", NOW_NS)
    assert key == names.RAW_SOCKET.name.encode()  # the letter's own key is still its source
    assert codec.decode(value)[1]["key"] is None


def test_a_letter_of_a_letter_wraps_it_whole(codec: AvroCodec) -> None:
    _t, _k, inner = dead_letter(codec, message(), "correlator", "first", NOW_NS)
    again = Message(names.DEAD_LETTER.name, 0, 9, names.RAW_SOCKET.name.encode(), inner, 0)
    topic, key, outer = dead_letter(codec, again, "auditor", "second", NOW_NS + 1)
    assert (topic, key) == (names.DEAD_LETTER.name, names.DEAD_LETTER.name.encode())
    assert codec.decode(codec.decode(outer)[1]["value"])[1]["reason"] == "first"


def test_a_reader_with_only_the_registry_reads_the_letter() -> None:
    registry = InMemorySchemaRegistry()
    writer = AvroCodec(SCHEMAS, registry)
    topic, key, value = dead_letter(writer, message(), "correlator", "why", NOW_NS)
    broker = InMemoryBroker()
    broker.ensure_topics()
    broker.producer().produce(topic, key, value)
    consumer = broker.consumer("dlq-reader")
    consumer.subscribe([names.DEAD_LETTER.name])
    got = consumer.poll(0)
    assert got is not None and got.key == names.RAW_SOCKET.name.encode()
    # A reader that knows no schema of its own (a lake job) finds the writer's in the registry.
    reader = AvroCodec({}, registry)
    record, letter = reader.decode(got.value)
    assert record == DEAD_LETTER_RECORD and letter["reason"] == "why"


texts = st.text(st.characters(codec="utf-8"), max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    topic=texts,
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
    key=st.none() | st.binary(max_size=32),
    value=st.binary(max_size=256),
    consumer=texts,
    reason=texts,
    now_ns=st.integers(0, 2**63 - 1),
)
def test_any_message_and_reason_round_trip_byte_for_byte(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes,
    consumer: str,
    reason: str,
    now_ns: int,
) -> None:
    codec = AvroCodec(SCHEMAS, InMemorySchemaRegistry())
    original = Message(topic, partition, offset, key, value, 0)
    out_topic, out_key, letter = dead_letter(codec, original, consumer, reason, now_ns)
    assert out_topic == names.DEAD_LETTER.name and out_key == topic.encode()
    record, datum = codec.decode(letter)
    assert record == DEAD_LETTER_RECORD
    assert datum == {
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": offset,
        "consumer": consumer,
        "reason": reason,
        "ts_ns": now_ns,
        "key": key,
        "value": value,
    }
