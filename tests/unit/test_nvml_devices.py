"""The NVML adapter (zerotrace_collector/nvml_devices.py) over a twin of the pynvml module: what
each call gives, how an error is told by its value (a gap, or a gap counted and said once),
the older calls of older drivers, the XID events. Its GPM part (nvml_gpm.py) is
tests/unit/test_nvml_gpm.py, over the same twin. pynvml's own error classes are used (importing
pynvml loads no library). The adapter over a real library, the stand-in built from C, is
tests/integration/test_nvml_standin.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest

from zerotrace.clock import ManualClock
from zerotrace.errors import FeatureUnavailable
from zerotrace_collector import nvml_devices
from zerotrace_collector.gpu_devices import DeviceEvent, DeviceInfo, ProcessGpuUse
from zerotrace_collector.nvml_devices import NO_NVML, NvmlDevices

pytestmark = pytest.mark.unit

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION
FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST


class Err:
    def __init__(self, code: int) -> None:
        self.code = code


FULL = {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-0",
    "utilization": SimpleNamespace(gpu=37, memory=12),
    "encoder": [5, 167000],
    "decoder": [2, 167000],
    "memory_v2": SimpleNamespace(total=80, reserved=5, free=50, used=25),
    "memory": SimpleNamespace(total=80, free=50, used=25),
    "temperature_v": 41,
    "temperature": 41,
    "power": 123456,
    "energy": 987654321,
    "clock_1": 1980,
    "clock_2": 2619,
    "event_reasons": 0x44,
    "remapped": (1, 2, 0, 1),
    "fields": {
        82: (1, 45),
        3: (3, 7),
        4: (3, 0),
        5: (3, 9),
        6: (3, 1),
        94: (3, 3),
        138: (3, 1000),
        139: (3, 2000),
        197: (3, 111),
        198: (3, 222),
    },
    "processes": [(4242, 1 << 30), (4343, None)],
    "process_util": [(4242, 10, 55, 20, 0, 0)],
    "event_types": 0x8,
    "mig": [0, 0],
    "gpm_support": SimpleNamespace(isSupportedDevice=1),
    # GPM percentages by NVML_GPM_METRIC_* id (exact in binary: their ratios are exact too)
    "gpm": {1: 62.5, 2: 50.0, 3: 25.0, 5: 37.5, 10: 12.5, 11: 0.0, 12: 75.0, 13: 6.25},
}
GPM_RATIOS = {
    "gr_engine_active_ratio": 0.625,
    "sm_active_ratio": 0.5,
    "sm_occupancy_ratio": 0.25,
    "pipe_tensor_active_ratio": 0.375,
    "dram_active_ratio": 0.125,
    "pipe_fp64_active_ratio": 0.0,
    "pipe_fp32_active_ratio": 0.75,
    "pipe_fp16_active_ratio": 0.0625,
}
EXPECTED = {
    "gpu_util_pct": 37,
    "mem_copy_util_pct": 12,
    "enc_util_pct": 5,
    "dec_util_pct": 2,
    "fb_total_bytes": 80,
    "fb_reserved_bytes": 5,
    "fb_free_bytes": 50,
    "fb_used_bytes": 25,
    "temperature_c": 41,
    "power_w": 123.456,
    "total_energy_consumption_mj": 987654321,
    "sm_clock_mhz": 1980,
    "mem_clock_mhz": 2619,
    "clocks_event_reasons": 0x44,
    "correctable_remapped_rows": 1,
    "uncorrectable_remapped_rows": 2,
    "row_remap_pending": False,
    "row_remap_failure": True,
    "memory_temp_c": 45,
    "ecc_sbe_vol_total": 7,
    "ecc_dbe_vol_total": 0,
    "ecc_sbe_agg_total": 9,
    "ecc_dbe_agg_total": 1,
    "pcie_replay_counter": 3,
    "nvlink_tx_kib": 1000,
    "nvlink_rx_kib": 2000,
    "nvlink_bandwidth_total_kib": 3000,
    "pcie_tx_bytes": 111,
    "pcie_rx_bytes": 222,
    "xid_errors": None,  # events, not a read: the feed fills it
    "mig_mode": False,
    **{name: None for name in GPM_RATIOS},  # the first sample: no interval yet
}


class FakeGpmSample:
    """An nvmlGpmSample_t: which device filled it, at which GPM read of the fake."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.device: int | None = None
        self.taken = 0


