"""The CPU budget: which hierarchy holds it (parsed from /proc/mounts text), the cpu.max line,
and the file writes against a cgroup tree laid out in a temporary folder (the real kernel's
limit is proven in tests/kernel/test_cpu_budget_cgroup.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zerotrace.cpu_budget import (
    CALM_AFTER_S,
    WEIGHT_BEHIND,
    WEIGHT_KEEPING_UP,
    apply_cpu_budget,
    cgroup_path_in,
    cpu_max_line,
    v1_cpu_root,
    v2_cpu_root,
)

pytestmark = pytest.mark.unit

HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
UNIFIED = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"


def test_the_hierarchies_are_found_in_the_mounts_text() -> None:
    assert v2_cpu_root(HYBRID) == Path("/sys/fs/cgroup/unified")
    assert v1_cpu_root(HYBRID) == Path("/sys/fs/cgroup/cpu,cpuacct")  # not cpuset
    assert (v2_cpu_root(UNIFIED), v1_cpu_root(UNIFIED)) == (Path("/sys/fs/cgroup"), None)
    assert v1_cpu_root("cgroup /x cgroup rw,cpuset 0 0\n") is None


def test_a_process_cgroup_path_is_read_from_the_line_of_its_hierarchy() -> None:
    text = "9:name=systemd:/\n4:memory:/m/x\n1:cpu,cpuacct:/batch/job\n0::/user.slice/s.scope\n"
    assert cgroup_path_in(text, v1=True) == "batch/job"
    assert cgroup_path_in(text, v1=False) == "user.slice/s.scope"
    assert cgroup_path_in("0::/\n", v1=True) == ""  # none listed: the root


def test_the_quota_is_the_cores_times_the_period_and_never_below_the_kernels_minimum() -> None:
    assert cpu_max_line(0.5) == "10000 20000"
    assert cpu_max_line(2, period_us=100_000) == "200000 100000"
    assert cpu_max_line(0.001) == "1000 20000"


def fake_v2(tmp_path: Path, controllers: str = "cpu memory") -> Path:
    root = tmp_path / "cg2"
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    (tmp_path / "mounts").write_text(f"cgroup2 {root} cgroup2 rw 0 0\n")
    return root


def test_v2_enables_the_controller_writes_cpu_max_and_moves_the_process(tmp_path: Path) -> None:
    root = fake_v2(tmp_path)
    budget = apply_cpu_budget(0.5, mounts_file=tmp_path / "mounts", pid=os.getpid())
    group = root / f"zerotrace-budget-{os.getpid()}"
    assert (budget.enforced_by, budget.cgroup) == ("cgroup v2 cpu.max", group)
    assert str(group) in budget.note and "0.5 core" in budget.note
    assert (root / "cgroup.subtree_control").read_text() == "+cpu\n"
    assert (group / "cpu.max").read_text() == "10000 20000\n"
    assert (group / "cgroup.procs").read_text() == f"{os.getpid()}\n"
    assert budget.exempt(4242) is None
    assert (root / "cgroup.procs").read_text() == "4242\n"  # back where this process was


def test_a_host_without_a_cpu_controller_runs_unlimited_and_says_why(tmp_path: Path) -> None:
    fake_v2(tmp_path, controllers="hugetlb")
    budget = apply_cpu_budget(0.5, mounts_file=tmp_path / "mounts")
    assert budget.enforced_by is None and budget.cgroup is None
    assert budget.note.startswith("CPU budget 0.5 core not enforced (cgroup v2 at ")
    assert "cpu controller is not in the v2 hierarchy" in budget.note
    assert budget.exempt(1) is None
    budget.release()  # nothing to release: no error


def test_no_cgroup_at_all_or_no_budget(tmp_path: Path) -> None:
    (tmp_path / "mounts").write_text("proc /proc proc rw 0 0\n")
    assert (
        "no cgroup cpu controller is mounted"
        in apply_cpu_budget(1, mounts_file=tmp_path / "mounts").note
    )
    none = apply_cpu_budget(0, mounts_file=tmp_path / "mounts")
    assert (none.enforced_by, none.note) == (
        None,
        "CPU budget: none (--cpu-budget 0): zerotrace is not limited",
    )
    with pytest.raises(ValueError, match="cores >= 0"):
        apply_cpu_budget(-1)


def test_the_weight_is_light_while_it_keeps_up_and_normal_while_it_is_behind(
    tmp_path: Path,
) -> None:
    root = fake_v2(tmp_path)
    budget = apply_cpu_budget(0.5, mounts_file=tmp_path / "mounts", pid=os.getpid())
    assert budget.cgroup is not None
    weight = budget.cgroup / "cpu.weight"
    assert weight.read_text() == "12\n"  # an eighth of a normal task (100 in v2 units)
    budget.steer(behind=False, now=10.0)
    assert budget.weight == WEIGHT_KEEPING_UP and budget.keeping_up
    budget.steer(behind=True, now=11.0)
    assert (budget.weight, weight.read_text()) == (WEIGHT_BEHIND, "100\n")
    assert not budget.keeping_up  # the loops stop pausing (zerotrace.cpu_slices)
    budget.steer(behind=False, now=11.5)  # not calm for long enough yet
    assert budget.weight == WEIGHT_BEHIND and not budget.keeping_up
    budget.steer(behind=False, now=11.0 + CALM_AFTER_S)
    assert (budget.weight, weight.read_text()) == (WEIGHT_KEEPING_UP, "12\n")
    assert budget.keeping_up
    assert root.exists()


def test_v1_weights_are_cpu_shares(tmp_path: Path) -> None:
    root = tmp_path / "cpu"
    root.mkdir()
    (tmp_path / "mounts").write_text(f"cgroup {root} cgroup rw,cpu,cpuacct 0 0\n")
    budget = apply_cpu_budget(0.25, mounts_file=tmp_path / "mounts", pid=os.getpid())
    assert budget.cgroup is not None and budget.enforced_by == "cgroup v1 cpu.cfs_quota_us"
    assert (budget.cgroup / "cpu.cfs_quota_us").read_text() == "5000\n"
    assert (budget.cgroup / "cpu.shares").read_text() == "128\n"
    budget.steer(behind=True, now=0.0)
    assert (budget.cgroup / "cpu.shares").read_text() == "1024\n"
