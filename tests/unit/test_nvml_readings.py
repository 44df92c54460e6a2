"""NVML's rules without a driver (zerotrace_collector/nvml_readings.py): which error is a gap,
the clock event reasons' names, processes joined with their utilisation samples."""

from __future__ import annotations

import pytest

from zerotrace_collector.gpu_devices import METRIC_FIELDS, ProcessGpuUse
from zerotrace_collector.nvml_readings import (
    FIELD_READS,
    GPM_FIELDS,
    GPM_READS,
    NOT_AVAILABLE_ULL,
    gpm_ratio,
    is_gap,
    is_older_driver,
    merge_processes,
    no_gpm_line,
    not_available,
    nvlink_total,
    reason_names,
)

pytestmark = pytest.mark.unit


def test_not_supported_and_a_missing_function_are_gaps_other_errors_are_not() -> None:
    assert is_gap(3) and is_gap(13)  # NOT_SUPPORTED, FUNCTION_NOT_FOUND
    for code in (1, 2, 4, 6, 9, 10, 15, 999):  # uninitialised, no permission, GPU lost ...
        assert not is_gap(code)
    assert is_older_driver(13) and is_older_driver(25) and not is_older_driver(3)


def test_field_reads_fill_known_metrics_once() -> None:
    names = [f.name for f in FIELD_READS]
    assert len(set(names)) == len(names)
    assert set(names) <= set(METRIC_FIELDS)
    nvlink = {f.field_id: f.scope_id for f in FIELD_READS if f.name.startswith("nvlink")}
    assert nvlink == {138: 0xFFFFFFFF, 139: 0xFFFFFFFF}  # summed over every link


def test_gpm_reads_fill_known_metrics_once_each_a_dcgm_profiling_field() -> None:
    assert tuple(r.name for r in GPM_READS) == GPM_FIELDS
    assert len(set(GPM_FIELDS)) == len(GPM_FIELDS) == 8
    assert set(GPM_FIELDS) <= set(METRIC_FIELDS)
    assert len({r.metric_id for r in GPM_READS}) == 8


def test_a_gpm_percentage_is_dcgms_ratio_and_not_a_number_is_none() -> None:
    assert gpm_ratio(62.5) == 0.625 and gpm_ratio(0.0) == 0.0 and gpm_ratio(100.0) == 1.0
    assert gpm_ratio(33.3) == 33.3 / 100  # as IEEE division gives it, no rounding of ours
    assert gpm_ratio(float("nan")) is None and gpm_ratio(float("inf")) is None


def test_the_no_gpm_line_names_the_device_and_what_is_not_read() -> None:
    assert no_gpm_line(1, "NVIDIA A10", "no GPM (needs Hopper or newer)") == (
        "GPU 1 (NVIDIA A10): no GPM (needs Hopper or newer): SM activity, occupancy and "
        "tensor activity not read"
    )


def test_reason_names_name_each_bit_and_keep_unknown_ones_as_hex() -> None:
    assert reason_names(0) == ()
    assert reason_names(0x44) == ("SwPowerCap", "HwThermalSlowdown")
    assert reason_names(0x1 | 0x100) == ("GpuIdle", "DisplayClockSetting")
    assert reason_names(0x4 | 0x1000) == ("SwPowerCap", "0x1000")


def test_nvlink_total_needs_both_directions() -> None:
    assert nvlink_total(1000, 2000) == 3000
    assert nvlink_total(0, 0) == 0
    assert nvlink_total(None, 5) is None and nvlink_total(5, None) is None


def test_not_available_is_no_value() -> None:
    assert not_available(NOT_AVAILABLE_ULL) is None
    assert not_available(0) == 0 and not_available(None) is None


def test_processes_join_memory_and_the_mean_of_their_samples() -> None:
    compute = [(300, 1 << 30), (100, NOT_AVAILABLE_ULL)]
    samples = [
        (300, 10, 50, 20, 0, 0),
        (300, 20, 70, 30, 3, 1),
        (200, 15, 5, 1, 0, 0),  # a graphics process: utilisation, no compute entry
    ]
    assert merge_processes(compute, samples) == (
        ProcessGpuUse(100, None),  # memory not available, no samples: all unknown
        ProcessGpuUse(200, None, 5.0, 1.0, 0.0, 0.0),
        ProcessGpuUse(300, 1 << 30, 60.0, 25.0, 1.5, 0.5),
    )
    assert merge_processes([], []) == ()
