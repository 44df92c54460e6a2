"""What zerotrace itself costs (zerotrace/self_cost.py): CPU seconds parsed from
/proc/<pid>/stat text (a comm with spaces and parentheses included), RSS and its peak from
/proc/<pid>/status text, the one line a person reads (with and without a budget, enforced or
not), and the reader against a folder laid out like /proc/self and against the real one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zerotrace.cpu_budget import CpuBudget
from zerotrace.self_cost import CostSnapshot, SelfCost, cost_line, cpu_seconds, memory_bytes

pytestmark = pytest.mark.unit

# utime 1234 and stime 66 ticks, a comm that would fool a plain split.
STAT = (
    "4242 (python3 (a) b) S 1 4242 4242 0 -1 4194560 9000 0 3 0 1234 66 0 0 20 0 7 0 "
    "1048423 3133440 360 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
)
STATUS = """\
Name:\tpython3
VmPeak:\t  900000 kB
VmHWM:\t  215040 kB
VmRSS:\t  184320 kB
Threads:\t7
"""


def test_cpu_seconds_are_user_plus_system_ticks() -> None:
    assert cpu_seconds(STAT, 100) == pytest.approx(13.0)
    assert cpu_seconds(STAT, 250) == pytest.approx(5.2)
    with pytest.raises(ValueError, match="not /proc/<pid>/stat text"):
        cpu_seconds("4242 (cut short) S 1", 100)


def test_rss_and_its_peak_in_bytes() -> None:
    assert memory_bytes(STATUS) == (180 * 1024 * 1024, 210 * 1024 * 1024)
    assert memory_bytes("Name:\tkthreadd\n") == (0, 0)  # a kernel thread has no Vm lines


def test_the_line_says_cpu_cores_budget_memory_and_rates() -> None:
    cost = CostSnapshot(12.3, 60.0, 180 * 1024 * 1024, 210 * 1024 * 1024, start_cpu_s=4.06)
    budget = CpuBudget(0.5, "cgroup v1 cpu.cfs_quota_us", "")
    assert cost_line(cost, budget, [("in", 1234.4), ("out", 1200.0)]) == (
        "zerotrace itself: 12.3 s CPU over 60.0 s (0.21 core; budget 0.5 core, cgroup v1 "
        "cpu.cfs_quota_us) plus 4.1 s starting, RSS 180 MiB (peak 210 MiB); events in 1,234/s, "
        "out 1,200/s"
    )


def test_without_a_budget_or_an_enforced_one_the_line_says_so() -> None:
    cost = CostSnapshot(0.5, 10.0, 50 * 1024 * 1024, 60 * 1024 * 1024)
    assert cost_line(cost, label="status") == (
        "status: 0.5 s CPU over 10.0 s (0.05 core), RSS 50 MiB (peak 60 MiB)"
    )
    unheld = CpuBudget(0.5, None, "not enforced (no cgroup)")
    assert "(0.05 core; budget 0.5 core, not enforced)," in cost_line(cost, unheld)
    assert "(0.05 core; no budget)," in cost_line(cost, CpuBudget(0, None, ""))
    assert cost_line(cost, events=[("published", 2.5)]).endswith("; events published 2.5/s")
    assert CostSnapshot(0, 0, 0, 0).cores == 0  # no time passed yet: no division by zero


def test_an_interval_is_the_difference_with_memory_as_of_now() -> None:
    earlier = CostSnapshot(2.0, 10.0, 100, 100, start_cpu_s=3.0)
    later = CostSnapshot(3.5, 20.0, 80, 120, start_cpu_s=3.0)
    assert later.since(earlier) == CostSnapshot(1.5, 10.0, 80, 120)


def test_the_reader_counts_from_when_it_was_made(tmp_path: Path) -> None:
    now = [100.0]
    (tmp_path / "stat").write_text(STAT)
    (tmp_path / "status").write_text(STATUS)
    cost = SelfCost(lambda: now[0], proc_dir=tmp_path, ticks_per_s=100)
    (tmp_path / "stat").write_text(STAT.replace(" 1234 66 ", " 1534 86 "))
    now[0] = 132.0
    assert cost.wall_s == 32.0
    snap = cost.snapshot()
    assert snap.cpu_s == pytest.approx(3.2) and snap.start_cpu_s == 13.0
    assert (snap.wall_s, snap.rss_bytes, snap.peak_rss_bytes) == (32.0, 180 << 20, 210 << 20)
    assert snap.cores == pytest.approx(0.1)


def test_the_reader_on_this_process() -> None:
    now = [0.0]
    cost = SelfCost(lambda: now[0])
    sum(i * i for i in range(300_000))  # some CPU time, a tick or a few
    now[0] = 1.0
    snap = cost.snapshot()
    used = os.times()
    assert 0 <= snap.cpu_s <= used.user + used.system
    assert snap.start_cpu_s > 0  # imports alone took more than a tick
    assert 0 < snap.rss_bytes <= snap.peak_rss_bytes
    assert snap.wall_s == 1.0
