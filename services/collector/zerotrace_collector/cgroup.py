"""Container ids from /proc/PID/cgroup (read, then parse: `container_id_from_cgroup` is pure),
and cgroup v2 ids: the inode of a cgroup's directory, which is what BPF's
bpf_get_current_cgroup_id() returns. The v2 hierarchy is mounted at /sys/fs/cgroup on a
unified host and elsewhere (often /sys/fs/cgroup/unified) on a hybrid one, so its mount point
is looked up in /proc/mounts (`cgroup2_root` is pure)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>, /docker/<id>, /kubepods/.../<id>
_CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?(?:/|$)")


def container_id_from_cgroup(text: str) -> str | None:
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        match = _CONTAINER_ID.search(path)
        if match:
            return match.group(1)
    return None


def container_id_of(pid: int) -> str | None:
    try:
        return container_id_from_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return None  # the process exited; the event is kept without a container id


def cgroup2_root(mounts_text: str) -> str | None:
    """Where the cgroup v2 hierarchy is mounted, from a /proc/mounts text."""
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return fields[1]
    return None


@functools.lru_cache(maxsize=1)
def _mounted_root() -> str | None:
    # Read once: a host does not move its cgroup v2 hierarchy while we run.
    try:
        return cgroup2_root(Path("/proc/mounts").read_text())
    except OSError:
        return None


@dataclass(frozen=True)
class Cgroup2:
    """A cgroup v2 directory as a filter needs it: its id (the directory's inode, which BPF's
    cgroup helpers return) and its level below the root (the root is level 0)."""

    id: int
    level: int


def cgroup2_of_path(path: str) -> Cgroup2:
    """The cgroup v2 directory given as an absolute path, or relative to the v2 mount point
    (``system.slice/vllm.service``). Raises ValueError with one line."""
    root = _mounted_root()
    if root is None:
        raise ValueError("this host has no cgroup v2 hierarchy mounted (see /proc/mounts)")
    real_root = os.path.realpath(root)
    full = os.path.realpath(path if path.startswith("/") else os.path.join(root, path))
    if os.path.commonpath([full, real_root]) != real_root:
        raise ValueError(f"{path} is not inside the cgroup v2 hierarchy at {root}")
    if not os.path.isdir(full):
        raise ValueError(f"no cgroup directory {full}")
    level = len(Path(full).relative_to(real_root).parts)
    return Cgroup2(os.stat(full).st_ino, level)


def in_cgroup2(pid: int, group: Cgroup2) -> bool:
    """Whether *pid* is in *group* or below it (False when it exited or cannot be told)."""
    root = _mounted_root()
    if root is None:
        return False
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                parts = [part for part in line[3:].split("/") if part]
                if len(parts) < group.level:
                    return False
                ancestor = os.path.join(root, *parts[: group.level])
                return os.stat(ancestor).st_ino == group.id
    except OSError:
        return False
    return False


class ContainerIds:
    """Container id per pid, read once; bounded (cleared past max_pids: cheap to read again)."""

    def __init__(self, read: Callable[[int], str | None] = container_id_of, max_pids: int = 65_536):
        self._read = read
        self._max_pids = max_pids
        self._ids: dict[int, str | None] = {}

    def of(self, pid: int) -> str | None:
        if pid not in self._ids:
            if len(self._ids) >= self._max_pids:
                self._ids.clear()
            self._ids[pid] = self._read(pid)
        return self._ids[pid]

    def forget(self, pid: int) -> None:
        self._ids.pop(pid, None)
