"""The GPU probe's stop guard: which processes it continues, and when (stop_guard.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from zerotrace_collector.probes.stop_guard import exiting, held_for_cuda, release_held, stopped

pytestmark = pytest.mark.unit

RUNNING = "42 (python3) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5 1000 200"
STOPPED = RUNNING.replace(") S ", ") T ")
DYING = "42 (a) b) S 1 42 42 0 -1 4194564 100"  # PF_EXITING (0x4) in the flags; `)` in a name


def test_a_stopped_process_and_a_dying_one_are_told_from_their_stat() -> None:
    assert stopped(STOPPED) and not stopped(RUNNING)
    assert exiting(DYING) and not exiting(RUNNING)
    assert exiting(None)  # gone
    assert exiting(RUNNING.replace(") S ", ") Z "))


def test_only_an_open_cuda_library_marks_a_process_held_for_the_probe() -> None:
    assert held_for_cuda(["/dev/null", "/opt/cuda/lib64/libcudart.so.12.4"])
    assert held_for_cuda(["/usr/lib/x86_64-linux-gnu/libcuda.so.1"])
    assert not held_for_cuda(["/usr/lib/libcudnn.so.9", "/tmp/libcuda_helper.py", "socket:[1]"])


def test_release_continues_the_stopped_holders_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def process(pid: int, stat: str, files: list[str]) -> None:
        (tmp_path / str(pid) / "fd").mkdir(parents=True)
        (tmp_path / str(pid) / "stat").write_text(stat)
        for i, target in enumerate(files):
            os.symlink(target, tmp_path / str(pid) / "fd" / str(i))

    process(10, STOPPED, ["/x/libcudart.so.12"])  # held by the probe
    process(11, STOPPED, ["/dev/null"])  # stopped by someone else (Ctrl-Z)
    process(12, RUNNING, ["/x/libcuda.so.1"])  # loading, not stopped
    (tmp_path / "self").mkdir()
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    assert release_held(tmp_path) == [10]
    assert sent == [(10, signal.SIGCONT)]
