"""Frames of a live capture put back in timestamp order.

The kernel stamps a frame when it enters a CPU's receive path, and each CPU hands its frames
to the capture socket from its own queue: with two CPUs sending (a client and a server on
one host), a frame stamped earlier can reach the socket after a later one (a loaded CI run
saw 164 µs). A pcap whose times go backwards makes every reader's figures wrong by that much.
So frames are held until one stamped `window_ns` later has arrived, or the clock has passed
that mark, and leave oldest first. Pure: the caller passes the clock.
"""

from __future__ import annotations

import heapq
from typing import Final

from zerotrace_collector.packets.captured import CapturedPacket

DEFAULT_WINDOW_NS: Final = 50_000_000
"""How late a frame may come and still be put in its place; also how long each one waits."""


class TimeOrder:
    """A bounded reorder buffer. *max_held* frames at most: past it the oldest leaves at once
    (it is then not reordered with later arrivals, and a late one after it is counted)."""

    def __init__(self, window_ns: int = DEFAULT_WINDOW_NS, max_held: int = 65_536) -> None:
        self._window_ns = window_ns
        self._max_held = max_held
        self._held: list[tuple[int, int, CapturedPacket]] = []
        self._seq = 0  # arrival order among equal timestamps
        self._newest = 0
        self._released = 0  # timestamp of the last frame out
        self.reordered = 0  # frames that arrived after a later-stamped one, put back in place
        self.late = 0  # frames that arrived after a later-stamped one had already left

    def push(self, packet: CapturedPacket) -> list[CapturedPacket]:
        """Take a frame; return those now safe to write, oldest first."""
        if packet.ts_ns < self._released:
            self.late += 1
        elif packet.ts_ns < self._newest:
            self.reordered += 1
        self._newest = max(self._newest, packet.ts_ns)
        heapq.heappush(self._held, (packet.ts_ns, self._seq, packet))
        self._seq += 1
        return self._release(self._newest - self._window_ns)

    def due(self, now_ns: int) -> list[CapturedPacket]:
        """Frames whose wait is over by the capture clock (call on a quiet interface)."""
        return self._release(now_ns - self._window_ns)

    def flush(self) -> list[CapturedPacket]:
        """Everything held, oldest first (the capture ends)."""
        return self._release(None)

    def _release(self, upto_ns: int | None) -> list[CapturedPacket]:
        out = []
        while self._held and (
            upto_ns is None or self._held[0][0] <= upto_ns or len(self._held) > self._max_held
        ):
            ts, _, packet = heapq.heappop(self._held)
            self._released = max(self._released, ts)
            out.append(packet)
        return out
