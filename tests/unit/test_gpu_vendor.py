"""--gpu-vendor's choice (zerotrace_collector/gpu_vendor.py): auto tries NVML, amd-smi, npu-smi
in that order and reads the first that opens; a named vendor is tried alone; the node is told in
one line which adapter is read and what it found, or why none (absent tools as short phrases,
other failures as they came, once); the chosen adapter is read through to its close."""

from __future__ import annotations

import pytest

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.gpu_devices import DeviceInfo, GpuDeviceSource
from zerotrace_collector.gpu_devices_memory import InMemoryGpuDevices, ScriptedDevice
from zerotrace_collector.gpu_vendor import (
    VENDOR_CHOICES,
    Candidate,
    VendorChoice,
    chosen_line,
    none_line,
    tried_in_order,
)

pytestmark = pytest.mark.unit

NO_NV = "no NVML (libnvidia-ml.so.1 not found): GPU device metrics off"
NO_AMD = "no amd-smi or rocm-smi on PATH (ROCm not installed): AMD GPU metrics off"
NO_NPU = "no npu-smi on PATH (Ascend driver not installed): Ascend NPU metrics off"
MI300X = DeviceInfo(0, "8fff74a1", "AMD Instinct MI300X")
MI300X_1 = DeviceInfo(1, "c4ff74a1", "AMD Instinct MI300X")
NPU = DeviceInfo(0, "0000:C1:00.0", "Ascend 910B3")


class Made:
    """The candidates' factories, recording which adapters were made (made = tried)."""

    def __init__(self, unavailable: dict[str, str | None], devices: dict[str, list[DeviceInfo]]):
        self.unavailable = unavailable
        self.devices = devices
        self.made: dict[str, InMemoryGpuDevices] = {}

    def candidates(self) -> list[Candidate]:
        absent = {"nvidia": NO_NV, "amd": NO_AMD, "ascend": NO_NPU}
        short = {
            "nvidia": "no NVML library (libnvidia-ml.so.1)",
            "amd": "no amd-smi or rocm-smi on PATH",
            "ascend": "no npu-smi on PATH",
        }
        label = {
            "nvidia": "NVIDIA GPUs through NVML",
            "amd": "AMD GPUs through",
            "ascend": "Huawei Ascend NPUs through",
        }
        return [
            Candidate(v, label[v], absent[v], short[v], self._maker(v))
            for v in ("nvidia", "amd", "ascend")
        ]

    def _maker(self, vendor: str):  # type: ignore[no-untyped-def]
        def make() -> GpuDeviceSource:
            source = InMemoryGpuDevices(
                [ScriptedDevice(d, {"gpu_util_pct": 5}) for d in self.devices.get(vendor, [])],
                unavailable=self.unavailable.get(vendor),
            )
            self.made[vendor] = source
            return source

        return make


def test_the_choices_and_their_order() -> None:
    assert VENDOR_CHOICES == ("auto", "nvidia", "amd", "ascend")
    c = Made({}, {}).candidates()
    assert [x.choice for x in tried_in_order("auto", c)] == ["nvidia", "amd", "ascend"]
    assert [x.choice for x in tried_in_order("amd", c)] == ["amd"]
    with pytest.raises(ValueError, match="'intel' is not one of auto, nvidia, amd, ascend"):
        tried_in_order("intel", c)


def test_auto_reads_the_first_that_opens_and_says_which() -> None:
    made = Made({"nvidia": NO_NV}, {"amd": [MI300X, MI300X_1], "ascend": [NPU]})
    lines: list[str] = []
    choice = VendorChoice("auto", made.candidates(), note=lines.append)
    assert choice.vendor == "auto"
    assert choice.open() == [MI300X, MI300X_1]
    assert lines == ["GPU metrics: AMD GPUs through: 2 x AMD Instinct MI300X"]
    assert list(made.made) == ["nvidia", "amd"]  # npu-smi never run once amd-smi answered
    assert choice.vendor == "memory" and choice.chosen is made.made["amd"]
    sample = choice.sample(MI300X, 9)
    assert sample.metrics["gpu_util_pct"] == 5 and made.made["amd"].samples == 1
    assert choice.events_supported(MI300X) is True and choice.driver_version() == "twin-1.0"
    choice.close()
    assert made.made["amd"].closed and not made.made["nvidia"].closed


