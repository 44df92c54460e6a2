"""bench/replay_rate.py on a small input: it prints the raw log's cost line and the replay
line, and the replay derives one LLM request per conversation (the timings are not asserted)."""

from __future__ import annotations

import re
import sys

import pytest

from bench import replay_rate

pytestmark = pytest.mark.unit


def test_the_bench_prints_the_cost_and_the_rate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["replay_rate", "--conversations", "20"])
    replay_rate.main()
    out = capsys.readouterr().out
    assert re.search(r"with the raw log [\d.]+ µs/message: \+-?[\d.]+ µs", out), out
    assert re.search(r"raw log on disk: \d+ bytes/message", out), out
    # 20 conversations: one span and one LLM request each, and the profile windows.
    found = re.search(r"replay: ([\d,]+) raw events -> ([\d,]+) records", out)
    assert found, out
    assert int(found.group(2).replace(",", "")) > 40
