"""Recorded npu-smi outputs (910B on 23.0, 910 A3 on 25.3, 310P on 23.0) parse to exact
samples, gaps named; malformed output is one SmiOutputError line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from zerotrace_collector.gpu_devices import METRIC_FIELDS, DeviceInfo, DeviceSample, ProcessGpuUse
from zerotrace_collector.npu_smi_parse import (
    NpuChip,
    NpuDetail,
    chip_samples,
    parse_detail,
    parse_info,
)
from zerotrace_collector.smi_values import MIB, SmiOutputError

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "npu_smi"
TS = 1_700_000_000_000_000_000


def _text(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text(encoding="utf-8")


def _given(sample: DeviceSample) -> dict[str, object]:
    return {k: v for k, v in sample.metrics.items() if v is not None}


def _gaps(given: Mapping[str, object]) -> tuple[str, ...]:
    return tuple(n for n in METRIC_FIELDS if n not in given)


def test_910b_table() -> None:
    c0, c1 = parse_info(_text("23.0.rc3-910b", "info.txt"))
    assert c0 == NpuChip(
        npu=0,
        chip=0,
        phy_id=None,
        name="910B3",
        health="OK",
        bus_id="0000:C1:00.0",
        power_w=312.4,
        temp_c=47.0,
        aicore_pct=87.0,
        memory_used_mib=58712,
        memory_total_mib=65536,
        processes=(ProcessGpuUse(2415738, 55293 * MIB),),
    )
    assert (c1.npu, c1.chip, c1.health, c1.memory_used_mib, c1.processes) == (
        1,
        0,
        "Warning",
        3380,
        (),
    )


def test_each_chips_health_is_its_samples_vendor_verdict() -> None:
    s0, s1 = chip_samples(parse_info(_text("23.0.rc3-910b", "info.txt")), TS)
    assert (s0.health, s1.health) == ("OK", "Warning")


def test_910b_table_and_every_detail() -> None:
    version = "23.0.rc3-910b"
    details = [
        d
        for kind in ("usages", "power", "temp", "memory", "ecc")
        for d in parse_detail(_text(version, f"{kind}-0.txt"))
    ]
    s0, s1 = chip_samples(parse_info(_text(version, "info.txt")), TS, details)
    expected0 = {
        "gpu_util_pct": 87.0,
        "mem_copy_util_pct": 63.0,
        "power_w": 312.4,
        "temperature_c": 47.0,
        "memory_temp_c": 44,
        "mem_clock_mhz": 1600,
        "fb_used_bytes": 58712 * MIB,
        "fb_total_bytes": 65536 * MIB,
        "fb_free_bytes": (65536 - 58712) * MIB,
        "ecc_sbe_vol_total": 3,
        "ecc_dbe_vol_total": 0,
        "ecc_sbe_agg_total": 17,
        "ecc_dbe_agg_total": 0,
    }
    assert s0.device == DeviceInfo(0, "0000:C1:00.0", "Ascend 910B3")
    assert _given(s0) == expected0
    assert s0.unsupported == _gaps(expected0)
    assert s0.processes == (ProcessGpuUse(2415738, 55293 * MIB),)
    expected1 = {
        "gpu_util_pct": 0.0,
        "power_w": 98.6,
        "temperature_c": 38.0,
        "fb_used_bytes": 3380 * MIB,
        "fb_total_bytes": 65536 * MIB,
        "fb_free_bytes": (65536 - 3380) * MIB,
    }
    assert s1.device == DeviceInfo(1, "0000:C2:00.0", "Ascend 910B3")
    assert _given(s1) == expected1
    assert s1.unsupported == _gaps(expected1)


def test_a3_two_chips_per_npu_phy_ids_and_a_dash_for_power() -> None:
    version = "25.3.rc1-a3"
    details = parse_detail(_text(version, "usages-0.txt")) + parse_detail(
        _text(version, "power-0.txt")
    )
    assert [(d.npu, d.chip) for d in details] == [(0, 0), (0, 1), (0, 0), (0, 1)]
    assert details[3].values == {}
    s0, s1 = chip_samples(parse_info(_text(version, "info.txt")), TS, details)
    assert s0.device == DeviceInfo(0, "0000:9D:00.0", "Ascend910")
    assert s1.device == DeviceInfo(1, "0000:9F:00.0", "Ascend910")
    expected1 = {
        "gpu_util_pct": 33.0,
        "mem_copy_util_pct": 25.0,
        "temperature_c": 31.0,
        "fb_used_bytes": 31796 * MIB,
        "fb_total_bytes": 65536 * MIB,
        "fb_free_bytes": (65536 - 31796) * MIB,
    }
    assert _given(s1) == expected1
    assert s1.unsupported == _gaps(expected1)  # power "-" and none in -t power
    assert s0.metrics["power_w"] == 163.6
    assert s0.processes == (ProcessGpuUse(884211, 28421 * MIB),)
    assert s1.processes == (ProcessGpuUse(884212, 28413 * MIB),)


def test_310p_ddr_memory_na_power_and_chip_id_first() -> None:
    version = "23.0.0-310p"
    (detail,) = parse_detail(_text(version, "common-0.txt"))
    assert (detail.npu, detail.chip, detail.values["aicore curfreq(mhz)"]) == (0, 0, "1080")
    chips = parse_info(_text(version, "info.txt"))
    assert [(c.phy_id, c.power_w) for c in chips] == [(0, None), (1, None)]
    s0, s1 = chip_samples(chips, TS, [detail])
    expected0 = {
        "gpu_util_pct": 12.0,
        "power_w": 24.5,  # NA in the table, given by -t common
        "temperature_c": 41.0,
        "sm_clock_mhz": 1080,
        "fb_used_bytes": 1473 * MIB,
        "fb_total_bytes": 21527 * MIB,
        "fb_free_bytes": (21527 - 1473) * MIB,
    }
    assert s0.device == DeviceInfo(0, "0000:3B:00.0", "Ascend 310P3")
    assert _given(s0) == expected0
    assert s0.unsupported == _gaps(expected0)
    assert s1.metrics["power_w"] is None and "power_w" in s1.unsupported
    assert s0.processes == (ProcessGpuUse(77120, 212 * MIB),)


def test_memory_from_usage_rate_when_the_table_has_none() -> None:
    chip = NpuChip(0, 0, None, "910B3", "OK", "0000:C1:00.0", None, None, None, None, None)
    detail = NpuDetail(0, 0, {"hbm capacity(mb)": "65536", "hbm usage rate(%)": "50"})
    (s,) = chip_samples([chip], TS, [detail])
    assert s.metrics["fb_total_bytes"] == 65536 * MIB
    assert s.metrics["fb_used_bytes"] == 32768 * MIB


def test_detail_without_chip_id_is_chip_zero() -> None:
    assert parse_detail("NPU ID : 4\nTemperature(C) : 40\n") == [
        NpuDetail(4, 0, {"temperature(c)": "40"})
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no 'NPU Name | Health' header"),
        ("command not found: npu-smi\n", "no 'NPU Name | Health' header"),
        ("| NPU   Name   | Health |\n", "no 'NPU Name | Health' header"),
        (
            "| NPU Name | Health | Power(W) Temp(C) |\n| Chip | Bus-Id | AICore(%) |\n"
            "| 0 910B3 | OK | 90.1 40 |\n",
            "a chip's second row is missing",
        ),
        (
            "| NPU Name | Health | Power(W) Temp(C) |\n| Chip | Bus-Id | AICore(%) |\n"
            "| x 910B3 | OK | 90.1 40 |\n| 0 | 0000:C1:00.0 | 3 |\n",
            "a chip row without its NPU and chip ids",
        ),
        ("| NPU Name | Health |\n| Chip | Bus-Id |\n", "fewer than three columns"),
    ],
)
def test_malformed_table_is_one_line(text: str, message: str) -> None:
    with pytest.raises(SmiOutputError) as info:
        parse_info(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_truncated_table_is_one_line() -> None:
    full = _text("23.0.rc3-910b", "info.txt").splitlines()
    with pytest.raises(SmiOutputError, match="second row is missing"):
        parse_info("\n".join(full[:7]))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no 'NPU ID : N' line"),
        ("Error: the device does not exist\n", "no 'NPU ID : N' line"),
        ("NPU ID : 0\nChip ID : zero\n", "'Chip ID' is not a number"),
    ],
)
def test_malformed_detail_is_one_line(text: str, message: str) -> None:
    with pytest.raises(SmiOutputError, match=message):
        parse_detail(text)
