"""The GPU metrics feed: each device sampled every interval into ``raw.gpumetrics``, and a
device sampled at once when an XID error comes.

Vendor-neutral: a :class:`~zerotrace_collector.gpu_devices.GpuDeviceSource` (NVML for NVIDIA)
reads, :func:`~zerotrace_collector.gpu_metrics_record.device_metrics_record` builds the datum,
:class:`IntervalSchedule` (pure) says when a sample is due. XID errors are read by an events
thread that blocks in the source's wait; the collector loop's next poll takes them and samples
their device then, so an XID is in ``raw.gpumetrics`` within one turn of the loop (100 ms
or less), with the device's state at that moment (see ``xid_events`` in the schema).

An adapter that reads by running a tool (amd-smi, npu-smi: ``reads_block``) may take seconds,
or the tool's whole time limit when it hangs; its ticks are read by a sampling thread, never
on the collector loop. The loop hands the thread a tick when the interval is due and takes the
samples on a later poll; a tick that comes while the last is still being read is skipped and
counted (``busy_skips``), and said once.

Records are the node's, not a process's: keyed by node id (one partition keeps a node's
samples in order) and never filtered by the followed processes (``follows`` is True).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zerotrace import names
from zerotrace.clock import Clock
from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.cgroup import ContainerIds
from zerotrace_collector.feeds import RawRecord
from zerotrace_collector.gpu_devices import (
    DeviceEvent,
    DeviceInfo,
    DeviceSample,
    GpuDeviceSource,
    with_xid,
)
from zerotrace_collector.gpu_metrics_record import (
    TRIGGER_INTERVAL,
    TRIGGER_XID,
    ProcessNames,
    device_metrics_record,
)
from zerotrace_collector.service_cache import ServiceCache

__all__ = ["DEFAULT_INTERVAL_S", "GpuMetricsFeed", "IntervalSchedule", "ProcessNamer"]

DEFAULT_INTERVAL_S = 1.0
# The events thread returns from the source's wait at least this often to see whether it must
# stop: close() waits this long at most. An event ends the wait at once, whatever this is.
EVENT_WAIT_MS = 200
# close() waits this long for the sampling thread to finish the tick it reads.
STOP_WAIT_S = 1.0


@dataclass
class IntervalSchedule:
    """When the next sample is due, on a monotonic clock (pure). The first is due at once;
    after a stall (a slow loop, a suspended machine) one sample comes, not a burst."""

    interval_s: float
    due: float = 0.0

    def take(self, now: float) -> bool:
        """True when a sample is due at *now* (and the next is scheduled)."""
        if now < self.due:
            return False
        self.due += self.interval_s
        if self.due <= now:
            self.due = now + self.interval_s
        return True

    def wait_s(self, now: float) -> float:
        return max(0.0, self.due - now)


class ProcessNamer:
    """Names a GPU process as every other record of the node names it: comm from /proc,
    service from the node's :class:`ServiceCache`, container from its cgroup."""

    def __init__(self, services: ServiceCache | None = None) -> None:
        self._services = services
        self._containers = ContainerIds()

    def __call__(self, pid: int) -> ProcessNames:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ProcessNames()  # gone (or in a pid namespace this one cannot see)
        service = self._services.of(pid, comm) if self._services is not None else None
        return ProcessNames(comm, service, self._containers.of(pid))


class _EventsThread:
    """Blocks in the source's wait and queues what comes; stopped by :meth:`stop`."""

    def __init__(self, wait: Callable[[int], list[DeviceEvent]]) -> None:
        self._wait = wait
        self.events: queue.SimpleQueue[DeviceEvent] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zerotrace-gpu-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for event in self._wait(EVENT_WAIT_MS):
                self.events.put(event)

    def take(self, timeout_s: float) -> list[DeviceEvent]:
        """What is queued; when nothing is, waits up to *timeout_s* for the first event."""
        out: list[DeviceEvent] = []
        try:
            out.append(
                self.events.get(timeout=timeout_s) if timeout_s > 0 else self.events.get_nowait()
            )
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5 * EVENT_WAIT_MS / 1000)


