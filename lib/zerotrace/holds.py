"""Which input offsets a step's open state still needs: the bookkeeping behind `Step.held()`.

A shell commits an input partition no further than the first record that a restarted worker
must read again to rebuild the step's open state (step.py). A step makes a *claim* for each
piece of state built from records (an HTTP exchange in flight, an open profile window): the
first offset it used on each partition; it releases the claim when the piece is done (its
outputs made, or it was dropped). `held()` is then, per partition, the oldest claim's offset.

Pure: the step tells `took` where each message it processes was read; in a tick or a flush
(`took(None)`) claims are not made. A claim open since before `held(since_ns)` is given up for
good, so one endless exchange cannot make a restart read days back.
"""

from __future__ import annotations

from collections.abc import Hashable

Where = tuple[str, int]  # (topic, partition)
Position = tuple[Where, int]  # and an offset there


class Holds:
    def __init__(self) -> None:
        self._open: dict[Hashable, tuple[dict[Where, int], int]] = {}  # starts, event time
        self.current: Position | None = None  # the message being processed, if any

    def took(self, position: Position | None) -> None:
        """The step starts processing the message at `position` (None: a tick or a flush)."""
        self.current = position

    def claim(self, key: Hashable, event_ns: int = 0) -> None:
        """State `key` is built from the current message too (the first message per
        partition counts); event_ns: when the state began, for `held(since_ns)`."""
        if self.current is None:
            return
        where, offset = self.current
        claim = self._open.get(key)
        if claim is None:  # the common case is a claim already open: allocate nothing then
            self._open[key] = ({where: offset}, event_ns)
        elif where not in claim[0]:
            claim[0][where] = offset

    def release(self, key: Hashable) -> None:
        """State `key` is done: its outputs are made (or it was dropped)."""
        self._open.pop(key, None)

    def clear(self) -> None:
        """Everything was flushed: nothing is held any more."""
        self._open.clear()

    def held(self, since_ns: int | None = None) -> dict[Where, int]:
        """Per partition held back, the first offset not to commit. Claims that began before
        since_ns are given up first (a restart then loses just them)."""
        if since_ns is not None:
            old = [key for key, (_starts, began) in self._open.items() if began < since_ns]
            for key in old:
                del self._open[key]
        point: dict[Where, int] = {}
        for starts, _began in self._open.values():
            for where, offset in starts.items():
                if offset < point.get(where, offset + 1):
                    point[where] = offset
        return point
