"""Container ids from /proc/PID/cgroup (read, then parse: `container_id_from_cgroup` is pure),
and cgroup v2 ids: the inode of a cgroup's directory, which is what BPF's
bpf_get_current_cgroup_id() returns. The v2 hierarchy is mounted at /sys/fs/cgroup on a
unified host and elsewhere (often /sys/fs/cgroup/unified) on a hybrid one, so its mount point
is looked up in /proc/mounts (`cgroup2_root` is pure)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
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


def _mounted_root() -> str | None:
    try:
        return cgroup2_root(Path("/proc/mounts").read_text())
    except OSError:
        return None


def cgroup2_id_of(pid: int) -> int | None:
    """The cgroup v2 id of *pid* (None when it exited or the host has no v2 hierarchy)."""
    root = _mounted_root()
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::") and root is not None:
                return os.stat(root + line[3:].rstrip("\n")).st_ino
    except OSError:
        return None
    return None


def cgroup2_id_of_path(path: str) -> int:
    """The id of a cgroup v2 directory given as an absolute path, or relative to the v2
    mount point (``system.slice/vllm.service``). Raises ValueError with one line."""
    root = _mounted_root()
    if root is None:
        raise ValueError("this host has no cgroup v2 hierarchy mounted (see /proc/mounts)")
    full = path if path.startswith("/") else os.path.join(root, path)
    real_root = os.path.realpath(root)
    if os.path.commonpath([os.path.realpath(full), real_root]) != real_root:
        raise ValueError(f"{path} is not inside the cgroup v2 hierarchy at {root}")
    try:
        return os.stat(full).st_ino
    except OSError as exc:
        raise ValueError(f"no cgroup {full}: {exc.strerror}") from None


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
