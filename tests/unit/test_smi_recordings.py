"""Recording folders: each known layout is recognised; an unknown or malformed one is one line
naming the folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zerotrace_collector.smi_recordings import read_recording
from zerotrace_collector.smi_values import SmiOutputError

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    ("folder", "models"),
    [
        ("amd_smi/rocm-6.0", ["AMD Instinct MI300X"]),
        ("amd_smi/rocm-6.1", ["AMD Instinct MI250X"] * 2),
        ("amd_smi/rocm-6.4", ["AMD Instinct MI300X"] * 2),
        ("amd_smi/rocm-5.7-rocm-smi", ["AMD INSTINCT MI250X (MCM) OAM AC MBA"] * 2),
        ("npu_smi/23.0.rc3-910b", ["Ascend 910B3"] * 2),
        ("npu_smi/25.3.rc1-a3", ["Ascend910"] * 2),
        ("npu_smi/23.0.0-310p", ["Ascend 310P3"] * 2),
    ],
)
def test_every_fixture_folder_reads(folder: str, models: list[str]) -> None:
    samples = read_recording(FIXTURES / folder, ts_ns=42)
    assert [s.device.model for s in samples] == models
    assert {s.ts_ns for s in samples} == {42}


def test_not_a_recording(tmp_path: Path) -> None:
    with pytest.raises(SmiOutputError, match=f"^{re.escape(str(tmp_path))}: no metric.json"):
        read_recording(tmp_path)


def test_metric_without_static(tmp_path: Path) -> None:
    (tmp_path / "metric.json").write_text("[]", encoding="utf-8")
    with pytest.raises(SmiOutputError, match=r"metric\.json without static\.json$"):
        read_recording(tmp_path)


def test_a_malformed_detail_names_its_file(tmp_path: Path) -> None:
    info = (FIXTURES / "npu_smi" / "23.0.rc3-910b" / "info.txt").read_text(encoding="utf-8")
    (tmp_path / "info.txt").write_text(info, encoding="utf-8")
    (tmp_path / "usages-0.txt").write_text("Error: 8255\n", encoding="utf-8")
    with pytest.raises(SmiOutputError, match=r"usages-0\.txt: npu-smi info -t: no 'NPU ID"):
        read_recording(tmp_path)
