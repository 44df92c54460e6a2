"""Running a vendor CLI: stdout back, one-line SmiRunError for a missing tool, a failure with
no output, or a time limit passed; output kept despite a non-zero exit."""

from __future__ import annotations

import sys

import pytest

from zerotrace.errors import TransientIO
from zerotrace_collector.smi_cli import SmiRunError, find_tool, run_tool

pytestmark = pytest.mark.unit

PY = sys.executable


def test_stdout_back() -> None:
    assert run_tool([PY, "-c", "print('[{\"gpu\": 0}]')"]) == '[{"gpu": 0}]\n'


def test_output_kept_despite_a_failing_exit() -> None:
    code = "import sys; print('partial'); sys.exit(1)"
    assert run_tool([PY, "-c", code]) == "partial\n"


def test_failure_without_output_says_the_last_stderr_line() -> None:
    code = "import sys; sys.stderr.write('x\\nAMDSMI_STATUS_DRM_ERROR\\n'); sys.exit(2)"
    with pytest.raises(SmiRunError, match=r"AMDSMI_STATUS_DRM_ERROR$") as info:
        run_tool([PY, "-c", code])
    assert isinstance(info.value, TransientIO)


def test_missing_tool_and_time_limit() -> None:
    with pytest.raises(SmiRunError, match=r"^/nonexistent/npu-smi: not found$"):
        run_tool(["/nonexistent/npu-smi", "info"])
    with pytest.raises(SmiRunError, match=r"no answer in 0\.2 s$"):
        run_tool([PY, "-c", "import time; time.sleep(5)"], timeout_s=0.2)


def test_find_tool_uses_which() -> None:
    assert find_tool("amd-smi", lambda name: f"/opt/rocm/bin/{name}") == "/opt/rocm/bin/amd-smi"
    assert find_tool("amd-smi", lambda name: None) is None
