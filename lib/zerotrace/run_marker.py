"""A collector's sign of life in its spool folder, so the next run on the node can tell a clean
stop from a kill and say how long nothing was observed (the gap).

While it runs, the collector rewrites ``running`` (its pid and the wall time) at most every
BEAT_S; a clean stop removes it. A run that finds the file from another pid was killed (or
its machine stopped): the events between that run's last beat and this start were never
observed, and this run says so in one line. What that run had handed to its spool is not lost:
the spool is sent first (spool_file.py). Wall time, because the gap is read across processes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = ["BEAT_S", "RunMarker", "gap_line"]

BEAT_S: Final = 2.0
NAME: Final = "running"


def gap_line(text: str, now_s: float) -> str | None:
    """The line to say about a previous run's marker *text* (`pid wall_s`), or None when it
    cannot be read."""
    try:
        pid_text, beat_text = text.split()
        pid, beat = int(pid_text), float(beat_text)
    except ValueError:
        return None
    return (
        f"the previous run (pid {pid}) did not stop cleanly (killed?): nothing was observed "
        f"from its last sign of life {max(0.0, now_s - beat):.0f} s ago (within {BEAT_S:.0f} s) "
        "until now; what it had spooled is sent first"
    )


class RunMarker:
    def __init__(self, folder: Path, wall: Callable[[], float]) -> None:
        self._path = folder / NAME
        self._wall = wall
        self._next = 0.0

    def previous(self) -> str | None:
        """One line about the gap a killed previous run left, or None (none, or clean)."""
        try:
            text = self._path.read_text()
        except OSError:
            return None
        return gap_line(text, self._wall())

    def beat(self) -> None:
        """This run is alive (cheap when called often: writes at most every BEAT_S)."""
        now = self._wall()
        if now < self._next:
            return
        self._next = now + BEAT_S
        temp = self._path.with_name(NAME + ".new")
        try:
            temp.write_text(f"{os.getpid()} {now:.3f}")
            os.replace(temp, self._path)  # whole or not at all, even if killed mid-write
        except OSError:
            # The spool's disk is full: the last beat stays (a gap would be said as longer
            # than it was), and the collector goes on observing.
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)

    def clear(self) -> None:
        """A clean stop: the next run finds no gap."""
        self._path.unlink(missing_ok=True)
        self._next = 0.0
