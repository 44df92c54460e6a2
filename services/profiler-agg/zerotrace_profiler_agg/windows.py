"""Tumbling-window fold of stack samples into folded stacks (pure, event time).

A window [start, start + width) of one (node, service, profile type) closes when a sample of
that key arrives at or past start + width + lateness; later samples for a closed window are
counted as late and dropped (they would change a record already emitted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

WindowKey = tuple[str, str, str, int]  # node, service, profile type, window start


@dataclass
class _Open:
    stacks: dict[str, int] = field(default_factory=dict)
    samples: int = 0


class WindowFolder:
    def __init__(self, width_ns: int = 10_000_000_000, lateness_ns: int = 2_000_000_000) -> None:
        self.width_ns = width_ns
        self.lateness_ns = lateness_ns
        self._open: dict[WindowKey, _Open] = {}
        self._watermark: dict[tuple[str, str, str], int] = {}
        self.late_samples = 0

    def add(self, sample: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Fold one raw.stack record; returns the derived.profile records it closed."""
        series = (sample["node_id"], sample["process_name"], sample["profile_type"])
        ts = int(sample["ts_ns"])
        start = ts - ts % self.width_ns
        mark = max(self._watermark.get(series, ts), ts)
        self._watermark[series] = mark
        if start + self.width_ns + self.lateness_ns <= mark:
            self.late_samples += 1
        else:
            window = self._open.setdefault((*series, start), _Open())
            folded = ";".join(sample["frames"]) or "[unknown]"
            window.stacks[folded] = window.stacks.get(folded, 0) + int(sample["weight"])
            window.samples += 1
        return self._close(
            lambda key: key[:3] == series and key[3] + self.width_ns + self.lateness_ns <= mark
        )

    def flush(self) -> list[dict[str, Any]]:
        """Close every open window (at shutdown or the end of a replay)."""
        return self._close(lambda key: True)

    def _close(self, done: Any) -> list[dict[str, Any]]:
        closed = sorted(key for key in self._open if done(key))
        return [self._record(key, self._open.pop(key)) for key in closed]

    def _record(self, key: WindowKey, window: _Open) -> dict[str, Any]:
        node, service, profile_type, start = key
        return {
            "window_id": f"{node}/{service}/{profile_type}/{start}",
            "node_id": node,
            "service": service,
            "profile_type": profile_type,
            "window_start_ns": start,
            "window_end_ns": start + self.width_ns,
            "stacks": dict(sorted(window.stacks.items())),
            "samples": window.samples,
        }
