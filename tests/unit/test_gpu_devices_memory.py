"""The in-memory GPU device twin (zerotrace_collector/gpu_devices_memory.py) keeps the adapter's
contract: open says why in one line, a metric not scripted is a gap, wait_events returns a
pushed event or nothing after its timeout. The feed over it is test_gpu_metrics_feed.py."""

from __future__ import annotations

import pytest

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.gpu_devices import DeviceEvent, DeviceInfo, GpuDeviceSource
from zerotrace_collector.gpu_devices_memory import InMemoryGpuDevices, ScriptedDevice

pytestmark = pytest.mark.unit

GPU = DeviceInfo(0, "GPU-0", "twin")


def test_the_twin_is_a_gpu_device_source() -> None:
    source: GpuDeviceSource = InMemoryGpuDevices([ScriptedDevice(GPU)])
    assert source.open() == [GPU] and source.driver_version() == "twin-1.0"


def test_open_says_why_the_library_is_not_there() -> None:
    with pytest.raises(FeatureUnavailable, match=r"^no library here$"):
        InMemoryGpuDevices(unavailable="no library here").open()


def test_a_sample_holds_what_was_scripted_and_gaps_for_the_rest() -> None:
    source = InMemoryGpuDevices([ScriptedDevice(GPU, {"power_w": 70.5}, failed=["sm_clock_mhz"])])
    source.open()
    sample = source.sample(GPU, 9)
    assert sample.metrics["power_w"] == 70.5 and sample.ts_ns == 9
    assert sample.failed == ("sm_clock_mhz",) and "temperature_c" in sample.unsupported
    assert source.counters() == {"twin_samples": 1}


def test_wait_events_returns_a_pushed_event_or_nothing_after_its_timeout() -> None:
    source = InMemoryGpuDevices([ScriptedDevice(GPU)])
    assert source.wait_events(1) == []
    source.push(DeviceEvent(0, 48, 5))
    assert source.wait_events(600_000) == [DeviceEvent(0, 48, 5)]
    assert source.events_supported(GPU)
    source.close()
    assert source.closed
