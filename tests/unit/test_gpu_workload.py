"""The device check's workload (bench/gpu_workload.py) where it cannot run: one line why."""

from __future__ import annotations

import ctypes.util
import importlib.util
import json

import pytest

from bench.gpu_workload import EXIT_SKIPPED, PTX_SPIN, main


def said(capsys: pytest.CaptureFixture[str]) -> list[dict[str, str]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="libcuda is here")
def test_the_driver_engine_says_libcuda_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--engine", "driver", "--limit-s", "30"]) == EXIT_SKIPPED
    [line] = said(capsys)
    assert line["skipped"].startswith("libcuda.so.1 not found (")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is here")
def test_the_torch_engine_says_torch_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--engine", "torch", "--limit-s", "30"]) == EXIT_SKIPPED
    assert said(capsys) == [{"skipped": "PyTorch is not installed for this Python"}]


def test_the_spin_kernel_is_one_nul_terminated_ptx_entry() -> None:
    # Checked with ptxas 12.9 for sm_75 and sm_90 when written; the driver JITs it there.
    assert PTX_SPIN.endswith(b"}\n\x00") and PTX_SPIN.count(b".entry") == 1
    assert b".visible .entry zt_spin(.param .u64 zt_spin_ns)" in PTX_SPIN
