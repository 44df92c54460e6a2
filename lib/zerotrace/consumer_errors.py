"""What a Kafka consumer does with the errors librdkafka hands it between messages: a subscribed
topic that does not exist, a client not allowed to read, a broker gone.

A fatal error that will not heal ends the consumer (TransientIO: the service's retry makes a
new one). Any other is counted, every time, and said once per kind in one line with what it
means: librdkafka goes on by itself (it reconnects, it picks a topic up once it exists), so
polling goes on, and a line per occurrence would flood the log for as long as the cause lasts.
Pure: the consumer hands each error in (bus_kafka.KafkaConsumer.poll).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Final, Protocol

from zerotrace.errors import TransientIO

__all__ = ["MEANINGS", "ConsumerErrors", "KafkaErrorLike", "warning_line"]


class KafkaErrorLike(Protocol):
    """The part of confluent_kafka.KafkaError read here."""

    def name(self) -> str: ...

    def str(self) -> str: ...

    def fatal(self) -> bool: ...

    def retriable(self) -> bool: ...


_NO_TOPIC: Final = (
    "a subscribed topic does not exist (yet): nothing is read from it until it is made "
    "(the services' topic set-up makes every topic of the names registry)"
)
_NOT_ALLOWED: Final = (
    "the broker does not let this client {what} (Kafka ACLs): grant its user {grant}, or check "
    "the ZEROTRACE_KAFKA_SASL_* settings; nothing is read from it meanwhile"
)

# Error name (KafkaError.name()) -> what it means for the reader of the log line.
MEANINGS: Final[Mapping[str, str]] = {
    "UNKNOWN_TOPIC_OR_PART": _NO_TOPIC,
    "_UNKNOWN_TOPIC": _NO_TOPIC,
    "_UNKNOWN_PARTITION": "a partition asked for does not exist: nothing is read from it",
    "TOPIC_AUTHORIZATION_FAILED": _NOT_ALLOWED.format(
        what="read a subscribed topic", grant="READ on the topic"
    ),
    "GROUP_AUTHORIZATION_FAILED": _NOT_ALLOWED.format(
        what="use its consumer group", grant="READ on the group"
    ),
    "CLUSTER_AUTHORIZATION_FAILED": _NOT_ALLOWED.format(
        what="ask the cluster", grant="DESCRIBE on the cluster"
    ),
    "_TRANSPORT": "a broker connection broke: the client reconnects by itself",
    "_ALL_BROKERS_DOWN": "no broker answers: the client keeps trying, nothing is read meanwhile",
    "_AUTHENTICATION": (
        "the broker refused this client's credentials: check the ZEROTRACE_KAFKA_SASL_* settings"
    ),
    "_SSL": "the TLS handshake failed: check the ZEROTRACE_KAFKA_SSL_* settings",
}
_OTHER: Final = "the client goes on by itself"


def warning_line(group: str, name: str, text: str) -> str:
    """The one line said the first time an error of kind *name* reaches group *group*."""
    meaning = MEANINGS.get(name, _OTHER)
    detail = " ".join(text.split())
    return (
        f"Kafka consumer of group {group}: {name}: {meaning} ({detail}); said once, "
        "every one counted"
    )


class ConsumerErrors:
    """One consumer's tally. `say` gets each kind's line once (logging.warning in the shell)."""

    def __init__(self, group: str, say: Callable[[str], None]) -> None:
        self._group = group
        self._say = say
        self._counts: Counter[str] = Counter()

    def note(self, error: KafkaErrorLike) -> None:
        """Count *error* (said if its kind is new); raises TransientIO for a fatal one that
        retrying inside the client cannot heal."""
        if error.fatal() and not error.retriable():
            raise TransientIO(f"Kafka consumer error: {' '.join(error.str().split())}")
        name = error.name()
        self._counts[name] += 1
        if self._counts[name] == 1:
            self._say(warning_line(self._group, name, error.str()))

    def counters(self) -> dict[str, int]:
        """Errors by kind name, since the consumer was made."""
        return dict(self._counts)
