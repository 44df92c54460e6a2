"""`zerotrace gpu-report DIR...`: the report of recording folders on stdout and as HTML; a bad
folder is one line and exit status 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerotrace_cli import main

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_report_of_fixtures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "report.html"
    code = main(
        [
            "gpu-report",
            str(FIXTURES / "amd_smi" / "rocm-6.4"),
            str(FIXTURES / "npu_smi" / "25.3.rc1-a3"),
            "--html",
            str(html),
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[1].split() == ["AMD", "Instinct", "MI300X", "2", "2"]
    assert out[2].split() == ["Ascend910", "2", "2"]
    assert html.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_a_bad_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu-report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert (
        err
        == f"zerotrace: {tmp_path}: no metric.json, showallinfo.json or info.txt: not a recording\n"
    )
    assert main(["gpu-report", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err == f"zerotrace: {tmp_path / 'none'}: not a folder\n"
