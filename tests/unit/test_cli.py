"""The CLI teaches: --help of every command says what it does, and settings are listed."""

from __future__ import annotations

import pytest

from zerotrace import settings
from zerotrace.errors import ConfigError
from zerotrace_cli import main


def test_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for command in ("run", "collector", "correlator", "profiler-agg", "query", "infra", "spans"):
        assert command in out
    assert "zerotrace run -- python train.py" in out


@pytest.mark.parametrize("command", ["run", "infra", "collector", "query", "topics"])
def test_each_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "usage: zerotrace" in capsys.readouterr().out


def test_hidden_ebpf_flag_prints_the_program(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--ebpf", "--pid", "42"]) == 0
    text = capsys.readouterr().out
    assert "-DZT_FILTER_PID=42" in text
    assert "TRACEPOINT_PROBE(syscalls, sys_enter_openat)" in text


def test_settings_come_from_the_environment_and_hide_secrets() -> None:
    common = settings.load(
        settings.CommonSettings,
        {
            "ZEROTRACE_KAFKA": "k:1",
            "ZEROTRACE_KAFKA_PORT": "9999",
            "ZEROTRACE_OPENSEARCH_PASSWORD": "hunter2",
        },
    )
    assert common.kafka == "k:1" and common.kafka_port == 9999
    lines = settings.describe(common)
    assert "ZEROTRACE_OPENSEARCH_PASSWORD=***  # OpenSearch password, when security is on." in lines
    assert not any("hunter2" in line for line in lines)
    with pytest.raises(ConfigError, match="ZEROTRACE_KAFKA_PORT='x' is not a valid int"):
        settings.load(settings.CommonSettings, {"ZEROTRACE_KAFKA_PORT": "x"})


def test_a_bad_setting_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZEROTRACE_KAFKA_PORT", "not-a-port")
    assert main(["infra", "status"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "zerotrace: ZEROTRACE_KAFKA_PORT='not-a-port' is not a valid int"
