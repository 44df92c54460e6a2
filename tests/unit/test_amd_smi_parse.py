"""Recorded amd-smi outputs of ROCm 6.0, 6.1 and 6.4 and rocm-smi's of ROCm 5.7 parse to exact
samples, gaps named; malformed output is one SmiOutputError line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from zerotrace_collector.amd_smi_parse import (
    devices_of,
    metric_samples,
    parse_list,
    parse_process,
    parse_rocm_smi,
    parse_static,
)
from zerotrace_collector.gpu_devices import METRIC_FIELDS, DeviceInfo, DeviceSample, ProcessGpuUse
from zerotrace_collector.smi_values import MIB, SmiOutputError

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "amd_smi"
TS = 1_700_000_000_000_000_000


def _text(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text(encoding="utf-8")


def _read(version: str) -> list[DeviceSample]:
    folder = FIXTURES / version
    uuids = parse_list(_text(version, "list.json")) if (folder / "list.json").exists() else {}
    devices = devices_of(parse_static(_text(version, "static.json")), uuids)
    procs = (
        parse_process(_text(version, "process.json")) if (folder / "process.json").exists() else {}
    )
    return metric_samples(_text(version, "metric.json"), devices, TS, procs)


def _given(sample: DeviceSample) -> dict[str, object]:
    return {k: v for k, v in sample.metrics.items() if v is not None}


def _gaps(given: Mapping[str, object]) -> tuple[str, ...]:
    return tuple(n for n in METRIC_FIELDS if n not in given)


MI300X_0_64 = {
    "sm_clock_mhz": 2100,
    "mem_clock_mhz": 1300,
    "memory_temp_c": 47,
    "temperature_c": 60.0,
    "power_w": 734.0,
    "total_energy_consumption_mj": 14_292_727_274,
    "pcie_replay_counter": 0,
    "gpu_util_pct": 98.0,
    "mem_copy_util_pct": 13.0,
    "dec_util_pct": 0.0,
    "fb_free_bytes": 191616 * MIB,
    "fb_used_bytes": 4976 * MIB,
    "fb_total_bytes": 196592 * MIB,
    "ecc_sbe_vol_total": 0,
    "ecc_dbe_vol_total": 0,
    "clocks_event_reasons": 0x4,
}


def test_rocm_6_4_gpu_data_wrapper_value_objects_and_violations() -> None:
    s0, s1 = _read("rocm-6.4")
    assert s0.device == DeviceInfo(0, "8fff74a1-0000-1000-80e9-b6a8f6c62f4f", "AMD Instinct MI300X")
    assert s0.ts_ns == TS
    assert _given(s0) == MI300X_0_64
    assert s0.unsupported == _gaps(MI300X_0_64)
    assert "enc_util_pct" in s0.unsupported and "pcie_tx_bytes" in s0.unsupported
    assert s0.failed == ()
    assert s0.clocks_event_reason_names == ("SwPowerCap",)
    assert s0.processes == (ProcessGpuUse(2427396, 4096 * MIB),)
    assert s1.device.uuid == "c4ff74a1-0000-1000-8046-2d1a6c0b9e33"
    assert s1.metrics["sm_clock_mhz"] == 2093
    assert s1.metrics["dec_util_pct"] == 3.0  # the mean of the VCN engines that report
    assert s1.metrics["total_energy_consumption_mj"] == 13_877_411_500
    assert s1.metrics["clocks_event_reasons"] == 0
    assert s1.clocks_event_reason_names == ()
    assert s1.processes == ()


def test_rocm_6_1_list_with_value_objects_and_a_gcd_without_power() -> None:
    s0, s1 = _read("rocm-6.1")
    expected0 = {
        "sm_clock_mhz": 1700,
        "mem_clock_mhz": 1600,
        "memory_temp_c": 61,
        "temperature_c": 52.0,  # hotspot, not edge (44)
        "power_w": 486.0,
        "total_energy_consumption_mj": 2_517_392_141,
        "pcie_replay_counter": 0,
        "gpu_util_pct": 100.0,
        "mem_copy_util_pct": 41.0,
        "fb_free_bytes": (65520 - 51212) * MIB,
        "fb_used_bytes": 51212 * MIB,
        "fb_total_bytes": 65520 * MIB,
        "ecc_sbe_vol_total": 2,
        "ecc_dbe_vol_total": 0,
        "clocks_event_reasons": 0,  # UNTHROTTLED
    }
    assert s0.device == DeviceInfo(0, "91ff740c-0000-1000-8029-e1a3f2b4c5d6", "AMD Instinct MI250X")
    assert _given(s0) == expected0
    assert s0.unsupported == _gaps(expected0)
    assert s0.processes == (ProcessGpuUse(31337, 51200 * MIB),)
    assert s1.metrics["power_w"] is None and "power_w" in s1.unsupported
    assert s1.metrics["total_energy_consumption_mj"] is None
    assert "total_energy_consumption_mj" in s1.unsupported
    assert s1.metrics["gpu_util_pct"] == 97.0
    assert s1.processes == ()  # "No running processes detected"


def test_rocm_6_0_plain_numbers() -> None:
    (s,) = _read("rocm-6.0")
    expected = {
        "sm_clock_mhz": 1420,
        "mem_clock_mhz": 1300,
        "memory_temp_c": 41,
        "temperature_c": 52.0,
        "power_w": 389.0,
        "total_energy_consumption_mj": 8_123_456_750,
        "pcie_replay_counter": 3,
        "gpu_util_pct": 45.0,
        "mem_copy_util_pct": 7.0,
        "fb_free_bytes": 135152 * MIB,
        "fb_used_bytes": 61440 * MIB,
        "fb_total_bytes": 196592 * MIB,
        "ecc_sbe_vol_total": 0,
        "ecc_dbe_vol_total": 0,
    }
    # no list output: named by the ASIC serial; throttle_status N/A: clock reasons a gap
    assert s.device == DeviceInfo(0, "0xE1F2A3B4C5D6E7F8", "AMD Instinct MI300X")
    assert _given(s) == expected
    assert s.unsupported == _gaps(expected)


def test_rocm_smi_legacy_cards() -> None:
    s0, s1 = parse_rocm_smi(_text("rocm-5.7-rocm-smi", "showallinfo.json"), TS)
    expected0 = {
        "sm_clock_mhz": 800,
        "mem_clock_mhz": 1600,
        "memory_temp_c": 47,
        "temperature_c": 39.0,
        "power_w": 91.0,
        "total_energy_consumption_mj": 1_887_654,
        "pcie_replay_counter": 0,
        "gpu_util_pct": 12.0,
        "mem_copy_util_pct": 3.0,
        "fb_free_bytes": 68702699520 - 10960896,
        "fb_used_bytes": 10960896,
        "fb_total_bytes": 68702699520,
    }
    assert s0.device == DeviceInfo(0, "0x5f2b8d1c3a4e6f01", "AMD INSTINCT MI250X (MCM) OAM AC MBA")
    assert _given(s0) == expected0
    assert s0.unsupported == _gaps(expected0)
    assert s1.device.index == 1
    assert s1.metrics["power_w"] is None and "power_w" in s1.unsupported


def test_a_gpu_missing_from_static_is_named_by_index() -> None:
    text = '[{"gpu": 3, "usage": {"gfx_activity": {"value": 5, "unit": "%"}}}]'
    (s,) = metric_samples(text, [], TS)
    assert s.device == DeviceInfo(3, "amd-gpu-3", "AMD GPU")
    assert s.metrics["gpu_util_pct"] == 5.0


@pytest.mark.parametrize(
    ("call", "text", "message"),
    [
        (parse_static, '[{"gpu": 0, "asic": {', "amd-smi: not JSON"),
        (parse_static, '{"gpu_data": {"gpu": 0}}', "expected a list of GPUs, got dict"),
        (parse_list, '[{"uuid": "x"}]', "a GPU entry without its 'gpu' index"),
        (parse_process, '"N/A"', "expected a list of GPUs, got str"),
        (parse_static, "", "amd-smi: not JSON"),
    ],
)
def test_malformed_output_is_one_line(call: object, text: str, message: str) -> None:
    assert callable(call)
    with pytest.raises(SmiOutputError) as info:
        call(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_truncated_metric_and_rocm_smi_are_one_line() -> None:
    full = _text("rocm-6.4", "metric.json")
    with pytest.raises(SmiOutputError, match=r"^amd-smi: not JSON \("):
        metric_samples(full[: len(full) // 2], [], TS)
    with pytest.raises(SmiOutputError, match="no 'cardN' object"):
        parse_rocm_smi('{"system": {"Driver version": "6.2.4"}}', TS)
    with pytest.raises(SmiOutputError, match="expected an object of cards"):
        parse_rocm_smi("[]", TS)
    with pytest.raises(SmiOutputError, match="card0 is not an object"):
        parse_rocm_smi('{"card0": "N/A"}', TS)
