"""Every schema through a real Kafka topic, schema evolution through the Kafka registry, and
the registry's memory of fingerprints it did not find."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from tests.avro_examples import example
from tests.contract.bus_contract import drain
from tests.unit.test_codec import evolution_codecs
from zerotrace.bus_kafka import KafkaBus
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.errors import PoisonInput
from zerotrace.names import Topic
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schema_registry_kafka import MISS_TTL_S, KafkaSchemaRegistry
from zerotrace.schemas import SCHEMA_DIR, load_schema_dir, parse_schema_text

S = 1_000_000_000


def test_every_schema_round_trips_through_kafka(kafka_bootstrap: str) -> None:
    bus = KafkaBus(kafka_bootstrap)
    bus.ensure_topics()
    topic = Topic(f"it-schemas-{uuid.uuid4().hex[:8]}", "", "record", 1, 3_600_000)
    bus.ensure_topics([topic])
    writer = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    sent = []
    producer = bus.producer()
    for i, path in enumerate(sorted(SCHEMA_DIR.rglob("*.avsc"))):
        raw = json.loads(path.read_text())
        record = f"{raw['namespace']}.{raw['name']}"
        datum = example(raw, random.Random(i))
        producer.produce(topic.name, record.encode(), writer.encode(record, datum))
        sent.append((record, datum))
    assert producer.flush(30) == 0
    consumer = bus.consumer(f"it-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic.name])
    got = drain(consumer, len(sent))
    consumer.close()
    # A separate reader process would know nothing but the bytes and the registry topic.
    reader = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    assert [reader.decode(m.value) for m in sorted(got, key=lambda m: m.offset)] == sent
    # every .avsc under schemas/ (SocketBatch and DeviceWindow included), counted on the disk
    assert len(sent) == len(list(SCHEMA_DIR.rglob("*.avsc"))) == 14


def test_old_reader_decodes_newer_writer_via_the_registry_topic(kafka_bootstrap: str) -> None:
    bus = KafkaBus(kafka_bootstrap)
    bus.ensure_topics()
    # Writer and reader each have their own registry client: the reader learns the newer
    # schema only from the compacted schema topic.
    _unused, new_writer = evolution_codecs(KafkaSchemaRegistry(kafka_bootstrap))
    old_reader, _unused2 = evolution_codecs(KafkaSchemaRegistry(kafka_bootstrap))
    topic = Topic(f"it-evolve-{uuid.uuid4().hex[:8]}", "", "k", 1, 3_600_000)
    bus.ensure_topics([topic])
    producer = bus.producer()
    producer.produce(
        topic.name,
        None,
        new_writer.encode(
            "zt.test.Probe", {"pid": 1, "path": "/data/kv.bin", "inode": 77, "mount": "/data"}
        ),
    )
    assert producer.flush(30) == 0
    consumer = bus.consumer(f"it-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic.name])
    [message] = drain(consumer, 1)
    consumer.close()
    assert old_reader.decode(message.value) == ("zt.test.Probe", {"pid": 1, "path": "/data/kv.bin"})


def test_an_unknown_fingerprint_costs_one_topic_read_per_ttl(kafka_bootstrap: str) -> None:
    """Many messages naming a schema the topic lacks: one read of the topic, not one each;
    registered later, it is found once the TTL is over."""
    KafkaBus(kafka_bootstrap).ensure_topics()
    name = f"Unseen{uuid.uuid4().hex[:8]}"  # on no schema topic yet
    schema = parse_schema_text(
        json.dumps(
            {
                "type": "record",
                "name": name,
                "namespace": "zt.test",
                "fields": [{"name": "n", "type": "long"}],
            }
        )
    )
    data = AvroCodec({schema.full_name: schema}, InMemorySchemaRegistry()).encode(
        schema.full_name, {"n": 7}
    )
    clock = ManualClock(1_000 * S)
    registry = KafkaSchemaRegistry(kafka_bootstrap, clock=clock)
    reader = AvroCodec({}, registry)
    for _ in range(50):
        with pytest.raises(PoisonInput, match="unknown writer schema fingerprint"):
            reader.decode(data)
        clock.advance(S // 10)
    assert registry.topic_reads == 1
    KafkaSchemaRegistry(kafka_bootstrap).register(schema)  # late, by another client
    clock.advance(int(MISS_TTL_S * S) - 5 * S - 1)  # just inside the TTL: not read again
    with pytest.raises(PoisonInput):
        reader.decode(data)
    assert registry.topic_reads == 1
    clock.advance(1)  # the TTL is over
    assert reader.decode(data) == (schema.full_name, {"n": 7})
    assert registry.topic_reads == 2
