"""The in-memory twin of the GPU device port (:class:`~zerotrace_collector.gpu_devices.
GpuDeviceSource`): devices with scripted readings and events pushed by hand, for the feed's
tests and for a node without GPUs that should still show the GPU path working.

Its contract is the adapter's: ``open`` raises FeatureUnavailable with the line it was given
(a library that is not there); ``sample`` returns the scripted readings of the device, every
metric not scripted a gap; ``wait_events`` blocks up to its timeout for a :meth:`push` and
returns what was pushed. Thread-safe: a test pushes while the feed's events thread waits.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping, Sequence

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.gpu_devices import (
    DeviceEvent,
    DeviceInfo,
    DeviceSample,
    MetricValue,
    ProcessGpuUse,
    SampleBuilder,
)

__all__ = ["InMemoryGpuDevices", "ScriptedDevice"]


class ScriptedDevice:
    def __init__(
        self,
        info: DeviceInfo,
        metrics: Mapping[str, MetricValue] | None = None,
        *,
        failed: Sequence[str] = (),
        processes: Sequence[ProcessGpuUse] = (),
        events: bool = True,
    ) -> None:
        self.info = info
        self.metrics = dict(metrics or {})
        self.failed = tuple(failed)
        self.processes = tuple(processes)
        self.events = events  # XID events of this device are seen


class InMemoryGpuDevices:
    vendor = "memory"

    def __init__(
        self,
        devices: Sequence[ScriptedDevice] = (),
        *,
        driver: str | None = "twin-1.0",
        unavailable: str | None = None,
    ) -> None:
        self._devices = {d.info.index: d for d in devices}
        self._driver = driver
        self._unavailable = unavailable
        self._events: queue.SimpleQueue[DeviceEvent] = queue.SimpleQueue()
        self.opened = self.closed = False
        self.samples = 0

    def open(self) -> list[DeviceInfo]:
        if self._unavailable is not None:
            raise FeatureUnavailable(self._unavailable)
        self.opened = True
        return [d.info for d in self._devices.values()]

    def driver_version(self) -> str | None:
        return self._driver

    def sample(self, device: DeviceInfo, ts_ns: int) -> DeviceSample:
        scripted = self._devices[device.index]
        b = SampleBuilder(device, ts_ns)
        for name, value in scripted.metrics.items():
            b.put(name, value)
        b.fail(scripted.failed)
        b.processes = scripted.processes
        self.samples += 1
        return b.build()

    def push(self, event: DeviceEvent) -> None:
        """An event, as the device would raise it."""
        self._events.put(event)

    def wait_events(self, timeout_ms: int) -> list[DeviceEvent]:
        try:
            return [self._events.get(timeout=timeout_ms / 1000)]
        except queue.Empty:
            return []

    def events_supported(self, device: DeviceInfo) -> bool:
        return self._devices[device.index].events

    def counters(self) -> dict[str, int]:
        return {"twin_samples": self.samples}

    def close(self) -> None:
        self.closed = True
