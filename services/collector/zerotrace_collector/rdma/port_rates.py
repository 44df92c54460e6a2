"""Two successive readings of cumulative counters -> rates per second (pure).

For each counter in both readings: (new - old) / interval. A counter that went down was
reset (driver reload, device reset, a counter set made anew), so that interval has no rate
for it (it is listed in `reset`) and the next interval rates from the new value: never a
negative rate. The one exception is a 32-bit counter known to wrap (mlx5's queue counters,
counter_names.Name.wraps_32) whose old value was in the top half of its range: it went round,
and new + 2^32 - old is what was counted. A counter absent from the older reading (new, or
unreadable then) has no rate yet. A reading at the same time as, or before, the previous one
gives no rates at all.

`RateTracker` keeps the previous reading of each source (a device port, a counter set, a
flow) so a sampler hands it readings one at a time.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

NS_PER_S = 1_000_000_000
_WRAP = 1 << 32


@dataclass(frozen=True)
class Rates:
    interval_ns: int
    per_second: dict[str, float]
    reset: tuple[str, ...] = ()  # counters that went down in this interval: no rate


def rates_between(
    old: Mapping[str, int],
    old_ns: int,
    new: Mapping[str, int],
    new_ns: int,
    wraps_32: frozenset[str] = frozenset(),
    only: frozenset[str] | None = None,
) -> Rates | None:
    """Rates of the counters in both readings (of `only` those when given); None when the
    interval is not positive."""
    interval = new_ns - old_ns
    if interval <= 0:
        return None
    per_second: dict[str, float] = {}
    reset: list[str] = []
    for name, value in new.items():
        before = old.get(name)
        if before is None or (only is not None and name not in only):
            continue
        delta = value - before
        if delta < 0:
            if name in wraps_32 and _WRAP // 2 <= before < _WRAP and value < _WRAP:
                delta += _WRAP
            else:
                reset.append(name)
                continue
        per_second[name] = delta * NS_PER_S / interval
    return Rates(interval, per_second, tuple(sorted(reset)))


class RateTracker:
    """The previous reading per source; `update` gives the rates since it."""

    def __init__(self, only: frozenset[str] | None = None) -> None:
        self.only = only
        self._last: dict[Hashable, tuple[int, dict[str, int]]] = {}

    def update(
        self,
        source: Hashable,
        ts_ns: int,
        counters: Mapping[str, int],
        wraps_32: frozenset[str] = frozenset(),
    ) -> Rates | None:
        """Rates since this source's previous reading (None for its first, or when time did
        not move forward: the older reading is then kept)."""
        last = self._last.get(source)
        rates = None
        if last is not None:
            rates = rates_between(last[1], last[0], counters, ts_ns, wraps_32, self.only)
            if rates is None:
                return None
        self._last[source] = (ts_ns, dict(counters))
        return rates

    def forget(self, source: Hashable) -> None:
        self._last.pop(source, None)

    def sources(self) -> list[Hashable]:
        return list(self._last)
