"""Container ids and cgroup v2 groups (zerotrace_collector/cgroup.py), on a cgroup tree laid
out under a temporary folder: a group given as a path (absolute or below the v2 mount), its
id and level, membership of a process by its /proc/PID/cgroup line, and the per-pid cache of
container ids. The pure parsers have their cases in test_collector_records.py (container ids)
and test_socket_args.py (the v2 mount point)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zerotrace_collector import cgroup
from zerotrace_collector.cgroup import Cgroup2, ContainerIds, cgroup2_of_path, in_cgroup2

pytestmark = pytest.mark.unit


def own_cgroup_parts() -> list[str]:
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    line = next((ln for ln in lines if ln.startswith("0::")), None)
    if line is None:
        pytest.skip("this process has no cgroup v2 line (a cgroup v1 only host)")
    return [part for part in line[3:].split("/") if part]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cgroup v2 mount point that mirrors this process's own group path."""
    monkeypatch.setattr(cgroup, "_mounted_root", lambda: str(tmp_path))
    tmp_path.joinpath(*own_cgroup_parts(), "child").mkdir(parents=True, exist_ok=True)
    (tmp_path / "system.slice" / "vllm.service").mkdir(parents=True)
    return tmp_path


def test_a_group_is_its_directory_inode_and_depth(root: Path) -> None:
    group = cgroup2_of_path("system.slice/vllm.service")
    folder = root / "system.slice" / "vllm.service"
    assert group == Cgroup2(folder.stat().st_ino, 2)
    assert cgroup2_of_path(str(folder)) == group  # absolute, inside the mount
    assert cgroup2_of_path(str(root)) == Cgroup2(root.stat().st_ino, 0)


def test_a_path_outside_the_hierarchy_or_missing_is_one_line(root: Path) -> None:
    with pytest.raises(ValueError, match="is not inside the cgroup v2 hierarchy"):
        cgroup2_of_path(str(root.parent))
    with pytest.raises(ValueError, match="is not inside"):
        cgroup2_of_path("system.slice/../../elsewhere")
    with pytest.raises(ValueError, match="no cgroup directory"):
        cgroup2_of_path("system.slice/nosuch.service")


def test_without_a_v2_hierarchy_nothing_is_a_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "_mounted_root", lambda: None)
    with pytest.raises(ValueError, match="no cgroup v2 hierarchy mounted"):
        cgroup2_of_path("system.slice")
    assert not in_cgroup2(os.getpid(), Cgroup2(1, 0))


def test_a_process_is_in_its_group_and_the_groups_above_it(root: Path) -> None:
    parts = own_cgroup_parts()
    me = os.getpid()
    for level in range(len(parts) + 1):
        assert in_cgroup2(me, cgroup2_of_path(str(root.joinpath(*parts[:level]))))
    assert not in_cgroup2(me, cgroup2_of_path(str(root.joinpath(*parts, "child"))))
    assert not in_cgroup2(me, cgroup2_of_path("system.slice/vllm.service"))


def test_a_process_that_is_gone_is_in_no_group(root: Path) -> None:
    assert not in_cgroup2(2**22 + 1, cgroup2_of_path(str(root)))  # past the largest pid_max
    assert cgroup.container_id_of(2**22 + 1) is None


def test_container_ids_are_read_once_per_pid_and_bounded() -> None:
    reads: list[int] = []

    def read(pid: int) -> str | None:
        reads.append(pid)
        return None if pid == 1 else f"c{pid}"

    ids = ContainerIds(read, max_pids=2)
    assert [ids.of(5), ids.of(5), ids.of(1), ids.of(1)] == ["c5", "c5", None, None]
    assert reads == [5, 1]  # a process without a container is remembered too
    ids.of(9)  # past the bound: the cache starts over
    ids.of(5)
    assert reads == [5, 1, 9, 5]
    ids.forget(5)
    ids.forget(42)  # unknown: harmless
    ids.of(5)
    assert reads == [5, 1, 9, 5, 5]
