"""Read a BPF ring buffer (BPF_MAP_TYPE_RINGBUF) through its memory map, a batch per call.

Through libbpf (bcc's ``open_ring_buffer``) each record costs a ctypes callback into Python
and a copy (``ctypes.string_at``), for every call a busy server makes. Here the ring is
mapped once and walked in Python: each record is one slice of the map (a copy), and the
consumer position is written once per batch.

The layout (the kernel's kernel/bpf/ringbuf.c), as mapped here:

    consumer page  (read-write, map offset 0):       u64 consumer_pos at 0
    producer page  (read-only, map offset PAGE):     u64 producer_pos at 0
    data area      (read-only, map offset 2 * PAGE): `size` bytes (a power of two) mapped
                                                     twice, back to back: no record wraps

Positions only grow; a record sits at ``pos & (size - 1)``. Each one starts with an 8-byte
header, u32 len (bit 31: BUSY, still being written; bit 30: DISCARD, skip it) and u32
pg_off (the kernel's own), and takes ``round_up(len + 8, 8)`` bytes.

:func:`walk` is the pure part (any buffer will do: the tests use a bytearray); the
:class:`RingReader` shell maps the ring, waits for the producer's wake-up, copies the records
out and moves the consumer position.
"""

from __future__ import annotations

import mmap
import select
import time
from collections.abc import Callable
from typing import Final, NamedTuple, TypeAlias

from .event_layout import RawEvent

__all__ = [
    "BUSY_BIT",
    "DISCARD_BIT",
    "HEADER_BYTES",
    "RingImage",
    "RingReader",
    "Walk",
    "pace_wait",
    "walk",
]

BUSY_BIT: Final = 1 << 31  # BPF_RINGBUF_BUSY_BIT: reserved, not committed yet
DISCARD_BIT: Final = 1 << 30  # BPF_RINGBUF_DISCARD_BIT: committed as "skip me"
FLAG_BITS: Final = BUSY_BIT | DISCARD_BIT
HEADER_BYTES: Final = 8  # BPF_RINGBUF_HDR_SZ
# A record's step: round_up(len + HEADER_BYTES, 8) = (len + _ALIGN_UP) & _ALIGN_MASK.
_ALIGN_UP: Final = HEADER_BYTES + 7
_ALIGN_MASK: Final = ~7

RingImage: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
"""The data area, mapped twice back to back: the kernel's mapping, or a test's twin."""


class Walk(NamedTuple):
    """What one walk found between the consumer and the producer positions."""

    records: list[RawEvent]
    """Each record's bytes (no header), in ring order: copies where the data area is an
    mmap, bytes or a bytearray (their slices copy), views where it is a memoryview."""
    consumer: int
    """The consumer position after the last record taken (or stepped over)."""
    taken: int
    """Bytes of the records taken, headers not counted: what a BPF program that counts
    its output sizes counts."""
    budget_spent: bool
    """The walk stopped at its byte budget: the ring may hold more."""
    corrupt: bool = False
    """A header claimed more bytes than the producer has published: record boundaries are
    lost, so everything up to the producer position was skipped."""


def walk(data: RingImage, mask: int, consumer: int, producer: int, budget_bytes: int) -> Walk:
    """Records from *consumer* up to *producer* in *data* (the data area mapped twice: 2 *
    (mask + 1) bytes), until a BUSY record (it and what follows wait: the ring is read in
    order) or until at least *budget_bytes* were taken (the record that crosses the budget
    is taken: a budget of 0 takes one). DISCARDed records are stepped over, not taken.

    The hot path, run for every traced call: a u32 read, a slice and an append per record
    (~0.5 us); the rare headers (BUSY, DISCARD) leave it on one test.
    """
    headers = memoryview(data).cast("B").cast("I")  # by index: ~25 ns; struct: ~100 ns
    records: list[RawEvent] = []
    append = records.append
    taken = 0
    pos = consumer
    while pos < producer:
        offset = pos & mask
        length = headers[offset >> 2]
        if length & FLAG_BITS:
            if length & BUSY_BIT:
                break
            pos += (length - DISCARD_BIT + _ALIGN_UP) & _ALIGN_MASK
            if pos > producer:
                return Walk(records, producer, taken, False, corrupt=True)
            continue
        pos += (length + _ALIGN_UP) & _ALIGN_MASK
        if pos > producer:
            return Walk(records, producer, taken, False, corrupt=True)
        start = offset + HEADER_BYTES
        append(data[start : start + length])  # the second mapping holds any wrapped tail
        taken += length
        if taken >= budget_bytes:
            return Walk(records, pos, taken, True)
    return Walk(records, pos, taken, False)


