"""The embedded mode's raw log: raw messages kept on disk in a bounded ring of segments and read
back by period, with the in-process bus's partitions; damage and disk errors counted, never
raised."""

from __future__ import annotations

import io
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace import names
from zerotrace.bus import Message, partition_for
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import ManualClock
from zerotrace.raw_log import (
    HEADER,
    LoggingProducer,
    RawLogCounts,
    RawLogPeriod,
    RawLogWriter,
    segment_paths,
)

pytestmark = pytest.mark.unit

MS = 1_000_000
T0_MS = 1_764_860_000_000
EVERYTHING = (0, 2**62)
Record = tuple[str, bytes | None, bytes]  # topic, key, value


def writer_at(folder: Path, max_bytes: int = 1 << 20) -> tuple[RawLogWriter, ManualClock]:
    clock = ManualClock(T0_MS * MS)
    return RawLogWriter(folder, max_bytes, clock), clock


def read(folder: Path, period: tuple[int, int] = EVERYTHING) -> tuple[list[Message], RawLogCounts]:
    log = RawLogPeriod(folder, *period)
    return list(log.messages()), log.counts


def kept(messages: list[Message]) -> list[Record]:
    return [(m.topic, m.key, m.value) for m in messages]


def test_every_raw_topic_round_trips_with_and_without_a_key(tmp_path: Path) -> None:
    writer, clock = writer_at(tmp_path / "rawlog")
    written: list[Record] = []
    for i, topic in enumerate(names.RAW_TOPICS):
        for key in (None, b"", f"conn-{i}".encode()):
            record = (topic.name, key, f"value {i} {key!r}".encode() + bytes(range(256)))
            writer.append(*record)
            written.append(record)
            clock.advance(MS)
    writer.append(names.RAW_SOCKET.name, b"k", b"")  # an empty value is a value
    written.append((names.RAW_SOCKET.name, b"k", b""))
    for topic in (*names.DERIVED_TOPICS, names.DEAD_LETTER, names.SCHEMAS):
        writer.append(topic.name, b"k", b"derived: not raw, never replayed")
    writer.close()

    messages, counts = read(tmp_path / "rawlog")
    assert kept(messages) == written
    assert [m.timestamp_ms for m in messages[:3]] == [T0_MS, T0_MS + 1, T0_MS + 2]
    assert writer.counts == RawLogCounts(written=len(written))
    assert counts == RawLogCounts()


def test_a_period_keeps_the_records_stamped_in_it(tmp_path: Path) -> None:
    writer, clock = writer_at(tmp_path)
    for i in range(10):
        writer.append(names.RAW_FILEIO.name, b"42", str(i).encode())
        clock.advance(1000 * MS)
    writer.close()
    messages, _ = read(tmp_path, (T0_MS + 2000, T0_MS + 5000))  # [from, to)
    assert [m.value for m in messages] == [b"2", b"3", b"4"]
    assert [m.timestamp_ms for m in messages] == [T0_MS + 2000, T0_MS + 3000, T0_MS + 4000]
    # Offsets count from the start of the log, not of the period.
    assert [m.offset for m in messages] == [2, 3, 4]
    assert RawLogPeriod(tmp_path, T0_MS + 2000, T0_MS + 5000).count() == 3
    assert read(tmp_path, (T0_MS + 10_000, T0_MS + 20_000))[0] == []


def test_partitions_are_the_in_process_buses_and_offsets_count_per_partition(
    tmp_path: Path,
) -> None:
    writer, _clock = writer_at(tmp_path)
    keys = [f"conn-{i % 7}".encode() for i in range(60)]
    for i, key in enumerate(keys):
        writer.append(names.RAW_SOCKET.name, key, str(i).encode())
        writer.append(names.RAW_GPUMETRICS.name, None, str(i).encode())
    writer.close()
    messages, _ = read(tmp_path)

    sockets = [m for m in messages if m.topic == names.RAW_SOCKET.name]
    assert [m.partition for m in sockets] == [
        partition_for(key, names.RAW_SOCKET.partitions, 0) for key in keys
    ]
    metrics = [m for m in messages if m.topic == names.RAW_GPUMETRICS.name]
    assert {m.partition for m in metrics} == set(range(names.RAW_GPUMETRICS.partitions))
    for where in {(m.topic, m.partition) for m in messages}:
        offsets = [m.offset for m in messages if (m.topic, m.partition) == where]
        assert offsets == list(range(len(offsets))), where


