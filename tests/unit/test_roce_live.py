"""rdma/roce_live.py, the live RoCE flows feed, on a scripted frame source and clock: one line at
attach (what it captures, or why it cannot: then it idles), nothing until the interval is due,
then a raw.rdma record per active flow; frames put back in time order; a poll takes at most
MAX_FRAMES_PER_POLL and waits only as long as the loop allows."""

from __future__ import annotations

import pytest

from tests.unit.roce_capture import ACK, US, frame
from zerotrace import names
from zerotrace.errors import ConfigError, FeatureUnavailable
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.roce import ACKNOWLEDGE, SEND_ONLY
from zerotrace_collector.rdma import roce_live
from zerotrace_collector.rdma.roce_live import FrameSource, RoceLiveFeed

pytestmark = pytest.mark.unit

A, B = "10.0.0.1", "10.0.0.2"
T = 2_000_000.0  # microseconds
MS = 1_000_000


class Clock:
    def __init__(self, ns: int) -> None:
        self.ns = ns

    def __call__(self) -> int:
        return self.ns


class Frames:
    """Frames queued by the test; records how the feed waited and read."""

    def __init__(self) -> None:
        self.queued: list[CapturedPacket] = []
        self.waits: list[float] = []
        self.limits: list[int] = []
        self.kernel_drops = 0
        self.closed = False

    def wait(self, timeout_s: float) -> bool:
        self.waits.append(timeout_s)
        return bool(self.queued)

    def ready(self, limit: int) -> list[CapturedPacket]:
        self.limits.append(limit)
        out, self.queued = self.queued[:limit], self.queued[limit:]
        return out

    def drops(self) -> int:
        out, self.kernel_drops = self.kernel_drops, 0
        return out

    def close(self) -> None:
        self.closed = True


def feed_on(frames: Frames, clock: Clock) -> RoceLiveFeed:
    def source(interface: str) -> FrameSource:
        assert interface == "rxe-if"
        return frames

    return RoceLiveFeed(
        "node-l", "rxe-if", interval_ns=1000 * MS, max_flows=64, clock=clock, open_source=source
    )


def test_records_come_when_the_interval_is_due_with_frames_in_time_order() -> None:
    clock, frames = Clock(round(T * US)), Frames()
    feed = feed_on(frames, clock)
    feed.attach()
    assert feed.notes == [
        "RoCE flows: capturing UDP port 4791 on rxe-if (first 128 bytes of each datagram), "
        "a record per active queue pair every 1 s, at most 64 flows"
    ]
    # A request and its ACK 30 us later, the ACK read first (two CPUs' queues).
    frames.queued = [
        frame(T + 130, B, A, ACKNOWLEDGE, 0x11, 500, syndrome=ACK),
        frame(T + 100, A, B, SEND_ONLY, 0x22, 500, ack_req=True, payload=bytes(64)),
    ]
    clock.ns += 400 * MS
    assert feed.poll(0) == [] and frames.waits == []  # not due, and told not to wait
    assert feed.poll(100) == [] and frames.waits == [0.1]  # the loop's timeout, not more
    clock.ns += 700 * MS
    records = feed.poll(0)
    assert [(r.topic, r.key, r.record) for r in records] == [
        (names.RAW_RDMA.name, b"node-l", names.RAW_RDMA.record)
    ] * 2
    sends = next(r.datum for r in records if r.datum["flow"]["dest_qp"] == 0x22)
    c = sends["counters"]
    assert (c["latency_count"], c["latency_sum_ns"], c["unanswered"]) == (1, 30 * US, 0)
    assert (sends["ts_ns"], sends["interval_ns"]) == (clock.ns, 1100 * MS)
    assert feed.counters()["reordered"] == 1 and feed.counters()["frames"] == 2
    assert feed.poll(0) == []  # the next interval starts now


def test_a_poll_takes_a_bounded_number_of_frames_and_counts_kernel_drops() -> None:
    clock, frames = Clock(round(T * US)), Frames()
    feed = feed_on(frames, clock)
    feed.attach()
    n = roce_live.MAX_FRAMES_PER_POLL + 5
    frames.queued = [frame(T + i, A, B, SEND_ONLY, 0x22, i, payload=bytes(8)) for i in range(n)]
    frames.kernel_drops = 3
    feed.poll(0)
    assert len(frames.queued) == 5 and frames.limits == [roce_live.MAX_FRAMES_PER_POLL]
    clock.ns += 2000 * MS
    [record] = feed.poll(0)
    assert record.datum["counters"]["packets"] == n
    counters = feed.counters()
    assert (counters["frames"], counters["kernel_drops"], counters["records"]) == (n, 3, 1)


@pytest.mark.parametrize(
    "error",
    [
        ConfigError("there is no network interface named 'rxe-if'; `ip link` lists them"),
        FeatureUnavailable("capturing packets needs root (CAP_NET_RAW)"),
    ],
)
def test_a_capture_that_cannot_start_is_one_line_and_the_feed_idles(error: Exception) -> None:
    waited: list[float] = []

    def refuse(interface: str) -> FrameSource:
        raise error

    feed = RoceLiveFeed("node-l", "rxe-if", open_source=refuse, wait=waited.append)
    feed.attach()
    assert feed.notes == [f"RoCE flows: not capturing on 'rxe-if': {error}"]
    assert feed.poll(0) == [] and feed.poll(250) == [] and waited == [0.25]
    feed.close()


def test_close_closes_the_socket_once() -> None:
    clock, frames = Clock(0), Frames()
    feed = feed_on(frames, clock)
    feed.attach()
    feed.close()
    feed.close()
    assert frames.closed


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        RoceLiveFeed("node-l", "lo", interval_ns=0)