class _SampleThread:
    """Reads every device of a tick off the collector loop (an adapter that runs a tool);
    stopped by :meth:`stop`. One tick at a time: :meth:`submit` refuses one while busy."""

    def __init__(
        self,
        sample: Callable[[DeviceInfo, int], DeviceSample],
        monotonic: Callable[[], float],
    ) -> None:
        self._sample = sample
        self._monotonic = monotonic
        self._ticks: queue.SimpleQueue[tuple[list[DeviceInfo], int] | None] = queue.SimpleQueue()
        # (samples, what reading them cost in us, the error that ended the tick or None)
        self.done: queue.SimpleQueue[tuple[list[DeviceSample], int, str | None]] = (
            queue.SimpleQueue()
        )
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zerotrace-gpu-sample", daemon=True)
        self._thread.start()

    def submit(self, devices: list[DeviceInfo], ts_ns: int) -> bool:
        """Read *devices* at *ts_ns*; False (nothing done) while the last tick is being read."""
        if self._busy.is_set():
            return False
        self._busy.set()
        self._ticks.put((devices, ts_ns))
        return True

    def _run(self) -> None:
        while (tick := self._ticks.get()) is not None:
            devices, ts_ns = tick
            started = self._monotonic()
            samples: list[DeviceSample] = []
            error = None
            try:
                samples = [self._sample(d, ts_ns) for d in devices]
            except Exception as exc:  # an adapter's bug must not end the thread for good
                error = f"{type(exc).__name__}: {exc}"
            # Free before the result is out: a poll that takes it and submits the next tick
            # at once must not find this one still busy (a skip that never was).
            self._busy.clear()
            self.done.put((samples, int((self._monotonic() - started) * 1e6), error))

    def take(self, timeout_s: float) -> list[tuple[list[DeviceSample], int, str | None]]:
        """The ticks read since the last take; when none is, waits up to *timeout_s*."""
        out = []
        try:
            out.append(
                self.done.get(timeout=timeout_s) if timeout_s > 0 else self.done.get_nowait()
            )
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self.done.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> bool:
        """Ends the thread after the tick it reads; waits for that only briefly (a hung tool
        is ended by its own time limit, the daemon thread with the process). False when the
        thread is still inside a read."""
        self._ticks.put(None)
        self._thread.join(timeout=STOP_WAIT_S)
        return not self._thread.is_alive()


