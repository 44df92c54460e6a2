"""The Ascend adapter over recorded outputs: chips, one table and detail runs per tick, health
kept, failed gaps when the table run fails, one line when npu-smi is not there."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.gpu_devices import METRIC_FIELDS, GpuDeviceSource
from zerotrace_collector.npu_smi_devices import NO_NPU_SMI, NpuSmiDevices
from zerotrace_collector.smi_cli import SmiRunError

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "npu_smi"


class Recorded:
    def __init__(self, folder: str) -> None:
        self.folder = FIXTURES / folder
        self.calls: list[tuple[str, ...]] = []
        self.fail_table = False

    def __call__(self, argv: Sequence[str]) -> str:
        args = tuple(argv[1:])
        self.calls.append(args)
        if args == ("info",):
            if self.fail_table:
                raise SmiRunError("npu-smi info: dcmi model initialized failed")
            return (self.folder / "info.txt").read_text(encoding="utf-8")
        path = self.folder / f"{args[2]}-{args[4]}.txt"
        if not path.exists():
            raise SmiRunError(f"npu-smi info -t {args[2]}: exit status 1")
        return path.read_text(encoding="utf-8")


def _which(present: bool):  # type: ignore[no-untyped-def]
    return lambda name: "/usr/local/sbin/npu-smi" if present else None


def test_is_a_gpu_device_source() -> None:
    source: GpuDeviceSource = NpuSmiDevices(which=_which(False))
    assert source.vendor == "huawei"


def test_no_tool_is_one_line() -> None:
    with pytest.raises(FeatureUnavailable, match=f"^{re.escape(NO_NPU_SMI)}$"):
        NpuSmiDevices(which=_which(False)).open()


def test_one_reading_per_tick_with_details_and_health() -> None:
    run = Recorded("23.0.rc3-910b")
    npu = NpuSmiDevices(details=("usages", "memory"), run=run, which=_which(True))
    chips = npu.open()
    assert [(c.index, c.model) for c in chips] == [(0, "Ascend 910B3"), (1, "Ascend 910B3")]
    s0, s1 = npu.sample(chips[0], 5), npu.sample(chips[1], 5)
    assert (s0.metrics["mem_copy_util_pct"], s0.metrics["mem_clock_mhz"]) == (63.0, 1600)
    assert s1.metrics["mem_copy_util_pct"] is None  # NPU 1's details failed: gaps
    assert (s0.health, s1.health) == ("OK", "Warning")  # the table's Health column
    assert run.calls[1:] == [
        ("info",),
        ("info", "-t", "usages", "-i", "0"),
        ("info", "-t", "memory", "-i", "0"),
        ("info", "-t", "usages", "-i", "1"),
        ("info", "-t", "memory", "-i", "1"),
    ]
    assert npu.counters() == {"npu_smi_errors": 2}
    assert len(npu.notes) == 2  # one per detail type, said once
    assert npu.events_supported(chips[0]) is False and npu.wait_events(5) == []
    npu.close()


def test_a_failed_table_is_failed_gaps() -> None:
    run = Recorded("25.3.rc1-a3")
    npu = NpuSmiDevices(run=run, which=_which(True))
    chips = npu.open()
    run.fail_table = True
    s = npu.sample(chips[1], 9)
    assert s.failed == METRIC_FIELDS
    assert npu.notes == [
        "Ascend NPU metrics not read (npu-smi info: dcmi model initialized failed)"
    ]


def test_a_failing_table_at_open_is_feature_unavailable() -> None:
    run = Recorded("25.3.rc1-a3")
    run.fail_table = True
    with pytest.raises(FeatureUnavailable, match=r"^Ascend NPUs not listed"):
        NpuSmiDevices(run=run, which=_which(True)).open()
