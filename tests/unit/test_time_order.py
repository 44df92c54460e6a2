"""Live frames put back in timestamp order: what two CPUs' receive queues hand a capture
socket out of order leaves in order, held no longer than the window."""

from __future__ import annotations

import pytest

from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.time_order import TimeOrder

pytestmark = pytest.mark.unit

MS = 1_000_000


def frame(ts_ms: float) -> CapturedPacket:
    return CapturedPacket(int(ts_ms * MS), 1, b"x", 1)


def times(frames: list[CapturedPacket]) -> list[float]:
    return [f.ts_ns / MS for f in frames]


def test_a_frame_stamped_earlier_but_read_later_is_put_in_its_place() -> None:
    order = TimeOrder(window_ns=50 * MS)
    out = []
    for ts in (100.0, 100.3, 100.1, 120.0, 151.0, 200.0):
        out += order.push(frame(ts))
    assert times(out) == [100.0, 100.1, 100.3, 120.0]  # 50 ms or more before the newest (200)
    out += order.flush()
    assert times(out) == [100.0, 100.1, 100.3, 120.0, 151.0, 200.0]
    assert (order.reordered, order.late) == (1, 0)


def test_a_quiet_interface_lets_frames_go_by_the_clock() -> None:
    order = TimeOrder(window_ns=50 * MS)
    assert order.push(frame(100.0)) == []
    assert order.due(140 * MS) == []
    assert times(order.due(150 * MS)) == [100.0]


def test_too_late_and_too_many_are_counted_not_held() -> None:
    order = TimeOrder(window_ns=50 * MS, max_held=2)
    out = order.push(frame(100.0)) + order.push(frame(300.0))
    assert times(out) == [100.0]
    out = order.push(frame(90.0))  # later than its window: goes out as it is, counted
    assert times(out) == [90.0] and order.late == 1
    out = order.push(frame(301.0)) + order.push(frame(302.0))  # past max_held: oldest leaves
    assert times(out) == [300.0]
