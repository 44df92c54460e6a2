"""Pure tests of the BPF ring buffer walker (zerotrace_collector.probes.ring_reader.walk) on
a bytearray twin of the kernel's ring, written by a tiny fake producer. The mapped shell
(RingReader) runs under the socket probe's kernel tests."""

from __future__ import annotations

import mmap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.probes.ring_reader import (
    BUSY_BIT,
    DISCARD_BIT,
    HEADER_BYTES,
    Walk,
    pace_wait,
    walk,
)

pytestmark = pytest.mark.unit


class FakeRing:
    """The kernel's side of kernel/bpf/ringbuf.c, in a bytearray: the data area twice, back to
    back (as the kernel maps it), and the two positions."""

    def __init__(self, size: int = 256, start: int = 0) -> None:
        self.size = size
        self.data = bytearray(2 * size)
        self.consumer = self.producer = start

    def _put(self, pos: int, blob: bytes) -> None:
        """Write at a ring position, wrapping, into both copies of the data area."""
        for i, byte in enumerate(blob):
            at = (pos + i) % self.size
            self.data[at] = self.data[at + self.size] = byte

    def reserve(self, payload: bytes) -> int:
        """Reserve and fill a record, still BUSY; returns its position."""
        pos, step = self.producer, (len(payload) + HEADER_BYTES + 7) // 8 * 8
        assert self.producer + step - self.consumer <= self.size, "ring full"
        self._put(pos, (len(payload) | BUSY_BIT).to_bytes(4, "little") + bytes(4))
        self._put(pos + HEADER_BYTES, payload)
        self.producer += step
        return pos

    def commit(self, pos: int, *, discard: bool = False) -> None:
        length = int.from_bytes(self.data[pos % self.size :][:4], "little") & ~BUSY_BIT
        self._put(pos, (length | (DISCARD_BIT if discard else 0)).to_bytes(4, "little"))

    def output(self, payload: bytes, *, discard: bool = False) -> None:
        self.commit(self.reserve(payload), discard=discard)

    def walk(self, budget: int = 1 << 30) -> Walk:
        found = walk(memoryview(self.data), self.size - 1, self.consumer, self.producer, budget)
        self.consumer = found.consumer
        return found


def payloads(found: Walk) -> list[bytes]:
    return [bytes(record) for record in found.records]


def test_records_come_in_order_with_their_bytes_and_the_consumer_moves_past_them() -> None:
    ring = FakeRing()
    sent = [b"a", b"bb" * 5, b"ccc" * 7, bytes(range(40))]
    for payload in sent:
        ring.output(payload)
    found = ring.walk()
    assert payloads(found) == sent
    assert found.consumer == ring.producer
    assert found.taken == sum(map(len, sent))  # payloads only: no header, no padding
    assert not found.budget_spent and not found.corrupt


def test_records_of_a_mapped_area_are_copies_that_outlive_its_reuse() -> None:
    ring = FakeRing()
    ring.output(b"request")
    mapped = mmap.mmap(-1, len(ring.data))  # what RingReader walks: slices of an mmap copy
    mapped[:] = ring.data
    found = walk(mapped, ring.size - 1, ring.consumer, ring.producer, 1 << 30)
    mapped[:] = bytes(len(ring.data))  # the kernel writes new records over the space
    assert found.records == [b"request"]
    mapped.close()  # nothing points into the map


def test_an_empty_ring_gives_nothing() -> None:
    ring = FakeRing(start=4096)
    assert ring.walk() == Walk([], 4096, 0, False)


def test_a_record_across_the_end_of_the_data_area_reads_whole_from_the_second_mapping() -> None:
    size = 64
    ring = FakeRing(size, start=1000 * size + 48)  # positions grow past the size: masked
    ring.output(bytes(range(30)))  # header at 48..55, payload 56..85: wraps at 64
    assert ring.data[56:64] + ring.data[:22] == bytes(range(30))  # what the kernel wrote
    found = ring.walk()
    assert payloads(found) == [bytes(range(30))]
    assert found.consumer == 1000 * size + 48 + 40