class FakeMetricsGet:
    """nvmlGpmMetricsGet_t's members, as pynvml's ctypes structure has them."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(32)]


class FakeNvml:
    """pynvml's functions as the adapter calls them, over scripted devices."""

    NVMLError = pynvml.NVMLError
    c_nvmlGpmMetricsGet_t = FakeMetricsGet

    def __init__(self, *devices: dict[str, Any], init_error: int = 0) -> None:
        self.devices = list(devices)
        self.init_error = init_error
        self.calls: list[str] = []
        self.events: list[Any] = []  # what nvmlEventSetWait_v2 returns, in turn
        self.registered: list[int] = []
        self.freed = self.shut = False
        self.gpm_samples: list[FakeGpmSample] = []  # allocated
        self.gpm_freed: list[int] = []  # their numbers, freed
        self.gpm_reads = 0

    def _get(self, name: str, h: Any, key: str) -> Any:
        self.calls.append(name)
        value = self.devices[h.index].get(key, Err(NOT_SUPPORTED))
        if isinstance(value, Err):
            raise pynvml.NVMLError(value.code)
        return value

    def nvmlInit(self) -> None:
        if self.init_error:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return self.devices[i].setdefault("handle", SimpleNamespace(index=i))

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return str(self._get("uuid", h, "uuid"))

    def nvmlDeviceGetName(self, h: Any) -> str:
        return str(self._get("name", h, "name"))

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        return self._get("util", h, "utilization")

    def nvmlDeviceGetEncoderUtilization(self, h: Any) -> Any:
        return self._get("enc", h, "encoder")

    def nvmlDeviceGetDecoderUtilization(self, h: Any) -> Any:
        return self._get("dec", h, "decoder")

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> Any:
        if version is not None:
            assert version == pynvml.nvmlMemory_v2
            return self._get("memory_v2", h, "memory_v2")
        return self._get("memory", h, "memory")

    def nvmlDeviceGetTemperatureV(self, h: Any, sensor: int) -> Any:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._get("temperature_v", h, "temperature_v")

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> Any:
        return self._get("temperature", h, "temperature")

    def nvmlDeviceGetPowerUsage(self, h: Any) -> Any:
        return self._get("power", h, "power")

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> Any:
        return self._get("energy", h, "energy")

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> Any:
        return self._get(f"clock_{kind}", h, f"clock_{kind}")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> Any:
        return self._get("event_reasons", h, "event_reasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Any) -> Any:
        return self._get("throttle_reasons", h, "throttle_reasons")

    def nvmlDeviceGetRemappedRows(self, h: Any) -> Any:
        return self._get("remapped", h, "remapped")

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[tuple[int, int]]) -> Any:
        fields = self._get("fields", h, "fields")
        out = []
        for field_id, _scope in ids:
            scripted = fields.get(field_id, Err(NOT_SUPPORTED))
            if isinstance(scripted, Err):
                out.append(SimpleNamespace(nvmlReturn=scripted.code, valueType=0, value=None))
                continue
            kind, value = scripted
            member = "uiVal" if kind == 1 else "ullVal"
            out.append(
                SimpleNamespace(
                    nvmlReturn=0, valueType=kind, value=SimpleNamespace(**{member: value})
                )
            )
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any) -> Any:
        procs = self._get("processes", h, "processes")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in procs]

    def nvmlDeviceGetProcessUtilization(self, h: Any, since: int) -> Any:
        samples = self._get("process_util", h, "process_util")
        fresh = [s for s in samples if s[1] > since]
        if not fresh:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        keys = ("pid", "timeStamp", "smUtil", "memUtil", "encUtil", "decUtil")
        return [SimpleNamespace(**dict(zip(keys, s, strict=True))) for s in fresh]

    def nvmlEventSetCreate(self) -> Any:
        return "event-set"

    def nvmlDeviceGetSupportedEventTypes(self, h: Any) -> Any:
        return self._get("event_types", h, "event_types")

    def nvmlDeviceRegisterEvents(self, h: Any, types: int, event_set: Any) -> None:
        assert types == pynvml.nvmlEventTypeXidCriticalError and event_set == "event-set"
        self.registered.append(h.index)

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        event = self.events.pop(0)
        if isinstance(event, Err):
            raise pynvml.NVMLError(event.code)
        return event

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self.freed = True

    def nvmlDeviceGetMigMode(self, h: Any) -> Any:
        return self._get("mig", h, "mig")

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        return self._get("gpm_query", h, "gpm_support")

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        self.calls.append("gpm_alloc")
        sample = FakeGpmSample(len(self.gpm_samples))
        self.gpm_samples.append(sample)
        return sample

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        assert not self.shut, "GPM samples are freed before NVML shuts down"
        self.calls.append("gpm_free")
        self.gpm_freed.append(sample.number)

    def nvmlGpmSampleGet(self, h: Any, sample: FakeGpmSample) -> FakeGpmSample:
        error = self.devices[h.index].get("gpm_sample_error")
        self.calls.append("gpm_sample")
        if error is not None:
            raise pynvml.NVMLError(error)
        self.gpm_reads += 1
        sample.device, sample.taken = h.index, self.gpm_reads
        return sample

    def nvmlGpmMetricsGet(self, get: FakeMetricsGet) -> FakeMetricsGet:
        """As NVML: the metrics between two samples of one device, the earlier first."""
        self.calls.append("gpm_metrics")
        one, two = get.sample1, get.sample2
        assert get.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        assert one is not two and one.device == two.device is not None
        assert 0 < one.taken < two.taken
        scripted = self.devices[two.device]["gpm"]
        if isinstance(scripted, Err):
            raise pynvml.NVMLError(scripted.code)
        for metric in get.metrics[: get.numMetrics]:
            value = scripted.get(metric.metricId, Err(NOT_SUPPORTED))
            if isinstance(value, Err):
                metric.nvmlReturn, metric.value = value.code, 0.0
            else:
                metric.nvmlReturn, metric.value = 0, value
        return get