def test_the_log_stays_bounded_dropping_its_oldest_segments(tmp_path: Path) -> None:
    max_bytes = 64 * 1024
    writer, clock = writer_at(tmp_path, max_bytes)
    values = [f"{i:06d}".encode() * 30 for i in range(3000)]  # about 600 KB in all
    for value in values:
        writer.append(names.RAW_STACK.name, b"7", value)
        clock.advance(MS)
        on_disk = sum(p.stat().st_size for p in segment_paths(tmp_path))
        assert on_disk <= max_bytes + writer.segment_bytes
    writer.close()

    segments = segment_paths(tmp_path)
    sequences = [int(p.stem.partition("-")[2]) for p in segments]
    assert sequences == list(range(sequences[0], sequences[-1] + 1))  # the newest, in order
    assert writer.counts.segments_deleted == sequences[-1] - len(segments) > 0
    assert sum(p.stat().st_size for p in segments) <= max_bytes + writer.segment_bytes

    messages, counts = read(tmp_path)
    assert [m.value for m in messages] == values[-len(messages) :]  # the most recent period
    assert [m.offset for m in messages] == list(range(len(messages)))  # from the oldest kept
    assert counts.torn == 0 and writer.counts.written == len(values)


def test_a_new_writer_goes_on_after_the_segments_it_finds(tmp_path: Path) -> None:
    first, clock = writer_at(tmp_path)
    first.append(names.RAW_CONN.name, b"c", b"before a restart")
    first.close()
    second = RawLogWriter(tmp_path, 1 << 20, clock)
    second.append(names.RAW_CONN.name, b"c", b"after it")
    second.close()
    assert len(segment_paths(tmp_path)) == 2
    assert [m.value for m in read(tmp_path)[0]] == [b"before a restart", b"after it"]


