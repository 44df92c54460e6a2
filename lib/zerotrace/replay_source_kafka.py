"""The raw messages of a period, read back from Kafka for a replay (replay.py says what is done
with them). A shell: the order is replay.TimeMerge's, the offsets are Kafka's own.

A period [from, to) is, per partition, the offsets from the first message stamped at or after
`from` to the first stamped at or after `to` (Kafka's offsets-for-times index, on the
messages' CreateTime, which the collector sets when it publishes). No consumer group: the
partitions are assigned directly and nothing is committed, so a replay never moves a live
worker's offsets.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from zerotrace.bus import Message
from zerotrace.bus_kafka import check_reachable
from zerotrace.errors import TransientIO
from zerotrace.kafka_security import PLAINTEXT, KafkaSecurity
from zerotrace.replay import TimeMerge

# A partition read far ahead of the others (its messages are newer) is paused at this many
# buffered messages and resumed below the low mark: memory stays bounded by partitions x HIGH.
HIGH_BUFFERED = 2000
LOW_BUFFERED = 500
# No message and no end seen for this long: the broker went away mid-replay.
STALL_S = 60.0

Where = tuple[str, int]


class KafkaPeriod:
    """`ranges()` first (what will be read: offsets per partition), then `messages()` once."""

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        from_ms: int,
        to_ms: int,
        security: KafkaSecurity = PLAINTEXT,
        timeout_s: float = 30.0,
    ) -> None:
        check_reachable(bootstrap, timeout_s=min(timeout_s, 10.0), security=security)
        self._bootstrap = bootstrap
        self._topics = list(topics)
        self._from_ms, self._to_ms = from_ms, to_ms
        self._timeout_s = timeout_s
        self._consumer = Consumer(
            security.librdkafka(
                {
                    "bootstrap.servers": bootstrap,
                    # Never joined (assign, not subscribe) and never committed.
                    "group.id": f"zerotrace-replay-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "isolation.level": "read_committed",
                }
            )
        )
        self._ranges: dict[Where, tuple[int, int]] | None = None

    def ranges(self) -> dict[Where, tuple[int, int]]:
        """(topic, partition) -> [first, end) offsets of the period; partitions with nothing
        in it are left out."""
        if self._ranges is not None:
            return self._ranges
        wanted: list[TopicPartition] = []
        metadata = self._consumer.list_topics(timeout=self._timeout_s)
        for topic in self._topics:
            meta = metadata.topics.get(topic)
            if meta is None or meta.error is not None:
                continue  # never created: nothing was published there
            wanted += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        starts = self._offsets_at(wanted, self._from_ms)
        ends = self._offsets_at(wanted, self._to_ms)
        self._ranges = {w: (starts[w], ends[w]) for w in starts if starts[w] < ends[w]}
        return self._ranges

    def messages(self) -> Iterator[Message]:
        """The period's messages in time order (replay.TimeMerge), each partition in order."""
        ranges = self.ranges()
        merge = TimeMerge(ranges)
        if not ranges:
            return
        self._consumer.assign(
            [TopicPartition(t, p, first) for (t, p), (first, _) in ranges.items()]
        )
        paused: set[Where] = set()
        heard = time.monotonic()
        while not merge.done:
            message = merge.next()
            if message is not None:
                where = (message.topic, message.partition)
                if where in paused and merge.buffered(where) < LOW_BUFFERED:
                    paused.discard(where)
                    self._consumer.resume([TopicPartition(*where)])
                yield message
                continue
            raw = self._consumer.poll(0.5)
            if raw is None:
                if time.monotonic() - heard > STALL_S:
                    raise TransientIO(
                        f"replay: nothing from Kafka at {self._bootstrap} for {STALL_S:.0f} s"
                        f" while {len(merge.wanting())} partitions still had messages to give"
                    )
                continue
            heard = time.monotonic()
            where = (str(raw.topic()), int(raw.partition() or 0))
            error = raw.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and where in ranges:
                    merge.end(where)
                elif error.fatal():
                    raise TransientIO(f"replay: Kafka consumer error: {error.str()}")
                continue
            end = ranges[where][1]
            offset = int(raw.offset() or 0)
            if offset < end:
                _kind, stamp = raw.timestamp()
                value = raw.value() or b""
                merge.add(Message(where[0], where[1], offset, raw.key(), value, int(stamp)))
            if offset >= end - 1:
                merge.end(where)
                self._consumer.pause([TopicPartition(*where)])
            elif merge.buffered(where) >= HIGH_BUFFERED and where not in paused:
                paused.add(where)
                self._consumer.pause([TopicPartition(*where)])

    def close(self) -> None:
        self._consumer.close()

    def _offsets_at(self, partitions: list[TopicPartition], at_ms: int) -> dict[Where, int]:
        """Per partition, the first offset stamped at or after `at_ms`; the partition's end
        when none is."""
        if not partitions:
            return {}
        asked = [TopicPartition(tp.topic, tp.partition, at_ms) for tp in partitions]
        try:
            found = self._consumer.offsets_for_times(asked, timeout=self._timeout_s)
        except KafkaException as exc:
            raise TransientIO(f"replay: Kafka could not find offsets by time: {exc}") from None
        out: dict[Where, int] = {}
        for tp in found:
            where = (tp.topic, tp.partition)
            if tp.offset >= 0:
                out[where] = tp.offset
            else:  # nothing stamped that late: the end of the partition
                _low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(*where), timeout=self._timeout_s
                )
                out[where] = high
        return out