def test_a_busy_record_stops_the_walk_and_what_follows_it_waits() -> None:
    ring = FakeRing()
    ring.output(b"first")
    busy = ring.reserve(b"second")
    ring.output(b"third")  # committed, but after a busy one: read in ring order only
    found = ring.walk()
    assert payloads(found) == [b"first"]
    assert found.consumer == busy
    ring.commit(busy)
    assert payloads(ring.walk()) == [b"second", b"third"]


def test_discarded_records_are_stepped_over_and_not_counted() -> None:
    ring = FakeRing()
    ring.output(b"kept")
    ring.output(b"dropped" * 3, discard=True)
    ring.output(b"kept too")
    found = ring.walk()
    assert payloads(found) == [b"kept", b"kept too"]
    assert found.taken == len(b"kept") + len(b"kept too")
    assert found.consumer == ring.producer


def test_the_budget_takes_the_record_that_crosses_it_and_leaves_the_rest() -> None:
    ring = FakeRing()
    for n in range(6):
        ring.output(bytes([n]) * 10)
    found = ring.walk(budget=25)  # 10, 20, 30: the third crosses
    assert payloads(found) == [bytes([n]) * 10 for n in range(3)]
    assert (found.taken, found.budget_spent) == (30, True)
    assert ring.consumer < ring.producer
    rest = ring.walk(budget=25)
    assert payloads(rest) == [bytes([n]) * 10 for n in range(3, 6)]
    assert rest.budget_spent  # 30 >= 25: spent, though the ring happens to be empty now
    assert ring.walk(budget=25) == Walk([], ring.producer, 0, False)


def test_a_budget_met_exactly_stops_there() -> None:
    ring = FakeRing()
    ring.output(b"x" * 8)
    ring.output(b"y" * 8)
    found = ring.walk(budget=8)
    assert payloads(found) == [b"x" * 8] and found.budget_spent


def test_a_header_longer_than_what_was_published_skips_to_the_producer() -> None:
    ring = FakeRing()
    ring.output(b"good")
    bad = ring.producer
    ring.output(b"bad!")
    ring._put(bad, (200).to_bytes(4, "little"))  # claims 200 bytes; 16 were published
    found = ring.walk()
    assert payloads(found) == [b"good"]
    assert found.corrupt and not found.budget_spent
    assert found.consumer == ring.producer  # boundaries are lost: nothing after is trusted


@given(
    batches=st.lists(
        st.lists(st.tuples(st.binary(max_size=40), st.booleans()), max_size=5), max_size=30
    ),
    budget=st.integers(0, 120),
)
def test_whatever_is_written_is_read_once_in_order_however_the_walks_fall(
    batches: list[list[tuple[bytes, bool]]], budget: int
) -> None:
    ring = FakeRing(size=256, start=200)  # wraps early and often
    sent: list[bytes] = []
    got: list[bytes] = []
    for batch in batches:
        for payload, discard in batch:
            step = (len(payload) + HEADER_BYTES + 7) // 8 * 8
            while ring.producer + step - ring.consumer > ring.size:  # full: the reader drains
                got += payloads(ring.walk(budget))
            ring.output(payload, discard=discard)
            sent += [] if discard else [payload]
        got += payloads(ring.walk(budget))
    while ring.consumer < ring.producer:
        got += payloads(ring.walk(budget))
    assert got == sent


def test_a_waiting_poll_takes_a_busy_ring_at_most_once_per_pace() -> None:
    # The last take 10 ms ago, a 50 ms pace: 40 ms left, never more than the poll's timeout.
    assert pace_wait(now=1.010, walked_at=1.0, pace_s=0.05, timeout_s=0.1) == pytest.approx(0.04)
    assert pace_wait(now=1.010, walked_at=1.0, pace_s=0.05, timeout_s=0.02) == 0.02
    assert pace_wait(now=1.010, walked_at=1.0, pace_s=0.05, timeout_s=-1) == pytest.approx(0.04)
    # Due already, unpaced, or a drain that must not wait: at once.
    assert pace_wait(now=1.060, walked_at=1.0, pace_s=0.05, timeout_s=0.1) == 0.0
    assert pace_wait(now=1.010, walked_at=1.0, pace_s=0.0, timeout_s=0.1) == 0.0
    assert pace_wait(now=1.010, walked_at=1.0, pace_s=0.05, timeout_s=0) == 0.0
    assert pace_wait(now=0.0, walked_at=float("-inf"), pace_s=0.05, timeout_s=0.1) == 0.0