def pace_wait(now: float, walked_at: float, pace_s: float, timeout_s: float) -> float:
    """Seconds a poll sleeps before it takes the ring: what is left of *pace_s* since the
    last take (*walked_at*), never more than the poll's own timeout (-1: none), and nothing
    for a poll that must not wait (timeout 0).

    Why: under load a reader that takes the ring as soon as anything is there takes a few
    records per connection each time, and pays per take what a batch pays once (an Avro
    header and a Kafka message per connection). Measured with 32 busy connections: ~4 calls
    per SocketBatch unpaced; paced (socket_ring.PACE_S), a few tens."""
    if timeout_s == 0 or pace_s <= 0:
        return 0.0
    rest = walked_at + pace_s - now
    if rest <= 0:
        return 0.0
    return rest if timeout_s < 0 else min(rest, timeout_s)


class RingReader:
    """The ring buffer *map_fd* (*size_bytes* of data: the map's max_entries), mapped.

    Each :meth:`poll` copies its records out (slicing the mapped data area copies, which
    costs less than a memoryview slice and leaves nothing pointing into the ring) and only
    then hands their space back to the kernel. Raises OSError (or ValueError) where the
    kernel cannot map the ring.
    """

    def __init__(
        self,
        map_fd: int,
        size_bytes: int,
        *,
        pace_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """pace_s: a waiting poll takes the ring at most this often (see :func:`pace_wait`)."""
        if size_bytes <= 0 or size_bytes & (size_bytes - 1):
            raise ValueError(f"ring size must be a power of two, got {size_bytes}")
        page = mmap.PAGESIZE
        self._maps: list[mmap.mmap] = []
        self._epoll = select.epoll()
        try:
            # The kernel lets only the consumer page be mapped writable, and only alone.
            consumer = self._map(map_fd, page, 0, mmap.ACCESS_WRITE)
            producer = self._map(map_fd, page, page, mmap.ACCESS_READ)
            self._data = self._map(map_fd, 2 * size_bytes, 2 * page, mmap.ACCESS_READ)
            self._epoll.register(map_fd, select.EPOLLIN)
        except BaseException:
            self._epoll.close()
            self._unmap()
            raise
        self._consumer_pos = memoryview(consumer).cast("Q")
        self._producer_pos = memoryview(producer).cast("Q")
        self._mask = size_bytes - 1
        self._budget_spent = False
        self._pace_s, self._clock, self._sleep = pace_s, clock, sleep
        self._walked_at = float("-inf")

    def _map(self, fd: int, length: int, offset: int, access: int) -> mmap.mmap:
        mapped = mmap.mmap(fd, length, access=access, offset=offset)
        self._maps.append(mapped)
        return mapped

    def poll(self, timeout_ms: int, budget_bytes: int) -> Walk:
        """Wait for the producer's wake-up or *timeout_ms* (-1: forever), then take what the
        ring holds, up to *budget_bytes*, and give its space back.

        Waits even when records are there, as libbpf's ring_buffer__poll does: a producer
        that wakes its reader only now and then (socket.c wakes it once a sixteenth of the
        ring filled) means it to drain in batches, on its wake-ups or its timed polls, not
        record by record. And since the ring's epoll is level-triggered (ready while any
        record waits), a busy ring is taken at most once per *pace_s*, so that each take is
        a batch worth its fixed costs. Only after a poll that its budget cut short is the
        rest read at once, without waiting.
        """
        if not self._budget_spent:
            timeout_s = timeout_ms / 1000 if timeout_ms >= 0 else -1.0
            paced = pace_wait(self._clock(), self._walked_at, self._pace_s, timeout_s)
            if paced > 0:
                self._sleep(paced)
                timeout_s = max(0.0, timeout_s - paced) if timeout_s >= 0 else timeout_s
            self._epoll.poll(timeout_s)
        # Aligned u64 loads and stores, whole on x86-64 and arm64. Python has no acquire or
        # release: on x86-64 (total store order) plain ones give what libbpf's do (headers
        # read after producer_pos are at least as new; the consumer_pos store lands after
        # the record reads); a weakly ordered CPU (arm64) promises less.
        batch = walk(
            self._data, self._mask, self._consumer_pos[0], self._producer_pos[0], budget_bytes
        )
        self._consumer_pos[0] = batch.consumer  # the records are copies: the space is free
        if batch.records:  # paced from the last take, not from an idle wait's end
            self._walked_at = self._clock()
        self._budget_spent = batch.budget_spent
        return batch

    def close(self) -> None:
        """Stop waiting and unmap. Safe to call more than once."""
        self._epoll.close()
        self._consumer_pos.release()
        self._producer_pos.release()
        self._unmap()

    def _unmap(self) -> None:
        for mapped in self._maps:
            mapped.close()
        self._maps = []
