"""`zerotrace run` (zerotrace_cli/run_cmd.py) up to the point where it would need root: its
arguments and defaults, and the hidden --ebpf flag, which prints the programs that a command
to observe, a --pid or neither would attach (following in the kernel only when there is a
process to follow). Running it attached is tests/kernel/test_embedded_slice.py's."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from zerotrace.errors import FeatureUnavailable, TransientIO
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


class _Budget:
    note = "budget: held (stand-in)"

    def __init__(self) -> None:
        self.released = 0

    def release(self) -> None:
        self.released += 1


class _FeedsThatCannotAttach:
    names = "socket"

    def attach(self) -> list[str]:
        raise FeatureUnavailable("socket probe: the kernel has no syscall tracepoints")


@pytest.mark.parametrize("command", ["run", "collector"])
def test_a_failure_after_the_budget_is_held_releases_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """The budget's cgroup goes however the command ends: here the probes cannot attach (run)
    or Kafka is away (collector), one line each, and no empty cgroup is left behind."""
    budget = _Budget()
    monkeypatch.setattr(f"zerotrace_cli.{command}_cmd.hold_budget", lambda *_: budget)
    monkeypatch.setattr("zerotrace_collector.collector.require_root", lambda: None)
    monkeypatch.setattr(
        "zerotrace_cli.node_feeds.node_feeds", lambda *a, **k: _FeedsThatCannotAttach()
    )

    def kafka_away(_common: object) -> None:
        raise TransientIO("Kafka at 127.0.0.1:1 is not reachable")

    monkeypatch.setattr("zerotrace_cli.collector_cmd.kafka_bus", kafka_away)
    assert main([command, "--port", "8000"]) != 0
    assert budget.released == 1
    said = capsys.readouterr().err
    assert ("no syscall tracepoints" if command == "run" else "not reachable") in said
