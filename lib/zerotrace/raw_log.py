"""The embedded mode's raw log: every raw message the collector hands to the in-process bus, kept
on disk in a bounded ring of segment files, so that `zerotrace replay --local` can re-derive a
period later (the distributed mode keeps raw topics on Kafka for the same purpose).

Layout: `<dir>/<first timestamp ms>-<sequence>.seg`, folder 0700 and files 0600 (raw events
hold what the observed programs sent). A segment is a run of records:

    timestamp_ms u64 | partition u16 | topic length u8 | key length i32 (-1: none) |
    value length u32 | crc32 of what follows u32 | topic | key | value

A segment is closed at `segment_bytes` and the oldest are deleted while the log is over
`max_bytes`: a long run keeps its most recent period. A record cut short by a crash, or one
whose crc does not match, ends its segment's reading; the reader counts it and goes on with
the next segment. Partitions are the in-process bus's (bus.partition_for), so a replay sees
each connection's records on one partition, in order, as the live steps did.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from zerotrace import names
from zerotrace.bus import Message, Producer, partition_for
from zerotrace.clock import Clock

HEADER = struct.Struct("<QHBiII")
RAW_TOPIC_NAMES = {t.name: t for t in names.RAW_TOPICS}
SEGMENTS_PER_LOG = 8  # segment size = max_bytes / this: at most 1/8 of the log goes at a time
WRITE_BUFFER = 1 << 20


@dataclass
class RawLogCounts:
    written: int = 0
    segments_deleted: int = 0
    write_errors: int = 0  # records not kept (disk full, ...): counted, observation goes on
    torn: int = 0  # records cut short or damaged, found while reading


def segment_paths(folder: Path) -> list[Path]:
    """The segments, oldest first: by sequence, which only grows (a writer starts after the
    highest it finds), not by timestamp, which a clock stepped back would disorder."""
    found = []
    for path in folder.glob("*.seg"):
        head, _, seq = path.stem.partition("-")
        if head.isdigit() and seq.isdigit():
            found.append((int(seq), path))
    return [path for _, path in sorted(found)]


class RawLogWriter:
    def __init__(self, folder: Path, max_bytes: int, clock: Clock) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.segment_bytes = max(max_bytes // SEGMENTS_PER_LOG, 4096)
        self._clock = clock
        self.counts = RawLogCounts()
        self._file: BinaryIO | None = None
        self._size = 0
        self._counter = 0
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(folder, 0o700)
        existing = segment_paths(folder)
        self._sequence = 1 + max((int(p.stem.partition("-")[2]) for p in existing), default=0)

    def append(self, topic: str, key: bytes | None, value: bytes) -> None:
        """One message; raw topics only (others are derived and need no replay)."""
        spec = RAW_TOPIC_NAMES.get(topic)
        if spec is None:
            return
        now_ms = self._clock.now_ns() // 1_000_000
        self._counter += 1
        partition = partition_for(key, spec.partitions, self._counter)
        record = encode_record(now_ms, topic, partition, key, value)
        try:
            if self._file is None or self._size + len(record) > self.segment_bytes:
                self._rotate(now_ms)
            assert self._file is not None
            self._file.write(record)
            self._size += len(record)
            self.counts.written += 1
        except OSError:
            self.counts.write_errors += 1

    def flush(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
            except OSError:
                self.counts.write_errors += 1

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                self.counts.write_errors += 1
            self._file = None

    def _rotate(self, now_ms: int) -> None:
        self.close()
        path = self.folder / f"{now_ms}-{self._sequence}.seg"
        self._sequence += 1
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self._file = os.fdopen(fd, "wb", buffering=WRITE_BUFFER)
        self._size = 0
        self._trim(keep=path)

    def _trim(self, keep: Path) -> None:
        segments = segment_paths(self.folder)
        sizes = {p: p.stat().st_size for p in segments}
        total = sum(sizes.values()) + self.segment_bytes  # room for the one just opened
        for path in segments:
            if total <= self.max_bytes or path == keep:
                break
            path.unlink(missing_ok=True)
            total -= sizes[path]
            self.counts.segments_deleted += 1


def encode_record(
    timestamp_ms: int, topic: str, partition: int, key: bytes | None, value: bytes
) -> bytes:
    name = topic.encode()
    body = name + (key or b"") + value
    key_len = -1 if key is None else len(key)
    crc = zlib.crc32(body)
    return HEADER.pack(timestamp_ms, partition, len(name), key_len, len(value), crc) + body


def read_segment(
    path: Path, counts: RawLogCounts
) -> Iterator[tuple[int, str, int, bytes | None, bytes]]:
    """(timestamp_ms, topic, partition, key, value) of each whole record of one segment."""
    with open(path, "rb") as f:
        while True:
            head = f.read(HEADER.size)
            if not head:
                return
            if len(head) < HEADER.size:
                counts.torn += 1
                return
            stamp, partition, name_len, key_len, value_len, crc = HEADER.unpack(head)
            body = f.read(name_len + max(key_len, 0) + value_len)
            if len(body) < name_len + max(key_len, 0) + value_len or zlib.crc32(body) != crc:
                counts.torn += 1
                return
            topic = body[:name_len].decode(errors="replace")
            key = None if key_len < 0 else body[name_len : name_len + key_len]
            yield stamp, topic, partition, key, body[name_len + max(key_len, 0) :]


class RawLogPeriod:
    """The local log's messages of [from_ms, to_ms), in the order they were written (which is
    time order). Offsets count each (topic, partition) from the oldest segment kept."""

    def __init__(self, folder: Path, from_ms: int, to_ms: int) -> None:
        self.folder = folder
        self.from_ms, self.to_ms = from_ms, to_ms
        self.counts = RawLogCounts()

    def count(self) -> int:
        return sum(1 for _ in self.messages(RawLogCounts()))

    def messages(self, counts: RawLogCounts | None = None) -> Iterator[Message]:
        counts = self.counts if counts is None else counts
        offsets: dict[tuple[str, int], int] = {}
        for path in segment_paths(self.folder):
            for stamp, topic, partition, key, value in read_segment(path, counts):
                where = (topic, partition)
                offset = offsets.get(where, 0)
                offsets[where] = offset + 1
                if self.from_ms <= stamp < self.to_ms:
                    yield Message(topic, partition, offset, key, value, stamp)


class LoggingProducer:
    """A producer that also keeps every raw message in the raw log: the embedded collector's."""

    def __init__(self, inner: Producer, log: RawLogWriter) -> None:
        self._inner = inner
        self.log = log

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._inner.produce(topic, key, value)
        self.log.append(topic, key, value)

    def flush(self, timeout_s: float) -> int:
        self.log.flush()
        return self._inner.flush(timeout_s)

    @property
    def failed(self) -> int:
        return self._inner.failed

    def counters(self) -> dict[str, int]:
        """Joins the collector's counters (collector.CountingProducer): records the raw log
        could not keep (a full disk), shown in `zerotrace run`'s summary when not 0."""
        return {"raw_log_failed": self.log.counts.write_errors}

    def close(self) -> None:
        self.log.close()
        self._inner.close()
