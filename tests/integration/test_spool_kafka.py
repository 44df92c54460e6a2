"""A broker that goes away and comes back: the collector's producer keeps what it accepted on
disk and sends it, in order and once, to a real Kafka broker.

The outage is real: a second, private Kafka node (its own ports and data folder, the jars of
`zerotrace infra up`) is stopped and started again under the producer; the shared broker the
other tests use is not touched.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zerotrace import names, settings
from zerotrace.bus_kafka import KafkaBus, KafkaProducer, read_topic_from_start
from zerotrace.clock import SystemClock
from zerotrace.infra.kafka_node import KafkaNode
from zerotrace.spool_file import SpoolFile
from zerotrace.spooling_producer import SpoolingProducer

TOPIC = names.Topic("spool.test", "zerotrace.raw.SocketData", "conn", 2, names.DAY_MS)
KEYS = [b"conn-a", b"conn-b", b"conn-c"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def private_kafka(kafka_bootstrap: str, tmp_path: Path) -> Iterator[KafkaNode]:
    """A Kafka node of its own; kafka_bootstrap only ensures `infra up` fetched the jars."""
    infra = settings.load(settings.CommonSettings).home / "infra"
    home = tmp_path / "infra"
    home.mkdir()
    (home / "lib").symlink_to(infra / "lib")
    node = KafkaNode(home, port=free_port(), controller_port=free_port())
    node.up(lambda _line: None)
    try:
        yield node
    finally:
        node.down()


def send(producer: SpoolingProducer, numbers: range, pause_s: float = 0.0) -> None:
    for i in numbers:
        producer.produce(TOPIC.name, KEYS[i % len(KEYS)], f"{i:04d}".encode())
        time.sleep(pause_s)


def test_an_outage_loses_nothing_and_keeps_each_keys_order(
    private_kafka: KafkaNode, tmp_path: Path
) -> None:
    KafkaBus(private_kafka.bootstrap).ensure_topics([TOPIC])
    inner = KafkaProducer(private_kafka.bootstrap, "spool-test")
    spool = SpoolFile(tmp_path / "spool", 64 * 1024 * 1024)
    producer = SpoolingProducer(inner, spool, SystemClock(), stall_s=1.0)
    try:
        send(producer, range(0, 60))
        assert producer.flush(30) == 0 and producer.spooled == 0

        assert private_kafka.down()
        send(producer, range(60, 120), pause_s=0.05)  # 3 s away: the last ones go to disk
        assert producer.spooled > 0
        assert producer.flush(1) > 0  # nothing is acknowledged while the broker is away

        private_kafka.up(lambda _line: None)
        send(producer, range(120, 180))  # behind the spool, which is sent first
        assert producer.flush(120) == 0, producer.last_error
        assert producer.failed == 0 and producer.spooled == 0
        assert spool.bytes_used == 0
    finally:
        producer.close()

    got = read_topic_from_start(private_kafka.bootstrap, TOPIC.name, timeout_s=30)
    values = [int(m.value) for m in got]
    assert sorted(values) == list(range(180)), "lost or duplicated messages"
    for key in KEYS:
        mine = [int(m.value) for m in got if m.key == key]
        assert mine == sorted(mine), f"{key!r} out of order"
