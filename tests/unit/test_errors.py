"""The error classes (STYLE.md rule 7), both errors.py modules: the shared hierarchy in
zerotrace.errors, one class per way of handling, and the collector's own errors in
zerotrace_collector.errors, each a kind of a shared one, so a handler written against the
shared classes catches them and the CLI prints them as one line."""

from __future__ import annotations

import pytest

from zerotrace import errors
from zerotrace_cli import main
from zerotrace_collector import errors as collector_errors

pytestmark = pytest.mark.unit

SHARED = (
    errors.ConfigError,
    errors.PoisonInput,
    errors.TransientIO,
    errors.Backpressure,
    errors.FeatureUnavailable,
)


def test_every_shared_error_is_a_zerotrace_error_and_no_other_shared_one() -> None:
    for cls in SHARED:
        assert issubclass(cls, errors.ZerotraceError)
        assert [other for other in SHARED if other is not cls and issubclass(cls, other)] == []
    assert issubclass(errors.ZerotraceError, Exception)


def test_poison_input_keeps_its_reason_for_the_dead_letter_topic() -> None:
    exc = errors.PoisonInput("unknown schema fingerprint 0011")
    assert exc.reason == "unknown schema fingerprint 0011" == str(exc)


def test_a_malformed_event_is_poison_and_still_a_value_error() -> None:
    exc = collector_errors.MalformedEvent("8 bytes, a FileOpen event needs 280")
    assert isinstance(exc, errors.PoisonInput) and isinstance(exc, ValueError)
    assert exc.reason == "8 bytes, a FileOpen event needs 280"
    with pytest.raises(ValueError):  # `except ValueError` around a decode keeps working
        raise exc


def test_a_probe_that_cannot_run_is_a_missing_feature() -> None:
    assert issubclass(collector_errors.ProbeUnavailable, errors.FeatureUnavailable)
    assert not issubclass(collector_errors.ProbeUnavailable, errors.PoisonInput)
    assert sorted(collector_errors.__all__) == ["MalformedEvent", "ProbeUnavailable"]


def test_the_cli_says_a_collector_error_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(args: object) -> int:
        raise collector_errors.ProbeUnavailable("tracepoint syscalls/sys_enter_openat missing")

    monkeypatch.setattr("zerotrace_cli.service_cmds.show_settings", refuse)
    assert main(["settings"]) == 1
    err = capsys.readouterr().err
    assert err == "zerotrace: tracepoint syscalls/sys_enter_openat missing\n"
