"""The AMD adapter over recorded outputs: devices, one CLI reading per tick shared by its
devices, failed gaps when a run fails, one line when no tool is there."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.amd_smi_devices import NO_AMD_SMI, AmdSmiDevices
from zerotrace_collector.gpu_devices import METRIC_FIELDS, DeviceInfo, GpuDeviceSource
from zerotrace_collector.smi_cli import SmiRunError

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "amd_smi"


class Recorded:
    def __init__(self, folder: str) -> None:
        self.folder = FIXTURES / folder
        self.calls: list[tuple[str, ...]] = []
        self.fail: set[str] = set()

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(tuple(argv[1:]))
        command = argv[1]
        if command in self.fail:
            raise SmiRunError(f"{argv[0]} {command}: AMDSMI_STATUS_BUSY")
        name = "showallinfo.json" if command == "--showallinfo" else f"{command}.json"
        return (self.folder / name).read_text(encoding="utf-8")


def _which(*present: str):  # type: ignore[no-untyped-def]
    return lambda name: f"/opt/rocm/bin/{name}" if name in present else None


def test_is_a_gpu_device_source() -> None:
    source: GpuDeviceSource = AmdSmiDevices(which=_which())
    assert source.vendor == "amd"


def test_no_tool_is_one_line() -> None:
    with pytest.raises(FeatureUnavailable, match=f"^{re.escape(NO_AMD_SMI)}$"):
        AmdSmiDevices(which=_which()).open()


def test_one_reading_per_tick() -> None:
    run = Recorded("rocm-6.4")
    amd = AmdSmiDevices(run=run, which=_which("amd-smi", "rocm-smi"))
    devices = amd.open()
    assert [d.uuid for d in devices] == [
        "8fff74a1-0000-1000-80e9-b6a8f6c62f4f",
        "c4ff74a1-0000-1000-8046-2d1a6c0b9e33",
    ]
    assert run.calls == [("static", "--json"), ("list", "--json")]
    s0, s1 = amd.sample(devices[0], 100), amd.sample(devices[1], 100)
    assert (s0.metrics["power_w"], s1.metrics["power_w"]) == (734.0, 652.0)
    assert run.calls[2:] == [("metric", "--json"), ("process", "--json")]
    amd.sample(devices[0], 200)
    assert len(run.calls) == 6
    assert amd.events_supported(devices[0]) is False
    assert amd.wait_events(10) == []
    assert amd.counters() == {"amd_smi_errors": 0}
    amd.close()


def test_a_failed_run_is_failed_gaps_said_once() -> None:
    run = Recorded("rocm-6.4")
    amd = AmdSmiDevices(run=run, which=_which("amd-smi"))
    devices = amd.open()
    run.fail.add("metric")
    for ts in (1, 2):
        s = amd.sample(devices[1], ts)
        assert s.failed == METRIC_FIELDS and s.unsupported == ()
    assert amd.counters() == {"amd_smi_errors": 2}
    assert amd.notes == [
        "AMD GPU metrics not read (/opt/rocm/bin/amd-smi metric: AMDSMI_STATUS_BUSY)"
    ]
    run.fail = {"process"}
    s = amd.sample(devices[0], 3)
    assert s.metrics["gpu_util_pct"] == 98.0 and s.processes == ()
    assert amd.notes[-1].startswith("amd-smi process failed")


def test_list_failing_names_by_serial() -> None:
    run = Recorded("rocm-6.4")
    run.fail.add("list")
    amd = AmdSmiDevices(run=run, which=_which("amd-smi"))
    assert amd.open()[0] == DeviceInfo(0, "0x9D12A3B4C5D6E7F8", "AMD Instinct MI300X")


def test_static_failing_is_feature_unavailable() -> None:
    run = Recorded("rocm-6.4")
    run.fail.add("static")
    with pytest.raises(FeatureUnavailable, match=r"^AMD GPUs not listed"):
        AmdSmiDevices(run=run, which=_which("amd-smi")).open()


def test_rocm_smi_when_amd_smi_is_absent() -> None:
    run = Recorded("rocm-5.7-rocm-smi")
    amd = AmdSmiDevices(run=run, which=_which("rocm-smi"))
    devices = amd.open()
    assert [d.index for d in devices] == [0, 1]
    s = amd.sample(devices[0], 7)
    assert (s.ts_ns, s.metrics["sm_clock_mhz"]) == (7, 800)
    assert run.calls == [("--showallinfo", "--json")] * 2
