"""A bounded memory of keys looked for and not found, so that a flood of messages naming the
same unknown key costs one expensive look-up (the schema registry reads its whole topic) per
`ttl_ns`, not one per message.

Time is given with every call (from an injected clock; it must not go back). Entries are kept
in the order they were noted, which is also the order they expire in: past `max_entries` the
oldest goes first, and expired ones are dropped from the front as new ones come, so memory
stays bounded however many distinct keys a stream of garbage names. Not thread-safe: its owner
locks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["NegativeCache"]

K = TypeVar("K", bound=Hashable)


class NegativeCache(Generic[K]):
    def __init__(self, ttl_ns: int, max_entries: int) -> None:
        if ttl_ns < 0 or max_entries < 1:
            raise ValueError(f"ttl_ns {ttl_ns} must be >= 0 and max_entries {max_entries} >= 1")
        self._ttl_ns = ttl_ns
        self._max = max_entries
        self._noted: OrderedDict[K, int] = OrderedDict()  # key -> when noted, oldest first
        self.evicted = 0
        """Keys forgotten for room before they expired (a flood of distinct unknown keys)."""

    def missing(self, key: K, now_ns: int) -> bool:
        """Whether *key* was noted missing less than the TTL ago (then skip the look-up)."""
        noted = self._noted.get(key)
        if noted is None:
            return False
        if now_ns - noted < self._ttl_ns:
            return True
        del self._noted[key]
        return False

    def note(self, key: K, now_ns: int) -> None:
        """*key* was looked for at *now_ns* and not found."""
        self._noted.pop(key, None)
        self._noted[key] = now_ns
        while self._noted:  # the expired ones, oldest first (with a TTL of 0, *key* too)
            old, noted = next(iter(self._noted.items()))
            if now_ns - noted < self._ttl_ns:
                break
            del self._noted[old]
        while len(self._noted) > self._max:
            self._noted.popitem(last=False)
            self.evicted += 1

    def __len__(self) -> int:
        return len(self._noted)
