"""`zerotrace run` (zerotrace_cli/run_cmd.py) up to the point where it would need root: its
arguments and defaults, and the hidden --ebpf flag, which prints the programs that a command
to observe, a --pid or neither would attach (following in the kernel only when there is a
process to follow). Running it attached is tests/kernel/test_embedded_slice.py's."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from zerotrace_cli import build_parser, main

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def test_the_defaults_observe_the_machine_within_the_budget_setting() -> None:
    args = parse()
    assert (args.duration, args.pid, args.port, args.command) == (0, 0, [], [])
    assert (args.http_port, args.grpc_port, args.store) == (8080, 50051, None)
    # None: the budget comes from $ZEROTRACE_CPU_BUDGET (0.5 core unless set).
    assert (args.cpu_budget, args.quiet, args.lines, args.profile) == (None, False, False, False)
    assert parse("--cpu-budget", "1.5").cpu_budget == 1.5


def test_everything_after_the_separator_is_the_command() -> None:
    args = parse("--port", "8000", "--port", "8001", "--", "python3", "serve.py", "--port", "9")
    assert args.port == [8000, 8001]
    assert args.command == ["--", "python3", "serve.py", "--port", "9"]
    assert parse("--store", "/tmp/x.duckdb").store == Path("/tmp/x.duckdb")
    for wrong in ("-1", "half", "nan"):
        with pytest.raises(SystemExit):
            parse("--cpu-budget", wrong)


def programs(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["run", "--ebpf", *argv]) == 0
    return capsys.readouterr().out


def test_ebpf_follows_in_the_kernel_only_a_command_or_a_pid(
    capsys: pytest.CaptureFixture[str],
) -> None:
    machine = programs(capsys)
    assert machine.count("/* bcc cflags: ") == 2  # sockets and file opens
    assert "-DZT_FOLLOW=0" in machine and "-DZT_FOLLOW=1" not in machine
    command = programs(capsys, "--", "python3", "train.py")
    assert "-DZT_FOLLOW=1" in command
    assert "-DZT_FOLLOW=1" in programs(capsys, "--pid", "42")


def test_ebpf_with_profile_adds_the_profilers_and_leaves_out_what_is_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert programs(capsys, "--profile").count("/* bcc cflags: ") == 4  # gpu, profile too
    text = programs(capsys, "--profile", "--no-gpu", "--no-files", "--no-tls")
    assert text.count("/* bcc cflags: ") == 2
    assert "-DZT_CAPTURE_TLS=0" in text