def opened(fake: FakeNvml) -> tuple[NvmlDevices, list[DeviceInfo]]:
    nvml = NvmlDevices(ManualClock(5_000), nvml=fake)
    return nvml, nvml.open()


def test_every_metric_of_a_device_comes_out_exact() -> None:
    fake = FakeNvml(dict(FULL))
    nvml, [device] = opened(fake)
    fake.calls.clear()
    sample = nvml.sample(device, 77)
    assert sample.ts_ns == 77 and sample.device.model == "NVIDIA H100 80GB HBM3"
    assert dict(sample.metrics) == EXPECTED
    assert sample.unsupported == ("xid_errors",) and sample.failed == ()
    assert sample.warming_up == tuple(GPM_RATIOS)  # GPM needs two samples
    assert sample.clocks_event_reason_names == ("SwPowerCap", "HwThermalSlowdown")
    assert sample.processes == (
        ProcessGpuUse(4242, 1 << 30, 55.0, 20.0, 0.0, 0.0),
        ProcessGpuUse(4343, None),
    )
    # What a sample costs: one call per read below, the field values in one.
    assert fake.calls == [
        "util", "enc", "dec", "memory_v2", "temperature_v", "power", "energy", "clock_1",
        "clock_2", "event_reasons", "remapped", "mig", "fields", "gpm_sample", "processes",
        "process_util",
    ]  # fmt: skip
    assert nvml.errors == 0 and nvml.notes == []
    fake.calls.clear()
    second = nvml.sample(device, 78)  # GPM between the two samples: DCGM's ratios
    assert dict(second.metrics) == {**EXPECTED, **GPM_RATIOS}
    assert (second.unsupported, second.failed, second.warming_up) == (("xid_errors",), (), ())
    assert fake.calls.count("gpm_sample") == fake.calls.count("gpm_metrics") == 1


def test_a_metric_the_device_does_not_give_is_a_gap_not_an_error() -> None:
    device = dict(FULL, power=Err(NOT_SUPPORTED))
    device["fields"] = {**FULL["fields"], 82: Err(NOT_SUPPORTED)}  # type: ignore[dict-item]
    del device["remapped"]  # not scripted: NOT_SUPPORTED as well
    nvml, devices = opened(FakeNvml(device))
    sample = nvml.sample(devices[0], 1)
    assert sample.metrics["power_w"] is None and sample.metrics["memory_temp_c"] is None
    assert set(sample.unsupported) == {
        "power_w",
        "memory_temp_c",
        "correctable_remapped_rows",
        "uncorrectable_remapped_rows",
        "row_remap_pending",
        "row_remap_failure",
        "xid_errors",
    }
    assert sample.metrics["ecc_sbe_vol_total"] == 7  # the other fields of the batch stay
    assert nvml.errors == 0 and nvml.notes == []


def test_another_error_is_a_gap_counted_every_time_and_said_once() -> None:
    device = dict(FULL, power=Err(NO_PERMISSION), utilization=Err(NO_PERMISSION))
    nvml, devices = opened(FakeNvml(device, dict(device, uuid="GPU-1")))
    for _ in range(2):
        for index in (0, 1):
            sample = nvml.sample(devices[index], 1)
            assert sample.failed == ("power_w", "gpu_util_pct", "mem_copy_util_pct")
            assert "power_w" not in sample.unsupported
    assert nvml.errors == 8  # two calls, two devices, two samples
    assert nvml.counters() == {"nvml_errors": 8, "nvml_event_errors": 0}
    assert nvml.notes == [
        "NVML error 4 (Insufficient Permissions) reading gpu_util_pct, mem_copy_util_pct of "
        "GPU 0: such reads are left empty and counted (nvml_errors)"
    ]


