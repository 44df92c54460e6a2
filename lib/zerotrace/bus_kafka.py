"""Kafka implementation of the bus port, over confluent-kafka (librdkafka).

Producer: idempotent, acks=all, lz4, delivery callbacks count failures (the collector only
treats a batch as sent when flush() returns 0). Consumer: manual, synchronous commits; the
errors librdkafka reports between messages are counted and said once per kind
(consumer_errors.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.consumer_errors import ConsumerErrors
from zerotrace.errors import Backpressure, ConfigError, TransientIO
from zerotrace.kafka_security import PLAINTEXT, KafkaSecurity
from zerotrace.spooling_producer import DeliveryError, Done

log = logging.getLogger(__name__)


def check_reachable(
    bootstrap: str, timeout_s: float = 5.0, security: KafkaSecurity = PLAINTEXT
) -> None:
    """Raise TransientIO with one line when no broker answers a metadata request, and
    ConfigError when a broker refuses this client's TLS handshake or credentials."""
    failure, errors = _ask_metadata(bootstrap, timeout_s, security)
    if failure is None:
        return
    refused = [e.str() for e in errors if e.code() in _REFUSALS]
    if refused:
        raise ConfigError(
            f"Kafka at {bootstrap} refused this client: {_one_line(refused[-1])}; "
            "check the ZEROTRACE_KAFKA_SSL_* and ZEROTRACE_KAFKA_SASL_* settings"
        )
    # The last error of a connection says more than the request's own ("transport failure").
    said = [e.str() for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    raise TransientIO(
        f"Kafka at {bootstrap} does not answer ({_one_line(said[-1] if said else failure)}); "
        "start it with `zerotrace infra up` or set ZEROTRACE_KAFKA"
    )


def _ask_metadata(
    bootstrap: str, timeout_s: float, security: KafkaSecurity
) -> tuple[str | None, list[KafkaError]]:
    """None if a broker answered, else the request's failure; and the errors librdkafka
    reported. It reports why a broker refused only through its error callback, and keeps
    retrying: the request is made in short slices with the callbacks served in between, so
    a refusal ends the wait at once. The client is gone when this returns (a client kept
    alive by a traceback logs the errors it queued meanwhile when it is collected)."""
    errors: list[KafkaError] = []
    config = security.librdkafka({"bootstrap.servers": bootstrap, "log_level": 0})
    admin = AdminClient(config, error_cb=errors.append)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return None, errors
        except KafkaException as exc:
            failure = exc.args[0].str() if exc.args else str(exc)
        admin.poll(0)  # serves the error callbacks
        if any(e.code() in _REFUSALS for e in errors) or time.monotonic() >= deadline:
            return failure, errors


# Errors of a broker that answers but refuses this client: settings to fix, not to wait out.
_REFUSALS: Final = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})


def _one_line(text: str) -> str:
    return " ".join(text.split())


