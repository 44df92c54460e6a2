"""The errors a Kafka consumer gets between messages: said once per kind, every one counted, a
fatal one ends it (consumer_errors.py). tests/integration/test_bus_kafka.py gets a real one
from a broker."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from zerotrace.consumer_errors import MEANINGS, ConsumerErrors, warning_line
from zerotrace.errors import TransientIO

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class FakeError:
    """What confluent_kafka's Message.error() returns, as far as the consumer reads it."""

    kind: str
    text: str
    is_fatal: bool = False
    is_retriable: bool = False

    def name(self) -> str:
        return self.kind

    def str(self) -> str:
        return self.text

    def fatal(self) -> bool:
        return self.is_fatal

    def retriable(self) -> bool:
        return self.is_retriable


NO_TOPIC = FakeError(
    "UNKNOWN_TOPIC_OR_PART",
    "Subscribed topic not available: raw.x: Broker: Unknown topic or partition",
)
DENIED = FakeError("TOPIC_AUTHORIZATION_FAILED", "Broker: Topic authorization failed")


def test_each_kind_is_said_once_and_every_one_is_counted() -> None:
    said: list[str] = []
    errors = ConsumerErrors("indexer", said.append)
    for error in (NO_TOPIC, DENIED, NO_TOPIC, NO_TOPIC, DENIED):
        errors.note(error)
    assert errors.counters() == {"UNKNOWN_TOPIC_OR_PART": 3, "TOPIC_AUTHORIZATION_FAILED": 2}
    assert said == [
        "Kafka consumer of group indexer: UNKNOWN_TOPIC_OR_PART: a subscribed topic does not "
        "exist (yet): nothing is read from it until it is made (the services' topic set-up "
        "makes every topic of the names registry) (Subscribed topic not available: raw.x: "
        "Broker: Unknown topic or partition); said once, every one counted",
        "Kafka consumer of group indexer: TOPIC_AUTHORIZATION_FAILED: the broker does not let "
        "this client read a subscribed topic (Kafka ACLs): grant its user READ on the topic, or "
        "check the ZEROTRACE_KAFKA_SASL_* settings; nothing is read from it meanwhile (Broker: "
        "Topic authorization failed); said once, every one counted",
    ]


def test_a_fatal_error_ends_the_consumer_in_one_line() -> None:
    errors = ConsumerErrors("indexer", lambda _line: None)
    fenced = FakeError("_FENCED", "Local: This instance has been fenced\nby a newer one", True)
    with pytest.raises(TransientIO, match=r"^Kafka consumer error: Local: .* by a newer one$"):
        errors.note(fenced)
    # A fatal error the client says it retries is not the end: counted like the others.
    errors.note(FakeError("_TRANSPORT", "Local: Broker transport failure", True, True))
    assert errors.counters() == {"_TRANSPORT": 1}


def test_a_kind_without_a_meaning_of_its_own_still_gets_one_line() -> None:
    line = warning_line("g", "_TIMED_OUT", "Local: Timed out\n(after 5000 ms)")
    assert line == (
        "Kafka consumer of group g: _TIMED_OUT: the client goes on by itself "
        "(Local: Timed out (after 5000 ms)); said once, every one counted"
    )
    assert "_TIMED_OUT" not in MEANINGS


def test_every_meaning_is_of_an_error_librdkafka_has() -> None:
    from confluent_kafka import KafkaError

    assert all(KafkaError(getattr(KafkaError, name)).name() == name for name in MEANINGS)
