"""Dead letters: a message a consumer refused, kept with the reason on names.DEAD_LETTER."""

from __future__ import annotations

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec

DEAD_LETTER_RECORD = names.DEAD_LETTER.record


def dead_letter(
    codec: AvroCodec, message: Message, consumer: str, reason: str, now_ns: int
) -> tuple[str, bytes, bytes]:
    """(topic, key, value) to produce; the original bytes travel untouched."""
    value = codec.encode(
        DEAD_LETTER_RECORD,
        {
            "source_topic": message.topic,
            "source_partition": message.partition,
            "source_offset": message.offset,
            "consumer": consumer,
            "reason": reason,
            "ts_ns": now_ns,
            "key": message.key,
            "value": message.value,
        },
    )
    return names.DEAD_LETTER.name, message.topic.encode(), value