def test_auto_with_none_there_is_one_line_of_short_reasons() -> None:
    made = Made({"nvidia": NO_NV, "amd": NO_AMD, "ascend": NO_NPU}, {})
    choice = VendorChoice("auto", made.candidates())
    with pytest.raises(FeatureUnavailable) as caught:
        choice.open()
    assert str(caught.value) == (
        "GPU metrics: no NVML library (libnvidia-ml.so.1), no amd-smi or rocm-smi on PATH, "
        "no npu-smi on PATH: skipped"
    )
    assert choice.counters() == {}
    choice.close()  # nothing opened: nothing to close, no error


def test_a_named_vendor_not_there_is_one_line_and_no_other_is_tried() -> None:
    made = Made({"ascend": NO_NPU}, {"nvidia": [DeviceInfo(0, "GPU-0", "NVIDIA H100")]})
    choice = VendorChoice("ascend", made.candidates())
    with pytest.raises(FeatureUnavailable) as caught:
        choice.open()
    assert str(caught.value) == "GPU metrics (--gpu-vendor ascend): no npu-smi on PATH: skipped"
    assert list(made.made) == ["ascend"]


def test_a_tool_that_lists_no_device_is_passed_over_and_closed() -> None:
    made = Made({"nvidia": NO_NV}, {"ascend": [NPU]})  # amd-smi there, no AMD GPU
    lines: list[str] = []
    choice = VendorChoice("auto", made.candidates(), note=lines.append)
    assert choice.open() == [NPU]
    assert lines == ["GPU metrics: Huawei Ascend NPUs through: 1 x Ascend 910B3"]
    assert made.made["amd"].closed
    with pytest.raises(FeatureUnavailable) as caught:
        VendorChoice("amd", Made({}, {}).candidates()).open()
    assert str(caught.value) == (
        "GPU metrics (--gpu-vendor amd): AMD GPUs through listed no device: skipped"
    )


def test_a_vendor_there_but_broken_is_said_as_it_came_and_not_hidden() -> None:
    broken = "NVML did not start (Driver Not Loaded, NVML error 9): GPU device metrics off"
    made = Made({"nvidia": broken, "amd": NO_AMD}, {"ascend": [NPU]})
    lines: list[str] = []
    VendorChoice("auto", made.candidates(), note=lines.append).open()
    assert lines == [
        "GPU metrics: Huawei Ascend NPUs through: 1 x Ascend 910B3; passed over: "
        "NVML did not start (Driver Not Loaded, NVML error 9)"
    ]
    made = Made({"nvidia": broken, "amd": NO_AMD, "ascend": NO_NPU}, {})
    with pytest.raises(FeatureUnavailable) as caught:
        VendorChoice("auto", made.candidates()).open()
    assert str(caught.value) == (
        "GPU metrics: NVML did not start (Driver Not Loaded, NVML error 9), "
        "no amd-smi or rocm-smi on PATH, no npu-smi on PATH: skipped"
    )


def test_the_lines() -> None:
    devices = [MI300X, NPU, MI300X_1]
    assert chosen_line("AMD GPUs through", devices, "/opt/rocm/bin/amd-smi", []) == (
        "GPU metrics: AMD GPUs through /opt/rocm/bin/amd-smi: "
        "2 x AMD Instinct MI300X, 1 x Ascend 910B3"
    )
    assert chosen_line("NVIDIA GPUs through NVML", devices[1:2], None, ["x"]) == (
        "GPU metrics: NVIDIA GPUs through NVML: 1 x Ascend 910B3; passed over: x"
    )
    assert none_line("nvidia", ["x"]) == "GPU metrics (--gpu-vendor nvidia): x: skipped"


def test_reading_before_a_choice_is_a_bug_said_plainly() -> None:
    choice = VendorChoice("auto", Made({}, {}).candidates())
    with pytest.raises(RuntimeError, match="before open"):
        choice.sample(MI300X, 1)
