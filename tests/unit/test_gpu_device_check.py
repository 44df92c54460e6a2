"""The device check's shell (bench/gpu_device_check.py): its fold and its part-4 lines."""

from __future__ import annotations

from bench.gpu_device_check import WINDOW_NS, fold, run_text
from tests.unit.test_gpu_check_report import RECORDS


def test_fold_makes_the_windows_of_records_in_any_order() -> None:
    windows = fold(list(reversed(RECORDS)))
    assert [(w["window_start_ns"], w["samples"]) for w in windows] == [(0, 4)]
    assert windows[0]["window_end_ns"] == WINDOW_NS
    assert windows[0]["metrics"]["gpu_util_pct"]["max"] == 100.0


def test_run_text_names_exit_samples_and_counters() -> None:
    ran = {
        "returncode": 0,
        "summary": {"profile_samples": {"ON_CPU": 3}, "counters": {"gpu": {"lost": 0}}},
    }
    assert run_text(ran) == (
        "zerotrace run --gpu-metrics --profile: exit 0\n"
        "  profile samples {'ON_CPU': 3}\n"
        "  gpu probes {'lost': 0}\n"
        "  gpu-metrics None\n"
    )
