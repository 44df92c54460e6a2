"""The socket probe's event ring, read a poll at a time, and what it tells the program back.

Mapped (:mod:`.ring_reader`: a batch per poll, no callback per record) where the kernel and
the CPU allow it; elsewhere through libbpf's ring_buffer__poll, one ctypes callback per
record. Either way a poll takes at most POLL_BYTES and leaves the rest in the ring for the
next one, after what it took went through the pipeline: a full 16 MiB ring is never all in
memory at once. After each poll the bytes taken so far are written to the program's flow map
(ZT_FLOW_TAKEN): the program compares them with the bytes it offered to know how far behind
this reader is, and sheds whole connections when far behind (bpf/socket.c "Shedding").

An I/O shell over bcc's table objects; the probe decodes and filters what it returns.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Sequence
from typing import Any, Final

from .bcc_loader import first_line
from .event_layout import RawEvent
from .ring_reader import RingReader

__all__ = ["POLL_BYTES", "EventRing"]

# Event bytes one poll takes from the ring at most; read at each poll (tests lower it).
POLL_BYTES = 4 * 1024 * 1024
# A busy ring is taken at most this often (ring_reader.pace_wait): batches worth their cost.
# A SocketBatch's Avro encoding costs ~12 us whatever its size plus ~3.5 us per call, so calls
# per batch matter: bench.collector_throughput's steady phase (32 connections, 2,000 requests/s)
# gave 56-61k events/s per collector core at 50 ms and 83-93k at 100 ms, same sitting (200 ms:
# no better). A tenth of a second of the burst phase stays far below the ring's shedding mark
# (3/4 of 16 MiB): the same 0 lost there. Publishing is 0.1 s later at most; times are the
# kernel's, so no measurement moves.
PACE_S: Final = 0.1
# Python has no acquire/release loads and stores: plain ones give libbpf's ordering only on a
# CPU that keeps stores in order (x86-64). Elsewhere libbpf reads the ring.
MAPPED_RING_MACHINES: Final = ("x86_64", "AMD64")
FLOW_TAKEN: Final = 1  # ZT_FLOW_TAKEN: bytes this reader consumed, told to the program


class EventRing:
    """*events*: the BPF_MAP_TYPE_RINGBUF table; *flow*: the program's flow array; *bpf*: the
    BPF object (libbpf's poll lives there); *notes*: where a line goes when the ring is read
    through libbpf. Raises what bcc raises when neither way can open the ring."""

    def __init__(self, bpf: Any, events: Any, flow: Any, notes: list[str]) -> None:
        self._bpf, self._flow = bpf, flow
        self.taken = 0  # payload bytes taken since attach, as the program counts them offered
        self.backlog = False  # the last poll stopped at POLL_BYTES: the ring holds more
        self.corrupt = 0  # polls that met a header claiming more than the ring holds
        self._records: list[bytes] = []
        self._budget = 0
        self._reader = self._map(events, notes)
        if self._reader is None:
            events.open_ring_buffer(self._on_record)

    @staticmethod
    def _map(events: Any, notes: list[str]) -> RingReader | None:
        machine = platform.machine()
        if machine not in MAPPED_RING_MACHINES:
            notes.append(
                f"ring buffer read through libbpf on {machine} (mapped on x86-64 only), "
                "one callback per event"
            )
            return None
        try:
            return RingReader(events.map_fd, int(events.max_entries), pace_s=PACE_S)
        except (OSError, ValueError) as exc:
            notes.append(
                f"ring buffer not mappable ({first_line(exc, 120)}): events read through "
                "libbpf, one callback each"
            )
            return None

    def take(self, timeout_ms: int) -> Sequence[RawEvent]:
        """Wait up to *timeout_ms* (-1: forever), then the records of one poll, in order,
        each a copy (the ring's space is the kernel's again)."""
        if self._reader is not None:
            batch = self._reader.poll(timeout_ms, POLL_BYTES)
            self.backlog = batch.budget_spent
            self.taken += batch.taken
            self.corrupt += batch.corrupt
            records: Sequence[RawEvent] = batch.records
        else:
            records = self._take_libbpf(timeout_ms)
        self._flow[self._flow.Key(FLOW_TAKEN)] = self._flow.Leaf(self.taken)
        return records

    def _take_libbpf(self, timeout_ms: int) -> list[bytes]:
        self._budget, self.backlog = POLL_BYTES, False
        self._bpf.ring_buffer_poll(timeout=timeout_ms)
        if self._budget > 0:
            self._bpf.ring_buffer_consume()  # what came without a wake-up (see socket.c)
        records, self._records = self._records, []
        return records

    def _on_record(self, _ctx: Any, data: int, size: int) -> int:
        # libbpf has consumed the record before this callback, whatever it returns, so it is
        # kept first; a negative return then ends the poll at its budget.
        self._records.append(ctypes.string_at(data, size))
        self.taken += size
        self._budget -= size
        if self._budget <= 0:
            self.backlog = True
            return -1
        return 0

    def close(self) -> None:
        """Unmap (the libbpf path ends with the BPF object). Safe to call more than once."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
