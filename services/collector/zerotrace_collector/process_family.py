"""A process and its descendants, found through /proc as their events arrive (read, then
parse: `ppid_from_stat` is pure). Used to observe a command `zerotrace run` started."""

from __future__ import annotations

from pathlib import Path


def ppid_from_stat(text: str) -> int:
    """The parent pid in /proc/PID/stat. The command name may hold spaces and parentheses,
    so fields are counted from the last ')'."""
    return int(text.rsplit(")", 1)[1].split()[1])


class ProcessFamily:
    def __init__(self, root_pid: int, proc: Path = Path("/proc")) -> None:
        self._proc = proc
        self._members = {root_pid}
        self._strangers: set[int] = set()

    def contains(self, pid: int) -> bool:
        if pid in self._members:
            return True
        if pid in self._strangers:
            return False
        chain, current = [], pid
        while current > 1 and current not in self._members:
            chain.append(current)
            try:
                current = ppid_from_stat((self._proc / str(current) / "stat").read_text())
            except (OSError, ValueError, IndexError):
                break  # exited before we looked: cannot tell; leave it out
        inside = current in self._members
        (self._members if inside else self._strangers).update(chain)
        return inside
