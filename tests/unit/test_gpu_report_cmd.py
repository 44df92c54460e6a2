"""`zerotrace gpu-report DIR...`: the report of recording folders on stdout and as HTML; a bad
folder is one line and exit status 1. `--api URL`: the report of a period from a running query
service (HttpApi over the device fleet of tests/unit/device_data.py), its period arguments, and
the mixes refused."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.unit.device_data import NS, T0, filled_store
from zerotrace.errors import ConfigError
from zerotrace_cli import gpu_report_cmd, main
from zerotrace_query.http_api import HttpApi

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


def test_report_of_a_period_from_the_query_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZEROTRACE_API_TOKEN", raising=False)
    store = filled_store()
    http = HttpApi(store, port=0).start()
    html = tmp_path / "period.html"
    try:
        start_s = T0 // NS
        argv = ["--api", http.url, "--from", str(start_s), "--to", str(start_s + 20)]
        code = main(["gpu-report", *argv, "--html", str(html)])
    finally:
        http.stop()
        store.close()
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0] == (
        "GPU windows from 2023-11-14 22:13:20 UTC to 2023-11-14 22:13:40 UTC: 9 windows"
    )
    assert out[2].split() == ["AMD", "Instinct", "MI300X", "1", "4", "4", "0", "-"]
    assert " ".join(out[3].split()) == "NVIDIA H100 80GB HBM3 2 9 5 3 48 x1, 63 x1, 79 x1"
    assert out[5].split()[-6:] == ["CHIP", "MODEL", "MIN", "MEAN", "MAX", "GAPS"]
    # Power of the H100s: 300.5 and 310.25 W in each of GPU-aaaa's four windows; GPU-bbbb none.
    power = out.index(next(line for line in out if line.startswith("Power ")))
    assert " ".join(out[power + 1].split()) == "NVIDIA H100 80GB HBM3 300.5 305.4 310.2 11%"
    # Energy: 1500 per window and 1500 between windows, over four windows.
    energy = out.index(next(line for line in out if "TOTAL_ENERGY" in line))
    assert out[energy + 1].split()[-2:] == ["10,500", "1"]
    assert " ".join(out[-1].split()) == "NVIDIA H100 80GB HBM3 row_remap_failure, ecc_dbe_vol_total"
    page = html.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and 'id="counters"' in page


def test_the_period_arguments() -> None:
    now_ms = T0 // 1_000_000

    def period(*argv: str) -> tuple[int, int]:
        parser = argparse.ArgumentParser()
        gpu_report_cmd.register(parser.add_subparsers())
        return gpu_report_cmd.period_ns(parser.parse_args(["gpu-report", *argv]), now_ms)

    assert period() == (T0 - 3600 * NS, T0)
    assert period("--last", "15m") == (T0 - 900 * NS, T0)
    assert period("--from", "-2h", "--to", "-1h") == (T0 - 7200 * NS, T0 - 3600 * NS)
    assert period("--from", "2023-11-14T22:00:00Z") == (T0 - 800 * NS, T0)
    for argv, error in (
        (["--last", "1h", "--from", "-2h"], "give --last or --from, not both"),
        (["--last", "soon"], "--last 'soon': use a number and s, m, h or d (e.g. 6h)"),
        (["--from", "-1h", "--to", "-2h"], "the period is empty: --to must be later than --from"),
    ):
        with pytest.raises(ConfigError) as raised:
            period(*argv)
        assert str(raised.value) == error


def test_api_and_folders_do_not_mix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu-report", str(tmp_path), "--api", "http://127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == "zerotrace: give recording folders or --api, not both\n"
    assert main(["gpu-report", "--last", "1h"]) == 1
    assert capsys.readouterr().err == "zerotrace: --last, --from, --to and --node need --api\n"
    assert main(["gpu-report"]) == 1
    assert capsys.readouterr().err == "zerotrace: give recording folders (DIR...) or --api URL\n"