def segments_of_records(folder: Path, count: int) -> list[bytes]:
    """`count` records of about 1 KB, three to a 4 KB segment, none deleted."""
    writer, clock = writer_at(folder, max_bytes=8 * 4096)
    values = [bytes([i]) * 1000 for i in range(count)]
    for value in values:
        writer.append(names.RAW_SOCKET.name, b"conn", value)
        clock.advance(MS)
    writer.close()
    assert writer.counts.segments_deleted == 0
    assert len(segment_paths(folder)) == -(-count // 3)
    return values


def records_in(segment: Path) -> list[bytes]:
    """A segment's records as bytes, split by their headers."""
    data = segment.read_bytes()
    out, at = [], 0
    while at < len(data):
        *_, name_len, key_len, value_len, _crc = HEADER.unpack_from(data, at)
        size = HEADER.size + name_len + max(key_len, 0) + value_len
        out.append(data[at : at + size])
        at += size
    return out


@pytest.mark.parametrize("cut", [10, HEADER.size + 500], ids=["in-header", "in-body"])
def test_a_record_cut_short_at_the_tail_is_counted_and_the_rest_read(
    tmp_path: Path, cut: int
) -> None:
    values = segments_of_records(tmp_path, 10)
    last = segment_paths(tmp_path)[-1]
    whole = last.read_bytes()
    last.write_bytes(whole[: len(whole) - len(records_in(last)[-1]) + cut])  # a crash mid-write

    messages, counts = read(tmp_path)
    assert [m.value for m in messages] == values[:-1]
    assert counts.torn == 1


def test_a_damaged_record_ends_its_segment_and_reading_goes_on_with_the_next(
    tmp_path: Path,
) -> None:
    values = segments_of_records(tmp_path, 12)
    first, damaged, *_ = segment_paths(tmp_path)
    before, in_damaged = len(records_in(first)), len(records_in(damaged))
    assert in_damaged >= 2
    data = bytearray(damaged.read_bytes())
    data[len(records_in(damaged)[0]) + HEADER.size + 100] ^= 0xFF  # its second record's value
    damaged.write_bytes(bytes(data))

    messages, counts = read(tmp_path)
    assert counts.torn == 1
    kept_values = values[: before + 1] + values[before + in_damaged :]
    assert [m.value for m in messages] == kept_values


def test_the_folder_is_private_and_so_are_the_segments(tmp_path: Path) -> None:
    folder = tmp_path / "rawlog"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    writer, _clock = writer_at(folder)
    writer.append(names.RAW_SOCKET.name, None, b"what a program sent")
    writer.close()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    [segment] = segment_paths(folder)
    assert stat.S_IMODE(segment.stat().st_mode) == 0o600

    fresh = tmp_path / "a" / "b"
    writer_at(fresh)[0].close()
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700


def test_a_segment_that_cannot_be_made_is_counted_and_the_log_goes_on(tmp_path: Path) -> None:
    folder = tmp_path / "rawlog"
    writer, _clock = writer_at(folder)
    shutil.rmtree(folder)  # gone under the writer: the next segment cannot be created
    writer.append(names.RAW_SOCKET.name, b"k", b"lost")
    assert writer.counts.write_errors == 1 and writer.counts.written == 0
    folder.mkdir(mode=0o700)
    writer.append(names.RAW_SOCKET.name, b"k", b"kept")
    writer.close()
    assert writer.counts.write_errors == 1 and writer.counts.written == 1
    assert [m.value for m in read(folder)[0]] == [b"kept"]


class DiskFull(io.BytesIO):
    def write(self, data: object) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        raise OSError(28, "No space left on device")


def test_a_write_error_is_counted_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, _clock = writer_at(tmp_path)
    monkeypatch.setattr(writer, "_file", DiskFull())
    writer.append(names.RAW_SOCKET.name, b"k", b"a record")
    writer.append(names.RAW_CONN.name, None, b"another")
    writer.flush()
    assert writer.counts == RawLogCounts(write_errors=3)
    writer.close()
    assert writer.counts.write_errors == 3


def test_the_logging_producer_passes_everything_on_and_logs_the_raw(tmp_path: Path) -> None:
    broker = InMemoryBroker()
    broker.ensure_topics()
    writer, _clock = writer_at(tmp_path)
    producer = LoggingProducer(broker.producer(), writer)
    producer.produce(names.RAW_SOCKET.name, b"conn-1", b"raw")
    producer.produce(names.DERIVED_SPAN.name, b"trace", b"derived")
    assert producer.flush(1.0) == 0 and producer.failed == 0
    assert producer.counters() == {"raw_log_failed": 0}  # joins the collector's counters

    consumer = broker.consumer("test")
    consumer.subscribe([names.RAW_SOCKET.name, names.DERIVED_SPAN.name])
    live = [consumer.poll(0.0), consumer.poll(0.0)]
    assert sorted((m.topic, m.value) for m in live if m is not None) == [
        (names.DERIVED_SPAN.name, b"derived"),
        (names.RAW_SOCKET.name, b"raw"),
    ]
    producer.close()
    [logged] = read(tmp_path)[0]
    [published] = [m for m in live if m is not None and m.topic == names.RAW_SOCKET.name]
    assert (logged.topic, logged.key, logged.value) == (names.RAW_SOCKET.name, b"conn-1", b"raw")
    assert logged.partition == published.partition  # a replay sees live's partitions


records_strategy = st.lists(
    st.tuples(
        st.sampled_from([t.name for t in names.RAW_TOPICS]),
        st.none() | st.binary(max_size=24),
        st.binary(max_size=300),
        st.integers(min_value=0, max_value=3000),
    ),
    max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(records_strategy)
def test_any_records_round_trip_in_order(
    records: list[tuple[str, bytes | None, bytes, int]],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        # 4 KB segments, never deleted at this size: rotation is part of the round trip.
        writer, clock = writer_at(Path(folder), max_bytes=64 * 1024)
        stamps = []
        for topic, key, value, gap_ms in records:
            clock.advance(gap_ms * MS)
            writer.append(topic, key, value)
            stamps.append(clock.now_ns() // MS)
        writer.close()
        messages, counts = read(Path(folder))
    assert [(m.topic, m.key, m.value, m.timestamp_ms) for m in messages] == [
        (topic, key, value, stamp)
        for (topic, key, value, _), stamp in zip(records, stamps, strict=True)
    ]
    assert counts.torn == 0 and writer.counts.segments_deleted == 0
