"""Post-mortem replay, pure part: what --from/--to/--into accept, messages merged in time, the
steps driven with the messages' own times as the clock, and the progress line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness.llm_conversations import conversation
from tests.unit.test_correlator_pipeline import raw_open
from zerotrace import names
from zerotrace.bus import Message, partition_for
from zerotrace.codec import MAGIC, AvroCodec
from zerotrace.errors import ConfigError
from zerotrace.replay import (
    DRAIN_NS,
    END_REASON,
    GAP_TICKS,
    MS_NS,
    S_NS,
    Progress,
    ReplayDriver,
    ReplayFilter,
    ReplayName,
    TimeMerge,
    check_period,
    merge_in_time,
    parse_time,
)
from zerotrace.step import Held, Output
from zerotrace_correlator.fileio_spans import file_open_span
from zerotrace_correlator.pipeline import CorrelatorStep

pytestmark = pytest.mark.unit

NOW_MS = 1_764_860_000_000  # 2025-12-04T14:53:20Z
T0_MS = NOW_MS - 3_600_000
T0 = T0_MS * MS_NS
INTO = ReplayName("incident1")


# parse_time, check_period


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW_MS),
        ("  now ", NOW_MS),
        ("-30s", NOW_MS - 30_000),
        ("-15m", NOW_MS - 15 * 60_000),
        ("-2h", NOW_MS - 2 * 3_600_000),
        ("-1d", NOW_MS - 86_400_000),
        ("-1.5h", NOW_MS - 5_400_000),
        ("1764860000", 1_764_860_000_000),
        ("1764860000.25", 1_764_860_000_250),
        ("1764860000.123", 1_764_860_000_123),
        ("1764860000123", 1_764_860_000_123),  # 13 digits: milliseconds
        ("1764860000123.7", 1_764_860_000_123),  # still milliseconds, the fraction dropped
        ("2026-12-04T15:00:00Z", 1_796_396_400_000),
        ("2026-12-04T15:00:00.250Z", 1_796_396_400_250),
        ("2026-12-04T17:00:00+02:00", 1_796_396_400_000),
        ("2026-12-04T10:00:00-05:00", 1_796_396_400_000),
        ("2026-12-04T15:00:00", 1_796_396_400_000),  # no zone: UTC, not the local zone
    ],
)
def test_parse_time_reads_every_documented_form(text: str, expected: int) -> None:
    assert parse_time(text, NOW_MS) == expected


@pytest.mark.parametrize("text", ["yesterday", "-15x", "15m", "", "2026-13-45T99:00:00Z", "-m"])
def test_an_unreadable_time_is_one_config_line_with_the_forms(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_time(text, NOW_MS)
    message = str(info.value)
    assert "\n" not in message
    assert repr(text.strip()) in message and "-15m" in message and "ISO 8601" in message


def test_a_period_must_end_after_it_starts() -> None:
    check_period(NOW_MS - 1, NOW_MS)
    for to_ms in (NOW_MS, NOW_MS - 1):
        with pytest.raises(ConfigError, match="--to must be later than --from"):
            check_period(NOW_MS, to_ms)


# ReplayName


@pytest.mark.parametrize("name", ["incident1", "a", "0", "gpu07_oom", "x" * 40, "9_a_b"])
def test_a_valid_name_gives_its_topic_and_index_suffixes(name: str) -> None:
    into = ReplayName(name)
    assert into.topic_suffix == names.REPLAY_TOPIC_SUFFIX + name
    assert into.index_suffix == names.REPLAY_INDEX_SUFFIX + name
    assert into.topic(names.DERIVED_LLM.name) == names.DERIVED_LLM.name + into.topic_suffix


@pytest.mark.parametrize(
    "name", ["a-b", "-", "Incident", "ABC", "", "x" * 41, "_a", "a.b", "a b", "abc\n", "é"]
)
def test_a_name_that_could_clash_or_break_a_topic_is_refused(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        ReplayName(name)
    assert "\n" not in str(info.value) and "--into" in str(info.value)


# TimeMerge and merge_in_time


def msg(partition: int, offset: int, ts_ms: int, topic: str = "t") -> Message:
    return Message(topic, partition, offset, None, b"", ts_ms)


def where(m: Message) -> tuple[str, int, int]:
    return m.topic, m.partition, m.offset


def drain(merge: TimeMerge) -> list[Message]:
    out = []
    while (m := merge.next()) is not None:
        out.append(m)
    return out


def test_time_merge_orders_by_time_across_partitions_and_ties_by_partition() -> None:
    merge = TimeMerge([("t", 0), ("t", 1), ("s", 2)])
    for m in (msg(0, 0, 10), msg(0, 1, 30), msg(1, 0, 20), msg(1, 1, 30), msg(2, 0, 30, "s")):
        merge.add(m)
    for p in (("t", 0), ("t", 1), ("s", 2)):
        merge.end(p)
    assert [where(m) for m in drain(merge)] == [
        ("t", 0, 0),
        ("t", 1, 0),
        ("s", 2, 0),  # equal times: by topic, then partition
        ("t", 0, 1),
        ("t", 1, 1),
    ]
    assert merge.done


def test_time_merge_keeps_a_partitions_offset_order_when_its_times_go_backwards() -> None:
    merge = TimeMerge([("t", 0), ("t", 1)])
    for m in (msg(0, 0, 50), msg(0, 1, 10), msg(0, 2, 40), msg(1, 0, 20)):
        merge.add(m)
    merge.end(("t", 0))
    merge.end(("t", 1))
    assert [where(m) for m in drain(merge)] == [
        ("t", 1, 0),
        ("t", 0, 0),
        ("t", 0, 1),  # older than its predecessor, still after it
        ("t", 0, 2),
    ]


def test_time_merge_waits_while_an_open_partition_has_nothing_buffered() -> None:
    merge = TimeMerge([("t", 0), ("t", 1)])
    assert merge.next() is None and sorted(merge.wanting()) == [("t", 0), ("t", 1)]
    merge.add(msg(0, 0, 100))
    assert merge.next() is None  # partition 1 might still give something older
    assert merge.wanting() == [("t", 1)] and merge.buffered(("t", 0)) == 1
    merge.add(msg(1, 0, 50))
    assert where(merge.next() or msg(9, 9, 9)) == ("t", 1, 0)
    assert merge.next() is None and merge.wanting() == [("t", 1)]  # empty again, still open
    merge.end(("t", 1))  # it has no more: partition 0 may go on
    assert not merge.done
    assert where(merge.next() or msg(9, 9, 9)) == ("t", 0, 0)
    assert merge.next() is None and not merge.done  # partition 0 is still open
    merge.end(("t", 0))
    assert merge.done and merge.wanting() == []


def test_time_merge_of_nothing_is_done_at_once() -> None:
    merge = TimeMerge([])
    assert merge.done and merge.next() is None


partitions_strategy = st.lists(
    st.lists(st.integers(min_value=0, max_value=20), max_size=12), min_size=1, max_size=5
)


def streams_of(partitions: list[list[int]]) -> list[list[Message]]:
    """Partition i of topic `a` (even i) or `b` (odd i), with these timestamps in offset order."""
    return [
        [msg(i, offset, ts, "ab"[i % 2]) for offset, ts in enumerate(stamps)]
        for i, stamps in enumerate(partitions)
    ]


@settings(max_examples=300, deadline=None)
@given(partitions_strategy)
def test_merge_in_time_is_a_permutation_keeping_each_partition_as_time_merge_does(
    partitions: list[list[int]],
) -> None:
    streams = streams_of(partitions)
    out = list(merge_in_time([iter(s) for s in streams]))

    everything = [m for s in streams for m in s]
    assert sorted(map(where, out)) == sorted(map(where, everything))
    for stream in streams:
        if stream:
            key = (stream[0].topic, stream[0].partition)
            assert [m for m in out if (m.topic, m.partition) == key] == stream

    merge = TimeMerge((s[0].topic, s[0].partition) for s in streams if s)
    for m in everything:
        merge.add(m)
    for s in streams:
        if s:
            merge.end((s[0].topic, s[0].partition))
    assert drain(merge) == out and merge.done


@settings(max_examples=200, deadline=None)
@given(partitions_strategy)
def test_partitions_in_time_order_merge_into_time_order(partitions: list[list[int]]) -> None:
    out = list(merge_in_time([iter(s) for s in streams_of([sorted(p) for p in partitions])]))
    assert [m.timestamp_ms for m in out] == sorted(m.timestamp_ms for m in out)


# ReplayFilter


def test_the_filter_keeps_one_node_raw_and_one_service_derived() -> None:
    everything = ReplayFilter()
    assert everything.keeps_raw({"node_id": "n2"}) and everything.keeps_raw({})
    assert everything.keeps_derived({"node_id": "n2", "service": "java"})

    node = ReplayFilter(node="n1")
    assert node.keeps_raw({"node_id": "n1"})
    assert not node.keeps_raw({"node_id": "n2"}) and not node.keeps_raw({})
    assert node.keeps_derived({"node_id": "n1"}) and node.keeps_derived({"service": "x"})
    assert not node.keeps_derived({"node_id": "n2"})

    service = ReplayFilter(service="python3")
    assert service.keeps_derived({"service": "python3", "node_id": "n2"})
    assert not service.keeps_derived({"service": "java"})
    assert service.keeps_derived({"node_id": "n1"})  # a record without a service stays
    assert service.keeps_raw({"node_id": "n2"})  # a service is known only once derived

    both = ReplayFilter(node="n1", service="python3")
    assert both.keeps_derived({"node_id": "n1", "service": "python3"})
    assert not both.keeps_derived({"node_id": "n2", "service": "python3"})
    assert not both.keeps_derived({"node_id": "n1", "service": "java"})


# ReplayDriver over a fake step


@dataclass
class FakeStep:
    """Records every call with its time; turns each raw file open into its span, and bytes
    that are not Avro into a dead letter, as the correlator would."""

    codec: AvroCodec
    input_topics: tuple[str, ...] = (names.RAW_FILEIO.name,)
    group: str = "fake"
    calls: list[tuple[str, int]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def process(self, message: Message) -> list[Output]:
        self.calls.append(("process", message.timestamp_ms * MS_NS))
        if not message.value.startswith(MAGIC):
            return [Output(names.DEAD_LETTER.name, None, b"a dead letter, never decoded")]
        _record, datum = self.codec.decode(message.value)
        span = file_open_span(datum)
        value = self.codec.encode(names.DERIVED_SPAN.record, span)
        return [Output(names.DERIVED_SPAN.name, span["trace_id"].encode(), value)]

    def tick(self, now_ns: int) -> list[Output]:
        self.calls.append(("tick", now_ns))
        return []

    def flush(self, now_ns: int, reason: str = "end of input") -> list[Output]:
        self.calls.append(("flush", now_ns))
        self.reasons.append(reason)
        return []

    def held(self) -> Held:
        return {}

    def counters(self) -> dict[str, int]:
        return {}

    def times(self, kind: str) -> list[int]:
        return [t for k, t in self.calls if k == kind]


def file_open(
    codec: AvroCodec, ts_ms: int, offset: int = 0, node: str = "n1", process: str = "python3"
) -> Message:
    datum = raw_open(node_id=node, process_name=process, event_id=f"{node}/{offset}")
    value = codec.encode(names.RAW_FILEIO.record, datum)
    return Message(names.RAW_FILEIO.name, 0, offset, b"42", value, ts_ms)


def run(driver: ReplayDriver, messages: list[Message]) -> list[Output]:
    out = []
    for m in messages:
        out += driver.feed(m)
    return out


def test_the_driver_ticks_every_second_of_message_time_before_each_message(
    codec: AvroCodec,
) -> None:
    step = FakeStep(codec)
    driver = ReplayDriver([step], codec.decode, INTO, ReplayFilter())
    run(driver, [file_open(codec, T0_MS + d, i) for i, d in enumerate((0, 2500, 3000, 3100))])
    s = S_NS
    assert step.calls == [
        ("tick", T0),  # the first message starts the clock
        ("process", T0),
        ("tick", T0 + s),  # a quiet stretch: ticks go on through it
        ("tick", T0 + 2 * s),
        ("process", T0 + 2500 * MS_NS),
        ("tick", T0 + 3 * s),
        ("process", T0 + 3 * s),
        ("process", T0 + 3100 * MS_NS),
    ]


def test_a_gap_is_ticked_through_up_to_gap_ticks_then_jumps(codec: AvroCodec) -> None:
    step = FakeStep(codec)
    driver = ReplayDriver([step], codec.decode, INTO, ReplayFilter())
    gap_s = GAP_TICKS + 700
    run(driver, [file_open(codec, T0_MS), file_open(codec, T0_MS + gap_s * 1000 + 400, 1)])
    ticks = step.times("tick")
    assert ticks[: GAP_TICKS + 1] == [T0 + k * S_NS for k in range(GAP_TICKS + 1)]
    assert ticks[GAP_TICKS + 1 :] == [T0 + gap_s * S_NS]  # one jump to the gap's last second
    assert step.times("process")[-1] > ticks[-1]


def test_a_gap_of_gap_ticks_seconds_is_ticked_every_second(codec: AvroCodec) -> None:
    step = FakeStep(codec)
    driver = ReplayDriver([step], codec.decode, INTO, ReplayFilter())
    run(driver, [file_open(codec, T0_MS), file_open(codec, T0_MS + GAP_TICKS * 1000, 1)])
    assert step.times("tick") == [T0 + k * S_NS for k in range(GAP_TICKS + 1)]


def test_finish_ticks_through_the_drain_then_flushes_with_the_end_reason(
    codec: AvroCodec,
) -> None:
    step = FakeStep(codec)
    driver = ReplayDriver([step], codec.decode, INTO, ReplayFilter())
    last_ms = T0_MS + 2500
    run(driver, [file_open(codec, T0_MS), file_open(codec, last_ms, 1)])
    before = len(step.times("tick"))
    assert driver.finish() == []
    last = last_ms * MS_NS
    drained = step.times("tick")[before:]
    assert drained == [T0 + k * S_NS for k in range(3, 3 + len(drained))]  # every second
    assert drained[-1] <= last + DRAIN_NS < drained[-1] + S_NS
    assert step.calls[-1] == ("flush", last + DRAIN_NS)
    assert step.reasons == [END_REASON]


def test_every_step_ticks_but_only_its_own_topics_are_fed(codec: AvroCodec) -> None:
    files, sockets = FakeStep(codec), FakeStep(codec, input_topics=(names.RAW_SOCKET.name,))
    driver = ReplayDriver([files, sockets], codec.decode, INTO, ReplayFilter())
    other = Message(names.RAW_STACK.name, 0, 0, None, b"", T0_MS + 1000)
    run(driver, [file_open(codec, T0_MS), other])
    driver.finish()
    assert files.times("process") == [T0] and sockets.times("process") == []
    assert files.times("tick") == sockets.times("tick") and len(files.times("tick")) > 300
    assert files.reasons == sockets.reasons == [END_REASON]
    assert (driver.counts.read, driver.counts.fed) == (2, 1)


def test_outputs_come_back_under_the_replay_topic_unchanged_otherwise(codec: AvroCodec) -> None:
    step = FakeStep(codec)
    driver = ReplayDriver([step], codec.decode, INTO, ReplayFilter())
    [out] = driver.feed(file_open(codec, T0_MS))
    [live] = FakeStep(codec).process(file_open(codec, T0_MS))
    assert out == Output(names.DERIVED_SPAN.name + ".replay-incident1", live.key, live.value)
    assert driver.counts.derived == 1
    assert driver.counts.by_topic == {names.DERIVED_SPAN.name: 1}


def test_dead_letters_are_counted_not_returned(codec: AvroCodec) -> None:
    step = FakeStep(codec)
    driver = ReplayDriver([step], codec.decode, INTO, ReplayFilter())
    poison = Message(names.RAW_FILEIO.name, 0, 1, b"42", b"\x00garbage", T0_MS)
    out = run(driver, [poison, file_open(codec, T0_MS, 2)])
    assert [o.topic for o in out] == [INTO.topic(names.DERIVED_SPAN.name)]
    c = driver.counts
    assert (c.read, c.fed, c.dead_letters, c.derived) == (2, 2, 1, 1)
    assert names.DEAD_LETTER.name not in c.by_topic


def test_the_node_filter_feeds_only_that_nodes_raw_events(codec: AvroCodec) -> None:
    step = FakeStep(codec)
    driver = ReplayDriver([step], codec.decode, INTO, ReplayFilter(node="n1"))
    poison = Message(names.RAW_FILEIO.name, 0, 3, b"42", b"\x00garbage", T0_MS + 3000)
    out = run(
        driver,
        [
            file_open(codec, T0_MS, 0, node="n1"),
            file_open(codec, T0_MS + 1000, 1, node="n2"),
            file_open(codec, T0_MS + 2000, 2, node="n1"),
            poison,  # no node to tell: not this node's
        ],
    )
    assert step.times("process") == [T0, T0 + 2 * S_NS]
    assert step.times("tick") == [T0 + k * S_NS for k in range(4)]  # skipped ones still tick
    assert [codec.decode(o.value)[1]["node_id"] for o in out] == ["n1", "n1"]
    c = driver.counts
    assert (c.read, c.fed, c.skipped, c.derived, c.dead_letters) == (4, 2, 2, 2, 0)


def test_derived_records_of_another_service_are_left_out_and_counted(codec: AvroCodec) -> None:
    step = FakeStep(codec)
    driver = ReplayDriver([step], codec.decode, INTO, ReplayFilter(service="python3"))
    out = run(
        driver,
        [
            file_open(codec, T0_MS, 0, process="python3"),
            file_open(codec, T0_MS, 1, process="java"),
            file_open(codec, T0_MS, 2, process="python3"),
        ],
    )
    assert [codec.decode(o.value)[1]["service"] for o in out] == ["python3", "python3"]
    c = driver.counts
    assert (c.read, c.fed, c.skipped, c.derived, c.left_out) == (3, 3, 0, 2, 1)
    assert c.by_topic == {names.DERIVED_SPAN.name: 2}


# ReplayDriver over the real correlator


CONVERSATIONS = 6


def conversation_messages(codec: AvroCodec) -> list[Message]:
    """Streaming chats side by side on raw.socket, keyed by connection as the collector
    publishes them, each partition in produce order, merged by time as a source hands them."""
    t0 = T0_MS * MS_NS
    convs = [conversation(f"c{i}", t0 + i * 700 * MS_NS, 4 + i) for i in range(CONVERSATIONS)]
    produced = sorted(
        (r for c in convs for r in c), key=lambda r: (int(r["start_ns"]), str(r["conn_id"]))
    )
    return list(merge_in_time([iter(s) for s in partitioned(codec, produced)]))


def partitioned(codec: AvroCodec, records: list[dict[str, Any]]) -> list[list[Message]]:
    topic = names.RAW_SOCKET
    parts: list[list[Message]] = [[] for _ in range(topic.partitions)]
    for record in records:
        key = str(record["conn_id"]).encode()
        p = partition_for(key, topic.partitions, 0)
        value = codec.encode(topic.record, record)
        ts_ms = int(record["start_ns"]) // MS_NS
        parts[p].append(Message(topic.name, p, len(parts[p]), key, value, ts_ms))
    return parts


def replayed(codec: AvroCodec, messages: list[Message]) -> tuple[list[Output], ReplayDriver]:
    driver = ReplayDriver([CorrelatorStep(codec)], codec.decode, INTO, ReplayFilter())
    return run(driver, messages) + driver.finish(), driver


def test_a_replay_of_real_conversations_is_deterministic_one_llm_record_each(
    codec: AvroCodec,
) -> None:
    messages = conversation_messages(codec)
    assert len({m.partition for m in messages}) > 1  # the merge had work to do
    first, driver = replayed(codec, messages)
    second, _ = replayed(codec, messages)
    assert first == second

    decoded = [(o.topic, codec.decode(o.value)) for o in first]
    llm = [datum for topic, (_, datum) in decoded if topic == INTO.topic(names.DERIVED_LLM.name)]
    assert len(llm) == CONVERSATIONS
    assert len({d["request_id"] for d in llm}) == CONVERSATIONS
    assert all(topic.endswith(INTO.topic_suffix) for topic, _ in decoded)
    assert driver.counts.by_topic[names.DERIVED_LLM.name] == CONVERSATIONS
    assert driver.counts.read == driver.counts.fed == len(messages)
    assert driver.counts.dead_letters == 0

    live = CorrelatorStep(codec)  # the same records a step driven message by message makes
    direct: list[Output] = []
    for m in messages:
        direct += live.process(m)
    direct += live.flush(0)
    assert sorted((INTO.topic(o.topic), o.key, o.value) for o in direct) == sorted(
        (o.topic, o.key, o.value) for o in first
    )


# Progress


@pytest.mark.parametrize(
    ("done", "now_s", "eta"),
    [
        (250, 105.0, "ETA 15 s"),  # 50/s, 750 left
        (10, 105.0, "ETA 8 min 15 s"),  # 2/s, 990 left
        (1, 105.0, "ETA 1 h 23 min"),  # 0.2/s, 999 left
        (1000, 110.0, "ETA -"),  # done
        (0, 105.0, "ETA -"),  # no rate yet
    ],
)
def test_progress_line_shows_done_share_rate_and_time_left(
    done: int, now_s: float, eta: str
) -> None:
    line = Progress(total=1000, started_s=100.0).line(done, derived=1234, now_s=now_s)
    rate = done / (now_s - 100.0)
    assert line == (
        f"replay: {done:,}/1,000 raw events ({done / 10:.1f} %), {rate:,.0f} events/s, {eta},"
        " 1,234 records derived"
    )


def test_progress_line_of_an_empty_period_has_no_share() -> None:
    line = Progress(total=0, started_s=100.0).line(0, 0, now_s=100.0)
    assert line == "replay: 0/0 raw events, 0 events/s, ETA -, 0 records derived"
