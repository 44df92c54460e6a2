"""DCGM's profiling fields through NVML's GPM (zerotrace_collector/nvml_gpm.py), inside the NVML
adapter over the pynvml twin of test_nvml_devices.py: the metrics between two samples, as DCGM's
ratios; the first sample warming up; a device or driver without GPM unsupported and said once
per device; errors failed and counted; the samples freed before NVML shuts down. The real
structures (pynvml's ctypes over the C stand-in) are tests/integration/test_nvml_standin.py."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml  # type: ignore[import-untyped]
import pytest

from tests.unit.test_nvml_devices import (
    FULL,
    FUNCTION_NOT_FOUND,
    GPM_RATIOS,
    GPU_IS_LOST,
    NO_PERMISSION,
    NOT_SUPPORTED,
    Err,
    FakeNvml,
    opened,
)
from zerotrace_collector.nvml_readings import GPM_FIELDS

pytestmark = pytest.mark.unit

NO_GPM = SimpleNamespace(isSupportedDevice=0)
A10 = dict(FULL, name="NVIDIA A10", uuid="GPU-1", gpm_support=NO_GPM)


def test_gpm_gives_dcgms_ratios_over_each_interval_after_a_first_sample_warming_up() -> None:
    fake = FakeNvml(dict(FULL))
    nvml, [device] = opened(fake)
    assert len(fake.gpm_samples) == 2  # two buffers for the device, from open to close
    first = nvml.sample(device, 1)
    assert all(first.metrics[name] is None for name in GPM_FIELDS)
    assert first.warming_up == GPM_FIELDS
    assert not set(GPM_FIELDS) & set(first.unsupported + first.failed)
    for ts in (2, 3, 4):  # each later sample: the metrics since the one before (the fake
        sample = nvml.sample(device, ts)  # checks the earlier is sample1, the later sample2)
        assert {n: sample.metrics[n] for n in GPM_FIELDS} == GPM_RATIOS
        assert sample.warming_up == ()
    assert len(fake.gpm_samples) == 2 and fake.gpm_reads == 4  # no allocation per sample
    assert nvml.errors == 0 and nvml.notes == []


def test_a_device_without_gpm_has_the_fields_unsupported_and_one_line_says_so() -> None:
    fake = FakeNvml(dict(FULL), dict(A10))
    nvml, devices = opened(fake)
    assert len(fake.gpm_samples) == 2  # GPU 0's only
    for ts in (1, 2):
        sample = nvml.sample(devices[1], ts)
        assert set(GPM_FIELDS) <= set(sample.unsupported)
        assert sample.warming_up == () and sample.failed == ()
    assert "gpm_sample" not in fake.calls
    assert nvml.notes == [
        "GPU 1 (NVIDIA A10): no GPM (needs Hopper or newer): SM activity, occupancy and "
        "tensor activity not read"
    ]
    assert nvml.errors == 0


@pytest.mark.parametrize(
    ("code", "why"),
    [
        (FUNCTION_NOT_FOUND, "no GPM in this driver's NVML (nvmlGpm* missing)"),
        (NOT_SUPPORTED, "no GPM (needs Hopper or newer)"),
    ],
)
def test_an_older_driver_or_a_not_supported_answer_is_no_gpm_too(code: int, why: str) -> None:
    fake = FakeNvml(dict(FULL, gpm_support=Err(code)))
    nvml, [device] = opened(fake)
    sample = nvml.sample(device, 1)
    assert set(GPM_FIELDS) <= set(sample.unsupported)
    assert nvml.notes == [
        f"GPU 0 (NVIDIA H100 80GB HBM3): {why}: SM activity, occupancy and tensor activity not read"
    ]
    assert fake.gpm_samples == [] and nvml.errors == 0


def test_a_metric_the_device_does_not_give_is_a_gap_and_an_error_fails_it_counted() -> None:
    gpm = {**FULL["gpm"], 11: Err(NOT_SUPPORTED), 13: Err(GPU_IS_LOST)}  # type: ignore[dict-item]
    nvml, [device] = opened(FakeNvml(dict(FULL, gpm=gpm)))
    nvml.sample(device, 1)
    sample = nvml.sample(device, 2)
    assert "pipe_fp64_active_ratio" in sample.unsupported
    assert sample.failed == ("pipe_fp16_active_ratio",)
    assert sample.metrics["pipe_fp64_active_ratio"] is None
    assert sample.metrics["pipe_fp16_active_ratio"] is None
    assert sample.metrics["sm_active_ratio"] == 0.5  # the others of the call stay
    assert nvml.errors == 1
    assert nvml.notes == [
        "NVML error 15 (GPU is lost) reading pipe_fp16_active_ratio of GPU 0: such reads are "
        "left empty and counted (nvml_errors)"
    ]


def test_a_failed_gpm_sample_fails_the_fields_and_the_next_one_warms_up_again() -> None:
    fake = FakeNvml(dict(FULL))
    nvml, [device] = opened(fake)
    nvml.sample(device, 1)
    fake.devices[0]["gpm_sample_error"] = GPU_IS_LOST
    lost = nvml.sample(device, 2)
    assert lost.failed == GPM_FIELDS and lost.warming_up == ()
    del fake.devices[0]["gpm_sample_error"]
    again = nvml.sample(device, 3)  # no earlier sample to measure from
    assert again.warming_up == GPM_FIELDS and again.failed == ()
    later = nvml.sample(device, 4)
    assert {n: later.metrics[n] for n in GPM_FIELDS} == GPM_RATIOS
    assert nvml.errors == 1 and len(nvml.notes) == 1


def test_a_not_supported_sample_later_is_a_gap_not_an_error() -> None:
    """A GPU switched to MIG mode may stop giving device-level GPM samples."""
    fake = FakeNvml(dict(FULL))
    nvml, [device] = opened(fake)
    nvml.sample(device, 1)
    fake.devices[0]["gpm_sample_error"] = NOT_SUPPORTED
    sample = nvml.sample(device, 2)
    assert set(GPM_FIELDS) <= set(sample.unsupported) and sample.failed == ()
    assert nvml.errors == 0 and nvml.notes == []


def test_a_failed_metrics_call_fails_every_gpm_field() -> None:
    nvml, [device] = opened(FakeNvml(dict(FULL, gpm=Err(NO_PERMISSION))))
    nvml.sample(device, 1)
    sample = nvml.sample(device, 2)
    assert sample.failed == GPM_FIELDS and nvml.errors == 1


def test_an_error_asking_for_support_fails_the_fields_every_sample_counted_once() -> None:
    fake = FakeNvml(dict(FULL, gpm_support=Err(NO_PERMISSION)))
    nvml, [device] = opened(fake)
    for ts in (1, 2):
        assert nvml.sample(device, ts).failed == GPM_FIELDS
    assert nvml.errors == 1 and fake.gpm_samples == []
    assert nvml.notes == [
        "NVML error 4 (Insufficient Permissions) reading " + ", ".join(GPM_FIELDS) + " of "
        "GPU 0: such reads are left empty and counted (nvml_errors)"
    ]


def test_close_frees_every_gpm_sample_before_nvml_shuts_down() -> None:
    fake = FakeNvml(dict(FULL), dict(FULL, uuid="GPU-1"), dict(A10, uuid="GPU-2"))
    nvml, devices = opened(fake)
    for device in devices:
        nvml.sample(device, 1)
    nvml.close()  # the fake refuses a free after nvmlShutdown
    assert sorted(fake.gpm_freed) == [0, 1, 2, 3] and fake.shut
    fake.gpm_freed.clear()
    nvml.close()
    assert fake.gpm_freed == []


def test_mig_mode_is_the_current_mode() -> None:
    nvml, [device] = opened(FakeNvml(dict(FULL, mig=[1, 0])))
    assert nvml.sample(device, 1).metrics["mig_mode"] is True
    nvml, [device] = opened(FakeNvml(dict(FULL, mig=[0, 1])))  # pending: not on yet
    assert nvml.sample(device, 1).metrics["mig_mode"] is False


def test_the_gpm_metric_ids_are_pynvmls() -> None:
    from zerotrace_collector.nvml_readings import GPM_READS

    assert {r.name: r.metric_id for r in GPM_READS} == {
        "gr_engine_active_ratio": pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
        "sm_active_ratio": pynvml.NVML_GPM_METRIC_SM_UTIL,
        "sm_occupancy_ratio": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
        "pipe_tensor_active_ratio": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        "dram_active_ratio": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
        "pipe_fp64_active_ratio": pynvml.NVML_GPM_METRIC_FP64_UTIL,
        "pipe_fp32_active_ratio": pynvml.NVML_GPM_METRIC_FP32_UTIL,
        "pipe_fp16_active_ratio": pynvml.NVML_GPM_METRIC_FP16_UTIL,
    }