class GpuMetricsFeed:
    name = "gpu-metrics"
    follows = True  # node records: the collector's per-process filter does not apply

    def __init__(
        self,
        source: GpuDeviceSource,
        node_id: str,
        clock: Clock,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        monotonic: Callable[[], float] = time.monotonic,
        process_names: Callable[[int], ProcessNames] | None = None,
        note: Callable[[str], None] | None = None,
    ) -> None:
        """clock: epoch time of samples; monotonic: the interval's clock (and what a sample
        cost); process_names: names a GPU process's pid (default: :class:`ProcessNamer`
        without services); note: where a one-line note goes (default :attr:`notes`)."""
        if interval_s <= 0:
            raise ValueError("the GPU metrics interval must be positive")
        self.source = source
        self._node_id = node_id
        self._clock = clock
        self._monotonic = monotonic
        self._schedule = IntervalSchedule(interval_s)
        self._names = process_names or ProcessNamer()
        self.notes: list[str] = []
        self._note = note or self.notes.append
        self._devices: dict[int, DeviceInfo] = {}
        self._events: _EventsThread | None = None
        self._reader: _SampleThread | None = None
        self._idle = threading.Event()  # never set: how an idle first feed waits its turn
        self._last_xid: dict[int, int] = {}
        self._pending: defaultdict[int, list[DeviceEvent]] = defaultdict(list)
        self._driver: str | None = None
        self.counts = {"samples": 0, "xid_events": 0, "unknown_device_events": 0, "sample_us": 0}

    def attach(self) -> None:
        """Open the vendor library; without it the feed says so in one line and stays idle
        (the node's other feeds run on)."""
        try:
            devices = self.source.open()
        except FeatureUnavailable as exc:
            self._note(str(exc))
            return
        self._devices = {d.index: d for d in devices}
        self._driver = self.source.driver_version()
        if any(self.source.events_supported(d) for d in devices):
            self._events = _EventsThread(self.source.wait_events)
        if getattr(self.source, "reads_block", False):
            self.counts.update(busy_skips=0, sample_errors=0)
            self._reader = _SampleThread(self.source.sample, self._monotonic)

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        """Records of the XID errors that came and, when the interval is due, of every
        device. Waits up to *timeout_ms* only for what comes first of the two."""
        if not self._devices:
            if timeout_ms > 0:
                self._idle.wait(timeout_ms / 1000)
            return []
        if self._reader is not None:
            return self._poll_reader(self._reader, timeout_ms)
        wait_s = min(timeout_ms / 1000, self._schedule.wait_s(self._monotonic()))
        out: list[RawRecord] = []
        if self._events is not None:
            for event in self._events.take(wait_s):
                self.counts["xid_events"] += 1
                if event.device_index not in self._devices:
                    self.counts["unknown_device_events"] += 1
                    continue
                self._last_xid[event.device_index] = event.xid
                self._pending[event.device_index].append(event)
            for index in list(self._pending):
                out.append(self._record(self._devices[index], TRIGGER_XID))
        elif wait_s > 0:
            self._idle.wait(wait_s)
        if self._schedule.take(self._monotonic()):
            out.extend(self._record(d, TRIGGER_INTERVAL) for d in self._devices.values())
        return out

    def _poll_reader(self, reader: _SampleThread, timeout_ms: int) -> list[RawRecord]:
        """Hands a due tick to the sampling thread and takes what it has read; waits up to
        *timeout_ms* only for the first of: a tick read, the next tick due."""
        due = self._schedule.take(self._monotonic())
        if due and not reader.submit(list(self._devices.values()), self._clock.now_ns()):
            self.counts["busy_skips"] += 1
            if self.counts["busy_skips"] == 1:
                self._note(
                    f"GPU metrics: the {self.source.vendor} tool is still reading the last "
                    f"tick after the {self._schedule.interval_s:g} s interval: ticks skipped "
                    "until it answers (counted in busy_skips)"
                )
        out: list[RawRecord] = []
        wait_s = min(timeout_ms / 1000, self._schedule.wait_s(self._monotonic()))
        for samples, cost_us, error in reader.take(wait_s):
            self.counts["sample_us"] += cost_us
            if error is not None:
                self.counts["sample_errors"] += 1
                if self.counts["sample_errors"] == 1:
                    self._note(f"GPU metrics: a tick was not read ({error})")
            for sample in samples:
                self.counts["samples"] += 1
                out.append(self._as_record(sample, TRIGGER_INTERVAL))
        return out

    def _record(self, device: DeviceInfo, trigger: str) -> RawRecord:
        started = self._monotonic()
        sample = self.source.sample(device, self._clock.now_ns())
        self.counts["sample_us"] += int((self._monotonic() - started) * 1e6)
        self.counts["samples"] += 1
        return self._as_record(sample, trigger)

    def _as_record(self, sample: DeviceSample, trigger: str) -> RawRecord:
        device = sample.device
        if self.source.events_supported(device):
            sample = with_xid(sample, self._last_xid.get(device.index, 0))
        datum = device_metrics_record(
            sample,
            self._node_id,
            self.source.vendor,
            driver_version=self._driver,
            trigger=trigger,
            xid_events=self._pending.pop(device.index, []),
            process_names={p.pid: self._names(p.pid) for p in sample.processes},
        )
        topic = names.RAW_GPUMETRICS
        return RawRecord(topic.name, self._node_id.encode(), topic.record, datum)

    def counters(self) -> dict[str, int]:
        return {**self.counts, **self.source.counters()}

    def close(self) -> None:
        reading = False
        if self._reader is not None:
            reading = not self._reader.stop()
            self._reader = None
        if self._events is not None:
            self._events.stop()  # first: the source's wait must be over before it closes
            self._events = None
        if reading:
            # Closing under a read in flight (amdsmi_shut_down while the thread is inside
            # libamd_smi) could crash the process; a tool's run ends by its own time limit.
            self._note(
                f"GPU metrics: the {self.source.vendor} reader was still inside a read at "
                f"close after {STOP_WAIT_S:g} s: the source is left open for the process's exit"
            )
            return
        self.source.close()
