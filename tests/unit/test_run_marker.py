"""A collector's sign of life, and the gap a killed one leaves (run_marker.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zerotrace.run_marker import BEAT_S, RunMarker, gap_line

pytestmark = pytest.mark.unit


def test_a_clean_stop_leaves_no_gap_and_a_kill_leaves_one(tmp_path: Path) -> None:
    now = [1000.0]
    first = RunMarker(tmp_path, lambda: now[0])
    assert first.previous() is None  # the first run on the node
    first.beat()
    first.clear()
    assert RunMarker(tmp_path, lambda: now[0]).previous() is None
    first.beat()  # a run that is then killed: its marker stays
    now[0] += 30
    line = RunMarker(tmp_path, lambda: now[0]).previous()
    assert line is not None and f"pid {os.getpid()}" in line and "30 s ago" in line


def test_beats_are_written_at_most_every_beat_s(tmp_path: Path) -> None:
    now = [0.0]
    marker = RunMarker(tmp_path, lambda: now[0])
    marker.beat()
    (tmp_path / "running").write_text("1 0.0")
    now[0] += BEAT_S / 2
    marker.beat()
    assert (tmp_path / "running").read_text() == "1 0.0"  # not rewritten yet
    now[0] += BEAT_S
    marker.beat()
    assert (tmp_path / "running").read_text().endswith(f" {now[0]:.3f}")


def test_a_marker_that_cannot_be_read_says_nothing() -> None:
    assert gap_line("garbage", 5.0) is None
    assert gap_line("12 x", 5.0) is None
    assert gap_line("12 3.5", 5.0) is not None


def test_a_beat_the_disk_refuses_is_skipped_not_raised(tmp_path: Path) -> None:
    """A full spool disk must not stop the collector: the last beat stays."""
    now = [0.0]
    marker = RunMarker(tmp_path, lambda: now[0])
    marker.beat()
    (tmp_path / "running.new").mkdir()  # the next write fails (OSError), as a full disk's
    now[0] += BEAT_S
    marker.beat()
    assert (tmp_path / "running").read_text().endswith(" 0.000")
