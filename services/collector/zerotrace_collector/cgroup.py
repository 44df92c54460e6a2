"""Container ids from /proc/PID/cgroup (read, then parse: `container_id_from_cgroup` is pure)."""

from __future__ import annotations

import re
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