class KafkaBus:
    """The bus over one Kafka cluster; every client it makes uses `security`."""

    def __init__(
        self, bootstrap: str, client_id: str = "zerotrace", security: KafkaSecurity = PLAINTEXT
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self._client_id = client_id

    def ensure_topics(self, topics: Sequence[names.Topic] = names.ALL_TOPICS) -> None:
        check_reachable(self.bootstrap, security=self.security)
        admin = AdminClient(self.security.librdkafka({"bootstrap.servers": self.bootstrap}))
        existing = set(admin.list_topics(timeout=10).topics)
        wanted = [t for t in topics if t.name not in existing]
        if not wanted:
            return
        futures = admin.create_topics([_new_topic(t) for t in wanted], operation_timeout=30)
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TransientIO(f"cannot create topic {name}: {exc.args[0].str()}") from None

    def producer(self) -> KafkaProducer:
        return KafkaProducer(self.bootstrap, self._client_id, security=self.security)

    def consumer(self, group: str) -> KafkaConsumer:
        return KafkaConsumer(self.bootstrap, group, self._client_id, self.security)


def _new_topic(topic: names.Topic) -> NewTopic:
    config = {"retention.ms": str(topic.retention_ms)}
    if topic.compacted:
        config = {"cleanup.policy": "compact"}
    return NewTopic(
        topic.name, num_partitions=topic.partitions, replication_factor=1, config=config
    )


class KafkaProducer:
    def __init__(
        self,
        bootstrap: str,
        client_id: str,
        message_timeout_s: float = 120.0,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self._failed = 0
        self._delivered = 0
        self.last_error: str | None = None
        self._producer = Producer(
            security.librdkafka(
                {
                    "bootstrap.servers": bootstrap,
                    "client.id": client_id,
                    "enable.idempotence": True,  # implies acks=all and ordered retries
                    "acks": "all",
                    "compression.type": "lz4",
                    "linger.ms": 20,  # batch a little: raw events come in bursts
                    # How long a message may wait for a broker before its delivery fails.
                    "message.timeout.ms": int(message_timeout_s * 1000),
                }
            )
        )

    def _on_delivery(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self._failed += 1
            self.last_error = err.str()
        else:
            self._delivered += 1

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._produce(topic, key, value, self._on_delivery)

    def produce_tracked(self, topic: str, key: bytes | None, value: bytes, done: Done) -> None:
        """Like produce; `done` hears the outcome, and a failure is the caller's to handle,
        not counted in `failed`."""

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is None:
                self._delivered += 1
                done(None)
            else:
                done(DeliveryError(err.str(), _refused_for_good(err)))

        self._produce(topic, key, value, on_delivery)

    def _produce(
        self, topic: str, key: bytes | None, value: bytes, on_delivery: Callable[..., None]
    ) -> None:
        try:
            self._producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
        except BufferError:
            # The local queue is full: serve callbacks for a moment and try once more.
            self._producer.poll(0.5)
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
            except BufferError:
                raise Backpressure(
                    "Kafka producer queue is full; the broker is slow or away"
                ) from None
        self._producer.poll(0)

    def serve(self) -> None:
        self._producer.poll(0)

    def purge(self) -> None:
        self._producer.purge(in_queue=True, in_flight=True, blocking=False)

    def outstanding(self) -> int:
        return len(self._producer)

    def flush(self, timeout_s: float) -> int:
        return int(self._producer.flush(timeout_s))

    @property
    def delivered(self) -> int:
        return self._delivered

    @property
    def failed(self) -> int:
        return self._failed

    def close(self) -> None:
        self._producer.flush(10)


# Errors that sending again cannot fix: the message or the producer itself is refused.
_REFUSED: Final = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG,
        KafkaError.INVALID_RECORD,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError._INVALID_ARG,
    }
)


def _refused_for_good(err: KafkaError) -> bool:
    return bool(err.fatal()) or err.code() in _REFUSED


class KafkaConsumer:
    def __init__(
        self, bootstrap: str, group: str, client_id: str, security: KafkaSecurity = PLAINTEXT
    ) -> None:
        self._consumer = Consumer(
            security.librdkafka(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": group,
                    "client.id": client_id,
                    "enable.auto.commit": False,  # commit only after the side effect succeeded
                    "auto.offset.reset": "earliest",
                    "enable.partition.eof": False,
                }
            )
        )
        self._errors = ConsumerErrors(group, log.warning)

    def subscribe(self, topics: Sequence[str]) -> None:
        self._consumer.subscribe(list(topics))

    def poll(self, timeout_s: float) -> Message | None:
        msg = self._consumer.poll(timeout_s)
        if msg is None:
            return None
        err = msg.error()
        if err is not None:
            self._errors.note(err)  # raises TransientIO when the consumer cannot go on
            return None
        return _message(msg)

    def counters(self) -> dict[str, int]:
        """The errors librdkafka reported between messages, by kind (KafkaError.name())."""
        return self._errors.counters()

    def commit(self, message: Message) -> None:
        tp = TopicPartition(message.topic, message.partition, message.offset + 1)
        self._consumer.commit(offsets=[tp], asynchronous=False)

    def close(self) -> None:
        self._consumer.close()


def _message(msg: Any) -> Message:
    """confluent-kafka's message (fields typed optional) as the port's Message."""
    _kind, ts = msg.timestamp()
    return Message(
        str(msg.topic()), int(msg.partition()), int(msg.offset()), msg.key(), msg.value() or b"", ts
    )


def read_topic_from_start(
    bootstrap: str, topic: str, timeout_s: float = 10.0, security: KafkaSecurity = PLAINTEXT
) -> list[Message]:
    """Every committed message now on a topic, read without a group (for the schema topic and
    tests). A partition is done at its end: records of transactions still open or aborted,
    and the transactions' markers, are never delivered (read_committed), so the end is
    reported by the consumer (partition EOF), not reached by counting offsets."""
    consumer = Consumer(
        security.librdkafka(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "zerotrace-reader",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
            }
        )
    )
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        out: list[Message] = []
        done = dict.fromkeys(meta.partitions, False)
        deadline = time.monotonic() + timeout_s
        while not all(done.values()) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    done[msg.partition()] = True
                continue
            out.append(_message(msg))
        return out
    finally:
        consumer.close()