def test_a_field_value_error_fails_that_field_only() -> None:
    device = dict(FULL)
    device["fields"] = {**FULL["fields"], 3: Err(GPU_IS_LOST)}  # type: ignore[dict-item]
    nvml, devices = opened(FakeNvml(device))
    sample = nvml.sample(devices[0], 1)
    assert sample.failed == ("ecc_sbe_vol_total",)
    assert sample.metrics["ecc_dbe_vol_total"] == 0 and nvml.errors == 1
    assert len(nvml.notes) == 1 and "GPU is lost" in nvml.notes[0]


def test_an_older_driver_is_read_through_the_older_calls() -> None:
    device = dict(
        FULL,
        memory_v2=Err(FUNCTION_NOT_FOUND),
        temperature_v=Err(FUNCTION_NOT_FOUND),
        event_reasons=Err(FUNCTION_NOT_FOUND),
        throttle_reasons=0x1,
    )
    fake = FakeNvml(device)
    nvml, devices = opened(fake)
    sample = nvml.sample(devices[0], 1)
    assert (sample.metrics["fb_total_bytes"], sample.metrics["fb_used_bytes"]) == (80, 25)
    assert sample.metrics["fb_reserved_bytes"] is None and "fb_reserved_bytes" in sample.unsupported
    assert sample.metrics["temperature_c"] == 41
    assert sample.clocks_event_reason_names == ("GpuIdle",)
    assert nvml.errors == 0


def test_process_utilisation_is_read_from_the_last_sample_seen_on() -> None:
    fake = FakeNvml(dict(FULL))
    nvml, devices = opened(fake)
    first = nvml.sample(devices[0], 1)
    assert first.processes[0].sm_util_pct == 55.0
    second = nvml.sample(devices[0], 2)  # no sample since: unknown, not the old one
    assert second.processes[0] == ProcessGpuUse(4242, 1 << 30)
    assert nvml.errors == 0


@pytest.mark.parametrize(
    ("code", "line"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, NO_NVML),
        (
            pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
            "NVML did not start (Driver Not Loaded, NVML error 9): GPU device metrics off",
        ),
    ],
)
def test_no_library_or_driver_is_one_line(code: int, line: str) -> None:
    nvml = NvmlDevices(ManualClock(), nvml=FakeNvml(dict(FULL), init_error=code))
    with pytest.raises(FeatureUnavailable) as info:
        nvml.open()
    assert str(info.value) == line
    nvml.close()  # nothing opened: nothing to shut


def test_xid_events_of_registered_devices_name_their_device() -> None:
    no_events = dict(FULL, uuid="GPU-1")
    del no_events["event_types"]
    fake = FakeNvml(dict(FULL), no_events)
    nvml, devices = opened(fake)
    assert fake.registered == [0]
    assert [nvml.events_supported(devices[i]) for i in (0, 1)] == [True, False]
    handle = fake.devices[0]["handle"]
    fake.events = [
        SimpleNamespace(
            device=handle, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=79
        ),
        SimpleNamespace(device=handle, eventType=pynvml.nvmlEventTypePState, eventData=1),
    ]
    assert nvml.wait_events(100) == [DeviceEvent(0, 79, 5_000)]
    assert nvml.wait_events(100) == []  # not an XID
    assert nvml.wait_events(100) == []  # timeout
    assert nvml.event_errors == 0


def test_a_failed_wait_is_counted_and_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml_devices, "EVENT_ERROR_PAUSE_S", 0)
    fake = FakeNvml(dict(FULL))
    nvml, _devices = opened(fake)
    fake.events = [Err(GPU_IS_LOST), Err(GPU_IS_LOST)]
    assert nvml.wait_events(100) == [] and nvml.wait_events(100) == []
    assert nvml.event_errors == 2
    assert nvml.notes == ["waiting for GPU events failed (GPU is lost); retrying"]


def test_close_frees_the_event_set_then_shuts_nvml_down_once() -> None:
    fake = FakeNvml(dict(FULL))
    nvml, _devices = opened(fake)
    nvml.close()
    assert fake.freed and fake.shut
    fake.shut = False
    nvml.close()
    assert not fake.shut
