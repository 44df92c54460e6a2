"""Container ids from /proc/PID/cgroup (read, then parse: `container_id_from_cgroup` is pure)."""

from __future__ import annotations

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
