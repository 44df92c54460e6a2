"""`zerotrace export`'s argument handling (cli/zerotrace_cli/export_cmd.py): the time forms the
other commands take plus ns, `--from -1h` read as a time, arguments that do not go together
refused in one line, --records checked, and the trace formats handed to the modules that own
them (imported when asked for; a clear line while one is missing)."""

from __future__ import annotations

import argparse
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from zerotrace.errors import ConfigError
from zerotrace_cli import build_parser
from zerotrace_cli.export_cmd import (
    _trace_export,
    check_args,
    iso,
    records_of,
    time_ns,
    window_ns,
)
from zerotrace_query.parquet_export import EDGE_RECORDS, LLM_RECORDS, SPAN_RECORDS

pytestmark = pytest.mark.unit
S = 1_000_000_000
NOW = 1_796_515_080 * S + 123_456_789  # 2026-12-05T23:58:00.123456789Z


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["export", *argv])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW // 1_000_000 * 1_000_000),
        ("-15m", NOW // 1_000_000 * 1_000_000 - 900 * S),
        ("-1.5h", NOW // 1_000_000 * 1_000_000 - 5400 * S),
        ("1796515080", 1_796_515_080 * S),
        ("1796515080.5", 1_796_515_080 * S + S // 2),
        ("1796515080123", 1_796_515_080_123_000_000),
        ("1796515080123456789", 1_796_515_080_123_456_789),
        ("2026-12-05T23:58:00Z", 1_796_515_080 * S),
        ("2026-12-05T23:58:00", 1_796_515_080 * S),
        ("2026-12-06T00:58:00+01:00", 1_796_515_080 * S),
    ],
)
def test_time_forms(text: str, expected: int) -> None:
    assert time_ns(text, NOW) == expected


def test_a_bad_time_or_window_is_one_clear_line() -> None:
    with pytest.raises(ConfigError, match="cannot read the time 'yesterday'"):
        time_ns("yesterday", NOW)
    with pytest.raises(ConfigError, match=r"--to \(2026-12-05T23:58:00.000Z\) must be later"):
        window_ns("2026-12-05T23:58:00Z", "2026-12-05T23:58:00Z", NOW)
    assert window_ns("-1h", "now", NOW)[1] - window_ns("-1h", "now", NOW)[0] == 3600 * S
    assert iso(1_796_515_080 * S + 5_000_000) == "2026-12-05T23:58:00.005Z"


def test_relative_times_are_values_not_options() -> None:
    args = parse("--format", "parquet", "--from", "-1h", "--to", "-30m", "lake")
    assert (args.start, args.end, args.folder) == ("-1h", "-30m", Path("lake"))
    assert parse("--format", "zipkin", "--endpoint", "http://z", "--from", "-.5d").start == "-.5d"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--format", "parquet", "--from", "-1h"], "give the folder"),
        (["--format", "parquet", "--from", "-1h", "--endpoint", "x", "d"], "--endpoint is not"),
        (["--format", "pyroscope", "--from", "-1h"], "give --endpoint URL"),
        (["--format", "zipkin", "--from", "-1h", "--endpoint", "x", "d"], "writes no files"),
        (
            ["--format", "pyroscope", "--from", "-1h", "--endpoint", "x", "--sample-hz", "0"],
            "--sample-hz must be positive",
        ),
    ],
)
def test_arguments_that_do_not_go_together(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_args(parse(*argv))


def test_records_are_checked_and_kept_in_the_export_order() -> None:
    assert records_of("trace-edges, spans") == [SPAN_RECORDS, EDGE_RECORDS]
    assert records_of("llm") == [LLM_RECORDS]
    with pytest.raises(ConfigError, match="--records: unknown record type 'logs'"):
        records_of("spans,logs")
    with pytest.raises(ConfigError, match="name at least one"):
        records_of(" , ")


@dataclass
class Sent:
    spans: int

    def summary(self) -> str:
        return f"sent {self.spans} spans"


def test_trace_formats_go_to_their_modules(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[Any, ...]] = []
    for name in ("zerotrace_query.otlp_export", "zerotrace_query.zipkin_export"):

        def export_window(*args: Any, _module: str = name) -> Sent:
            calls.append((_module, *args))
            return Sent(7)

        module = types.ModuleType(name)
        module.export_window = export_window  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)
    store = object()
    for fmt in ("otlp-grpc", "otlp-http", "zipkin"):
        args = parse("--format", fmt, "--endpoint", "http://h:1", "--from", "-1h")
        assert _trace_export(store, args, 10, 20) == 0  # type: ignore[arg-type]
    assert calls == [
        ("zerotrace_query.otlp_export", store, 10, 20, "http://h:1", "grpc"),
        ("zerotrace_query.otlp_export", store, 10, 20, "http://h:1", "http"),
        ("zerotrace_query.zipkin_export", store, 10, 20, "http://h:1"),
    ]
    assert capsys.readouterr().out == "sent 7 spans\n" * 3


def test_a_trace_format_whose_module_is_missing_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "zerotrace_query.zipkin_export", None)
    args = parse("--format", "zipkin", "--endpoint", "http://h:1", "--from", "-1h")
    with pytest.raises(ConfigError, match="--format zipkin is not in this build"):
        _trace_export(object(), args, 10, 20)  # type: ignore[arg-type]
