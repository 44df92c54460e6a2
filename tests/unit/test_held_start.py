"""A command started held before its first instruction (zerotrace_cli/held_start.py): its pid
is known while it waits, it does nothing until released, then it runs as that same pid with
its own arguments, and without the waiter's pipe."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from zerotrace_cli.held_start import HeldCommand

pytestmark = pytest.mark.unit


def test_nothing_runs_until_release_then_the_command_runs_as_that_pid(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = f'echo "$$ $1 $2" > {marker}; ls /proc/$$/fd > {tmp_path / "fds"}'
    held = HeldCommand(["/bin/sh", "-c", script, "sh", "first arg", "second"])
    try:
        time.sleep(0.2)
        assert held.proc.poll() is None and not marker.exists()  # waiting, not running
        assert held.pid == held.proc.pid
        held.release()
        held.release()  # idempotent
        assert held.proc.wait(timeout=10) == 0
    finally:
        if held.proc.poll() is None:
            held.proc.kill()
            held.proc.wait()
    assert marker.read_text() == f"{held.pid} first arg second\n"  # exec'd: the same pid
    assert "3" not in (tmp_path / "fds").read_text().split()  # the waiter's pipe was closed


def test_the_exit_code_is_the_commands() -> None:
    held = HeldCommand(["/bin/sh", "-c", "exit 7"])
    held.release()
    assert held.proc.wait(timeout=10) == 7


def test_a_command_that_died_held_is_released_without_an_error() -> None:
    held = HeldCommand(["true"])
    held.proc.kill()
    held.proc.wait(timeout=10)
    held.release()
    held.release()  # idempotent
