"""The live RoCE flows feed (a collector Feed): RoCEv2 packets captured on one interface, as a
zerotrace.raw.RdmaCounters record (source PACKETS) per active queue pair flow every interval,
for raw.rdma. A thin shell: af_packet.LiveSocket captures (the kernel keeps only UDP datagrams
to port 4791, cut to CAPTURE_BYTES), time_order.TimeOrder puts frames back in timestamp order,
roce_intervals decides.

`poll` never blocks the collector loop: it takes the frames queued now (at most
MAX_FRAMES_PER_POLL a turn; the rest wait in the socket's buffer, and what overflows it is
counted in kernel_drops), and waits only when the loop gives it a timeout (when this feed leads
the loop, as it does alone). Records come out once the interval is due.

Where RoCE can be seen: AF_PACKET sees what passes through the kernel's network stack: Soft-RoCE
(rxe), a mirror or SPAN port, loopback. A RoCE NIC (mlx5, ...) sends and receives RDMA traffic
past the kernel, so its interface shows none of it unless the NIC copies it up (a vendor's
sniffer mode).

`attach` says in one line what it captures, or why it cannot (no such interface, not allowed):
the feed then idles and the node's other feeds run on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from zerotrace import names
from zerotrace.errors import ConfigError, FeatureUnavailable
from zerotrace_collector.feeds import RawRecord
from zerotrace_collector.packets.af_packet import LiveSocket
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.roce import ROCEV2_PORT
from zerotrace_collector.packets.roce_flows import MAX_QPS
from zerotrace_collector.packets.roce_psn import LOSS_AFTER_NS
from zerotrace_collector.packets.time_order import DEFAULT_WINDOW_NS, TimeOrder
from zerotrace_collector.rdma.roce_intervals import RoceIntervals

INTERVAL_NS = 1_000_000_000  # as the RDMA counters feed's
# Ethernet 14 + IPv6 40 + UDP 8 + BTH 12 + RDETH and DETH 12 + AtomicETH 28 = 114 bytes of
# headers at most: 128 keeps them all (the lengths come from the IP and UDP headers).
CAPTURE_BYTES = 128
# Frames handled in one poll: about 20 us of Python each, so a turn of the loop spends at most
# some 40 ms here; the socket buffer holds the rest for the next turn.
MAX_FRAMES_PER_POLL = 2048
# Frames held for reordering at most (128-byte frames: a few MB).
MAX_HELD = 16_384


class FrameSource(Protocol):
    """What the feed reads frames from (af_packet.LiveSocket; a list in tests)."""

    def wait(self, timeout_s: float) -> bool: ...

    def ready(self, limit: int) -> list[CapturedPacket]: ...

    def drops(self) -> int: ...

    def close(self) -> None: ...


def open_live_socket(interface: str) -> FrameSource:
    return LiveSocket(interface, ROCEV2_PORT, CAPTURE_BYTES)


class RoceLiveFeed:
    name = "roce"
    follows = True  # its records name no process to filter by

    def __init__(
        self,
        node_id: str,
        interface: str,
        interval_ns: int = INTERVAL_NS,
        max_flows: int = MAX_QPS,
        loss_after_ns: int = LOSS_AFTER_NS,
        clock: Callable[[], int] = time.time_ns,
        open_source: Callable[[str], FrameSource] = open_live_socket,
        note: Callable[[str], None] | None = None,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        """clock: epoch ns, the clock of the kernel's frame timestamps; open_source: opens the
        capture (raises ConfigError or FeatureUnavailable with one line); note: where a
        one-line note goes (default :attr:`notes`); wait: sleeps up to that many seconds
        while there is nothing to capture (default: an Event never set)."""
        if interval_ns <= 0:
            raise ValueError("the RoCE interval must be positive")
        self.notes: list[str] = []
        self._note = note or self.notes.append
        self._wait = wait or threading.Event().wait
        self._node_id = node_id
        self.interface = interface
        self._interval_ns = interval_ns
        self._max_flows = max_flows
        self._loss_after_ns = loss_after_ns
        self._clock = clock
        self._open = open_source
        self._source: FrameSource | None = None
        self._order = TimeOrder(DEFAULT_WINDOW_NS, MAX_HELD)
        self._core = RoceIntervals(node_id, 0, max_flows, loss_after_ns)
        self._due_ns = 0
        self._counts = dict.fromkeys(("frames", "kernel_drops"), 0)

    def attach(self) -> None:
        try:
            self._source = self._open(self.interface)
        except (ConfigError, FeatureUnavailable) as exc:
            self._note(f"RoCE flows: not capturing on {self.interface!r}: {exc}")
            return
        now = self._clock()
        self._core = RoceIntervals(self._node_id, now, self._max_flows, self._loss_after_ns)
        self._due_ns = now + self._interval_ns
        self._note(
            f"RoCE flows: capturing UDP port {ROCEV2_PORT} on {self.interface} (first "
            f"{CAPTURE_BYTES} bytes of each datagram), a record per active queue pair every "
            f"{self._interval_ns / 1e9:g} s, at most {self._max_flows} flows"
        )

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        source = self._source
        if source is None:
            if timeout_ms > 0:
                self._wait(timeout_ms / 1000)
            return []
        wait_s = min(timeout_ms / 1000, (self._due_ns - self._clock()) / 1e9)
        if wait_s > 0:
            source.wait(wait_s)  # back as soon as a frame is queued
        frames = source.ready(MAX_FRAMES_PER_POLL)
        self._counts["frames"] += len(frames)
        for frame in frames:
            for packet in self._order.push(frame):
                self._core.feed(packet)
        now = self._clock()
        for packet in self._order.due(now):
            self._core.feed(packet)
        if now < self._due_ns:
            return []
        self._due_ns = now + self._interval_ns
        self._counts["kernel_drops"] += source.drops()
        key = self._node_id.encode()
        return [
            RawRecord(names.RAW_RDMA.name, key, names.RAW_RDMA.record, datum)
            for datum in self._core.tick(now)
        ]

    def counters(self) -> dict[str, int]:
        return {
            **self._counts,
            "reordered": self._order.reordered,
            "late": self._order.late,
            **self._core.counters(),
        }

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None
