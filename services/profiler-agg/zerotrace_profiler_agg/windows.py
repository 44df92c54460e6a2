"""Tumbling event-time windows of folded stacks, closed by per-series watermarks (pure).

A window [start, start + width) belongs to one key (node, service, pid, profile type). Keys are
grouped in series, (node, pid, source): each series has its own watermark, the latest event
time seen in it. A window closes when its series' watermark reaches start + width + lateness.

Why per series and not one watermark for everything: the records of one pid of one source
topic share a Kafka partition, so they arrive in the same order whichever shell reads them,
while the interleaving of partitions and topics differs between a faust worker and the
embedded loop. With a watermark per series, what a window contains and when it closes depend
only on its own series' order, so both shells emit identical windows.

A record whose window has closed already is late: it is not folded (that would change a record
already emitted) but counted in `dropped` of its key's window that holds the watermark (still
open by construction), so the loss shows where the data is read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from zerotrace.holds import Holds

Series = tuple[str, int, str]  # node, pid, source ("stack" or "gpu")
Key = tuple[str, str, int, str]  # node, service, pid, profile type

DEFAULT_WIDTH_NS = 10_000_000_000
DEFAULT_LATENESS_NS = 2_000_000_000


@dataclass
class OpenWindow:
    stacks: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    dropped: int = 0


def folded(frames: Iterable[str], tid: int) -> str:
    """The frames joined root first by ';'. A ';' inside a frame would split it in two, so it
    becomes ':'; an empty stack is still its thread (the frame format's first frame)."""
    clean = [f.replace(";", ":") for f in frames]
    return ";".join(clean) if clean else f"thread:{tid}"


def profile_record(
    key: Key, start: int, width_ns: int, stacks: dict[str, int], samples: int, dropped: int
) -> dict[str, Any]:
    """A derived.profile datum; stacks sorted, so equal windows encode to equal bytes."""
    node, service, pid, profile_type = key
    return {
        "window_id": f"{node}/{service}/{pid}/{profile_type}/{start}",
        "node_id": node,
        "service": service,
        "pid": pid,
        "profile_type": profile_type,
        "window_start_ns": start,
        "window_end_ns": start + width_ns,
        "stacks": dict(sorted(stacks.items())),
        "samples": samples,
        "dropped": dropped,
    }


def record_order(record: dict[str, Any]) -> tuple[Any, ...]:
    """The order of records in every output batch: by window, then key."""
    return (
        record["window_start_ns"],
        record["node_id"],
        record["service"],
        record["pid"],
        record["profile_type"],
    )


# Watermarks of quiet series kept (~100 bytes each): about 6 MiB.
MAX_QUIET_MARKS = 65_536


class Windows:
    def __init__(
        self, width_ns: int = DEFAULT_WIDTH_NS, lateness_ns: int = DEFAULT_LATENESS_NS
    ) -> None:
        if width_ns <= 0 or lateness_ns < 0:
            raise ValueError("windows need a positive width and a lateness of 0 or more")
        self.width_ns = width_ns
        self.lateness_ns = lateness_ns
        self._marks: dict[Series, int] = {}
        self._open: dict[Series, dict[tuple[Key, int], OpenWindow]] = {}
        # Forgotten series keep their watermark (see `forget`), oldest first, up to
        # max_quiet_marks; past it the oldest goes and its mark raises `floor`, the watermark a
        # series unknown to us starts from. Bounded on a host that starts processes all day.
        self._quiet: OrderedDict[Series, None] = OrderedDict()
        self.max_quiet_marks = MAX_QUIET_MARKS
        self.floor = 0
        self.marks_evicted = 0
        # The records an open window was folded from stay uncommitted (zerotrace/holds.py);
        # the caller tells it where each record was read.
        self.holds = Holds()

    def start_of(self, ts: int) -> int:
        return ts - ts % self.width_ns

    def observe(self, series: Series, ts: int) -> bool:
        """Move the series' watermark to ts if later; True when ts falls in a closed window."""
        self._quiet.pop(series, None)
        mark = max(self._marks.get(series, max(ts, self.floor)), ts)
        self._marks[series] = mark
        self._open.setdefault(series, {})
        return self.is_closed(series, self.start_of(ts))

    def is_closed(self, series: Series, start: int) -> bool:
        return start + self.width_ns + self.lateness_ns <= self._marks[series]

    def mark(self, series: Series) -> int:
        return self._marks[series]

    def raise_mark(self, series: Series, mark: int) -> None:
        self._marks[series] = max(self._marks[series], mark)

    def series(self) -> list[Series]:
        """The series not forgotten (a forgotten one comes back with its next record)."""
        return sorted(self._open)

    def add(self, series: Series, key: Key, ts: int, stack: str, weight: int) -> None:
        """Fold one record into its (open) window."""
        start = self.start_of(ts)
        window = self._window(series, key, start)
        window.stacks[stack] = window.stacks.get(stack, 0) + weight
        window.samples += 1
        self.holds.claim((series, key, start), ts)

    def count_late(self, series: Series, key: Key) -> None:
        self._window(series, key, self.start_of(self._marks[series])).dropped += 1

    def close_due(self, series: Series) -> list[dict[str, Any]]:
        """Records of the series' windows the watermark has passed, in record order."""
        return self._close(series, lambda start: self.is_closed(series, start))

    def close_all(self, series: Series) -> list[dict[str, Any]]:
        return self._close(series, lambda start: True)

    def has_open(self, series: Series) -> bool:
        return bool(self._open.get(series))

    def forget(self, series: Series) -> None:
        """Drop the window table of a series with nothing open. Its watermark stays (one int
        per process seen), so a record for a window already emitted is still counted late
        instead of making a second record with the same window_id."""
        assert not self._open.get(series), "a series with open windows cannot be forgotten"
        self._open.pop(series, None)
        if series in self._marks:
            self._quiet[series] = None
            self._quiet.move_to_end(series)
        while len(self._quiet) > self.max_quiet_marks:
            oldest, _ = self._quiet.popitem(last=False)
            self.floor = max(self.floor, self._marks.pop(oldest))
            self.marks_evicted += 1

    def _window(self, series: Series, key: Key, start: int) -> OpenWindow:
        return self._open[series].setdefault((key, start), OpenWindow())

    def _close(self, series: Series, due: Any) -> list[dict[str, Any]]:
        windows = self._open.get(series, {})
        done = sorted(k for k in windows if due(k[1]))
        out = []
        for key, start in done:
            w = windows.pop((key, start))
            self.holds.release((series, key, start))
            out.append(profile_record(key, start, self.width_ns, w.stacks, w.samples, w.dropped))
        return sorted(out, key=record_order)
