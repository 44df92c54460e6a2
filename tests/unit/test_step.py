"""The Step contract (lib/zerotrace/step.py) that makes a killed worker lose nothing and repeat
nothing. A shell publishes outputs and commits input offsets in one transaction: the outputs
of every message taken so far, offsets no further than `held()` allows, and how far it had
taken each partition. Whatever commit a worker dies after, what it had published plus what a
new worker derives from the committed offsets on (dropping the outputs of messages at or
below the recorded progress) are exactly the outputs of a run that never stopped."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness.llm_conversations import conversation, interleaved
from tests.unit.test_profile_step import sample
from zerotrace import names
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.socket_batch import socket_batch_of
from zerotrace.step import Output, Step
from zerotrace_correlator.pipeline import CorrelatorStep
from zerotrace_profiler_agg.profile_step import ProfileStep
from zerotrace_profiler_agg.settings import ProfilerAggSettings

pytestmark = pytest.mark.unit

CODEC = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
PARTITIONS = 3
T0 = 1_700_000_000_000_000_000
AGG = ProfilerAggSettings(window_ms=1_000, lateness_ms=200)


def as_messages(topic: names.Topic, records: list[dict[str, Any]], key: str) -> list[Message]:
    """Records on `topic`, partitioned by `key` as the collector keys them, in this order."""
    offsets = [0] * PARTITIONS
    out = []
    for record in records:
        partition = zlib.crc32(str(record[key]).encode()) % PARTITIONS
        value = CODEC.encode(topic.record, record)
        out.append(Message(topic.name, partition, offsets[partition], None, value, 0))
        offsets[partition] += 1
    return out


def conversations() -> list[Message]:
    rounds = interleaved(12, T0, tokens=5)
    return as_messages(names.RAW_SOCKET, [r for batch in rounds for r in batch], "conn_id")


def stack_samples() -> list[Message]:
    records = [
        sample(T0 + i * 150_000_000, ["thread:1", f"py:f{i % 4} (a.py:1)"], pid=pid, tid=pid)
        for i in range(40)
        for pid in (101, 102, 103, 104)
    ]
    return as_messages(names.RAW_STACK, records, "pid")


def run_through(step: Step, messages: Sequence[Message]) -> list[Output]:
    return [o for m in messages for o in step.process(m)] + step.flush(0)


def crash_and_replay(make_step: Callable[[], Step], messages: list[Message], commit: int) -> None:
    """The worker's last commit came after `commit` messages; what followed it is lost."""
    whole = run_through(make_step(), messages)
    step = make_step()
    published = [o for m in messages[:commit] for o in step.process(m)]
    held = step.held()
    progress: dict[tuple[str, int], int] = {}  # the last offset taken, per partition
    for m in messages[:commit]:
        progress[(m.topic, m.partition)] = m.offset
    committed = {
        where: min(last + 1, held.get(where, last + 1)) for where, last in progress.items()
    }
    replay = make_step()
    replayed: list[Output] = []
    for m in messages:
        where = (m.topic, m.partition)
        if m.offset < committed.get(where, 0):
            continue
        outputs = replay.process(m)
        if m.offset > progress.get(where, -1):  # at or below: published by the first worker
            replayed += outputs
    replayed += replay.flush(0)
    assert Counter(published + replayed) == Counter(whole)


def keep_alive_batches(calls_per_batch: int) -> list[Message]:
    """Four keep-alive connections with two exchanges each, published as the collector
    publishes them: SocketBatch records of a few calls each, connections interleaved. A held
    offset then often points into a batch whose first calls end the previous exchange."""
    per_conn = [
        conversation(f"c{i}", T0 + i * 1_000, 5) + conversation(f"c{i}", T0 + i * 1_000 + 10**8, 5)
        for i in range(4)
    ]
    batches = [
        [calls[at : at + calls_per_batch] for at in range(0, len(calls), calls_per_batch)]
        for calls in per_conn
    ]
    offsets = [0] * PARTITIONS
    out = []
    for k in range(max(len(b) for b in batches)):
        for conn_batches in batches:
            if k < len(conn_batches):
                datum = socket_batch_of(conn_batches[k])
                partition = zlib.crc32(str(datum["conn_id"]).encode()) % PARTITIONS
                value = CODEC.encode(names.SOCKET_BATCH_RECORD, datum)
                out.append(
                    Message(names.RAW_SOCKET.name, partition, offsets[partition], None, value, 0)
                )
                offsets[partition] += 1
    return out


CONVERSATIONS = conversations()
SAMPLES = stack_samples()
KEEP_ALIVE = {size: keep_alive_batches(size) for size in (1, 3, 5, 7)}


def test_the_inputs_make_outputs_and_hold_offsets() -> None:
    step = CorrelatorStep(CODEC)
    outputs = [o for m in CONVERSATIONS[: len(CONVERSATIONS) // 2] for o in step.process(m)]
    assert outputs == [] and step.held(), "every conversation is open half way"
    llm = [o for o in run_through(CorrelatorStep(CODEC), CONVERSATIONS) if o.topic == "derived.llm"]
    assert len(llm) == 12
    profiles = ProfileStep(CODEC, AGG)
    assert [o for m in SAMPLES[:10] for o in profiles.process(m)] == [] and profiles.held()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, len(CONVERSATIONS)))
def test_a_correlator_killed_anywhere_loses_and_repeats_nothing(commit: int) -> None:
    crash_and_replay(lambda: CorrelatorStep(CODEC), CONVERSATIONS, commit)


@pytest.mark.parametrize("calls_per_batch", sorted(KEEP_ALIVE))
def test_a_correlator_of_batches_killed_anywhere_loses_and_repeats_nothing(
    calls_per_batch: int,
) -> None:
    """Replay starts at a held batch whose first calls end an exchange already published (an
    SSE chunk, a last chunk): the connection is joined mid-way, not given up as not HTTP."""
    messages = KEEP_ALIVE[calls_per_batch]
    assert (
        len(
            [
                o
                for o in run_through(CorrelatorStep(CODEC), messages)
                if o.topic == names.DERIVED_LLM.name
            ]
        )
        == 8
    )
    for commit in range(len(messages) + 1):
        crash_and_replay(lambda: CorrelatorStep(CODEC), messages, commit)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, len(SAMPLES)))
def test_a_profiler_agg_killed_anywhere_loses_and_repeats_nothing(commit: int) -> None:
    crash_and_replay(lambda: ProfileStep(CODEC, AGG), SAMPLES, commit)


def test_without_held_offsets_a_restart_would_lose_the_exchanges_in_flight() -> None:
    """The check above is not vacuous: committing everything taken loses what was open."""
    crash = len(CONVERSATIONS) // 2
    step = CorrelatorStep(CODEC)
    published = [o for m in CONVERSATIONS[:crash] for o in step.process(m)]
    replayed = run_through(CorrelatorStep(CODEC), CONVERSATIONS[crash:])
    whole = run_through(CorrelatorStep(CODEC), CONVERSATIONS)
    llm = [o for o in published + replayed if o.topic == names.DERIVED_LLM.name]
    assert len(llm) < len([o for o in whole if o.topic == names.DERIVED_LLM.name])
