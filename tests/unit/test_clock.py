"""Injected time (lib/zerotrace/clock.py): the manual clock moves only when told, the system
clock reads epoch nanoseconds; both are the Clock a step or a shell is handed."""

from __future__ import annotations

import time

import pytest

from zerotrace.clock import Clock, ManualClock, SystemClock

pytestmark = pytest.mark.unit


def test_a_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(1_000)
    assert clock.now_ns() == clock.now_ns() == 1_000
    clock.advance(250)
    clock.advance(0)
    assert clock.now_ns() == 1_250
    assert ManualClock().now_ns() == 0


def test_the_system_clock_reads_nanoseconds_since_the_epoch() -> None:
    before = time.time_ns()
    now = SystemClock().now_ns()
    after = time.time_ns()
    assert before <= now <= after
    assert now > 1_600_000_000 * 10**9  # ns, not seconds or ms


def test_both_are_clocks() -> None:
    clocks: list[Clock] = [ManualClock(5), SystemClock()]
    assert all(isinstance(c.now_ns(), int) for c in clocks)
