"""The GPU metrics feed (zerotrace_collector/gpu_metrics_feed.py) over the in-memory device
twin: every device each interval, an XID's device at once, the last XID in later samples, an
unknown device's event counted, no library said in one line; and through the collector loop
and the real codec into raw.gpumetrics."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest

from zerotrace import names
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace_collector.collector import Collector
from zerotrace_collector.feeds import Feed
from zerotrace_collector.gpu_devices import DeviceEvent, DeviceInfo, DeviceSample, ProcessGpuUse
from zerotrace_collector.gpu_devices_memory import InMemoryGpuDevices, ScriptedDevice
from zerotrace_collector.gpu_metrics_feed import GpuMetricsFeed, IntervalSchedule, _SampleThread
from zerotrace_collector.gpu_metrics_record import ProcessNames

pytestmark = pytest.mark.unit

# A poll that waited for this long would trip the suite's timeout rather than pass slowly.
LONG_MS = 600_000
# How long a test waits for a thread's step (a sync, not a timing: a pass never waits it out).
WAIT_S = 20.0
H100 = DeviceInfo(0, "GPU-0", "NVIDIA H100 80GB HBM3")
A10 = DeviceInfo(1, "GPU-1", "NVIDIA A10")


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_schedule_is_due_at_once_then_each_interval_and_never_in_a_burst() -> None:
    s = IntervalSchedule(1.0)
    assert s.take(100.0) and s.due == 101.0
    assert not s.take(100.5) and s.wait_s(100.5) == 0.5
    assert s.take(101.0) and s.due == 102.0
    assert s.take(105.3) and s.due == pytest.approx(106.3)  # after a stall: one, then on
    assert not s.take(105.4)


def twin(*, unavailable: str | None = None) -> InMemoryGpuDevices:
    return InMemoryGpuDevices(
        [
            ScriptedDevice(
                H100,
                {"gpu_util_pct": 37, "fb_used_bytes": 5, "fb_total_bytes": 8},
                processes=[ProcessGpuUse(4242, 1 << 30, 55.0)],
            ),
            ScriptedDevice(A10, {"gpu_util_pct": 3}, failed=["power_w"], events=False),
        ],
        unavailable=unavailable,
    )


@pytest.fixture
def mono() -> Monotonic:
    return Monotonic()


@pytest.fixture
def feed(mono: Monotonic) -> Iterator[GpuMetricsFeed]:
    feed = GpuMetricsFeed(
        twin(),
        "node-a",
        ManualClock(1_000),
        interval_s=1.0,
        monotonic=mono,
        process_names=lambda pid: ProcessNames(f"p{pid}", "trainer", None),
    )
    feed.attach()
    yield feed
    feed.close()


def test_the_feed_keeps_the_feed_protocol(feed: GpuMetricsFeed) -> None:
    as_feed: Feed = feed
    assert as_feed.name == "gpu-metrics" and as_feed.follows  # node records: never filtered


def test_every_device_is_sampled_at_once_then_each_interval(
    feed: GpuMetricsFeed, mono: Monotonic
) -> None:
    first = feed.poll(0)
    assert [(r.topic, r.key, r.record) for r in first] == [
        (names.RAW_GPUMETRICS.name, b"node-a", names.RAW_GPUMETRICS.record)
    ] * 2
    h100, a10 = (r.datum for r in first)
    assert (h100["device_uuid"], h100["gpu_util_pct"], h100["trigger"]) == (
        "GPU-0",
        37.0,
        "interval",
    )
    assert h100["xid_errors"] == 0 and "xid_errors" not in h100["unsupported"]  # seen, none yet
    assert a10["xid_errors"] is None and "xid_errors" in a10["unsupported"]  # not seen at all
    assert a10["failed"] == ["power_w"] and a10["power_w"] is None
    assert h100["processes"][0]["process_name"] == "p4242"
    assert h100["processes"][0]["service"] == "trainer"
    assert h100["driver_version"] == "twin-1.0" and h100["vendor"] == "memory"
    mono.now += 0.5
    assert feed.poll(0) == []
    mono.now += 0.5
    assert len(feed.poll(0)) == 2
    assert feed.counters()["samples"] == 4


def test_an_xid_samples_its_device_at_once_and_later_samples_keep_it(
    feed: GpuMetricsFeed, mono: Monotonic
) -> None:
    source = feed.source
    assert isinstance(source, InMemoryGpuDevices)
    feed.poll(0)
    mono.now += 0.25  # the interval is not due: only the XID's device
    source.push(DeviceEvent(0, 79, 1_234))
    [record] = feed.poll(LONG_MS)  # returns when the event is in, not at the timeout
    d = record.datum
    assert (d["device_index"], d["trigger"], d["xid_errors"]) == (0, "xid", 79)
    assert d["xid_events"] == [{"xid": 79, "ts_ns": 1_234}]
    assert d["event_id"] == "node-a/GPU-0/1000/xid"
    mono.now += 0.75
    later = {r.datum["device_index"]: r.datum for r in feed.poll(0)}
    assert later[0]["xid_errors"] == 79 and later[0]["xid_events"] == []
    assert later[1]["xid_errors"] is None
    assert feed.counters()["xid_events"] == 1


def test_an_event_of_a_device_not_listed_is_counted_not_sampled(feed: GpuMetricsFeed) -> None:
    source = feed.source
    assert isinstance(source, InMemoryGpuDevices)
    feed.poll(0)
    source.push(DeviceEvent(7, 13, 1))
    assert feed.poll(LONG_MS) == []
    assert feed.counters()["unknown_device_events"] == 1


def test_without_the_library_the_feed_says_so_once_and_idles(mono: Monotonic) -> None:
    lines: list[str] = []
    source = twin(unavailable="no NVML (libnvidia-ml.so.1 not found): GPU device metrics off")
    feed = GpuMetricsFeed(source, "n", ManualClock(), monotonic=mono, note=lines.append)
    feed.attach()
    assert lines == ["no NVML (libnvidia-ml.so.1 not found): GPU device metrics off"]
    assert feed.poll(0) == [] and feed.poll(1) == []
    feed.close()
    assert source.closed and source.samples == 0


def test_close_stops_the_events_thread_then_closes_the_source(mono: Monotonic) -> None:
    source = twin()
    feed = GpuMetricsFeed(source, "n", ManualClock(), monotonic=mono)
    feed.attach()
    thread = feed._events._thread if feed._events else None
    assert thread is not None and thread.is_alive()
    feed.close()
    assert not thread.is_alive() and source.closed


class BlockingReads(InMemoryGpuDevices):
    """A source read off the loop whose read stays inside until the test lets it out (a
    library call that does not return)."""

    reads_block = True

    def __init__(self) -> None:
        super().__init__([ScriptedDevice(A10, {"gpu_util_pct": 3}, events=False)])
        self.inside = threading.Event()
        self.let_out = threading.Event()

    def sample(self, device: DeviceInfo, ts_ns: int) -> DeviceSample:
        self.inside.set()
        self.let_out.wait(WAIT_S)
        return super().sample(device, ts_ns)


def reading_feed(
    source: BlockingReads, lines: list[str]
) -> tuple[GpuMetricsFeed, threading.Thread]:
    """The feed attached, its first tick inside the source's read; and the sampling thread."""
    feed = GpuMetricsFeed(source, "n", ManualClock(), monotonic=Monotonic(), note=lines.append)
    feed.attach()
    assert feed._reader is not None
    thread = feed._reader._thread
    assert feed.poll(0) == []  # the tick is handed to the thread
    assert source.inside.wait(WAIT_S)
    return feed, thread


def test_close_leaves_a_source_open_while_its_read_is_still_inside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("zerotrace_collector.gpu_metrics_feed.STOP_WAIT_S", 0.01)
    source, lines = BlockingReads(), list[str]()
    feed, thread = reading_feed(source, lines)
    feed.close()
    assert not source.closed  # no shut-down under the read
    assert lines == [
        "GPU metrics: the memory reader was still inside a read at close after 0.01 s: "
        "the source is left open for the process's exit"
    ]
    source.let_out.set()
    thread.join(WAIT_S)
    assert not thread.is_alive() and not source.closed


def test_close_closes_the_source_once_the_read_has_ended() -> None:
    source, lines = BlockingReads(), list[str]()
    feed, thread = reading_feed(source, lines)
    source.let_out.set()
    feed.close()
    assert not thread.is_alive() and source.closed and lines == []


def test_the_thread_is_free_before_its_result_is_out() -> None:
    """A poll that takes a result and submits the next tick at once is never refused: the
    submit is made inside the result's put, the moment it can first be taken."""
    reader = _SampleThread(
        lambda d, ts: InMemoryGpuDevices([ScriptedDevice(d, {})]).sample(d, ts), Monotonic()
    )
    accepted: list[bool] = []

    class SubmitOnFirstPut(queue.SimpleQueue[tuple[list[DeviceSample], int, str | None]]):
        def put(
            self,
            item: tuple[list[DeviceSample], int, str | None],
            block: bool = True,
            timeout: float | None = None,
        ) -> None:
            if not accepted:
                accepted.append(reader.submit([A10], 2))
            super().put(item, block, timeout)

    reader.done = SubmitOnFirstPut()
    assert reader.submit([A10], 1)
    first, second = reader.done.get(timeout=WAIT_S), reader.done.get(timeout=WAIT_S)
    assert accepted == [True]
    assert [s.ts_ns for s in first[0]] == [1] and [s.ts_ns for s in second[0]] == [2]
    assert reader.stop()


def test_a_bad_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        GpuMetricsFeed(twin(), "n", ManualClock(), interval_s=0)


def test_records_reach_raw_gpumetrics_through_the_codec(
    feed: GpuMetricsFeed, codec: AvroCodec
) -> None:
    broker = InMemoryBroker()
    broker.ensure_topics()
    collector = Collector([feed], broker.producer(), codec)
    assert collector.pump(0) == 2
    consumer = broker.consumer("test")
    consumer.subscribe([names.RAW_GPUMETRICS.name])
    got = []
    while (message := consumer.poll(0)) is not None:
        got.append((message.key, codec.decode(message.value)))
    assert [key for key, _ in got] == [b"node-a", b"node-a"]
    assert [d["device_uuid"] for _, (_r, d) in got] == ["GPU-0", "GPU-1"]
    assert got[0][1][1]["processes"][0]["used_memory_bytes"] == 1 << 30
    assert collector.counters()["gpu-metrics.samples"] == 2
