"""The live GPU allocation table: (node, pid, address) -> who allocated how much, bounded.

Pure and in memory. The caller (gpu_fold.py) feeds it allocations and frees in event-time
order; the table answers what each free matched and what is still allocated per stack.

Bounds. At most `capacity` live allocations are kept, across all processes: an allocation
past the cap evicts the least recently allocated one, which is returned to the caller so the
loss is counted in a window's `dropped` (a later free of it then counts as an unknown free).
Which allocation goes depends on the order of allocations across processes; with the cap never
reached, nothing depends on that order. A second bounded set remembers recently freed
addresses, so that a double free is told apart from a free of an address never seen.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

# 256 Ki live allocations at about 250 bytes each: some 64 MB at worst. A PyTorch process
# with its caching allocator holds hundreds of segments, not millions, so the cap is hit only
# by many processes at once or by lost frees.
DEFAULT_CAPACITY = 262_144
# Recently freed addresses remembered to recognise double frees (they carry no stack).
DEFAULT_FREED_MEMORY = 65_536

AllocKey = tuple[str, int, int]  # node, pid, device address


@dataclass(frozen=True)
class Allocation:
    node: str
    pid: int
    address: int
    size: int
    service: str  # process name of the allocating thread: the windows' service
    stack: str  # folded stack of the allocating call


class FreeOutcome(Enum):
    FREED = "freed"
    UNKNOWN = "unknown"  # never seen allocated (allocated before we looked, or evicted)
    DOUBLE = "double"  # freed already, not allocated again since


class LiveAllocations:
    def __init__(
        self, capacity: int = DEFAULT_CAPACITY, freed_memory: int = DEFAULT_FREED_MEMORY
    ) -> None:
        if capacity < 1:
            raise ValueError("the live-allocation table needs room for at least one entry")
        self.capacity = capacity
        self._freed_memory = freed_memory
        self._live: OrderedDict[AllocKey, Allocation] = OrderedDict()
        self._freed: OrderedDict[AllocKey, None] = OrderedDict()
        self._by_pid: dict[tuple[str, int], set[int]] = {}

    def __len__(self) -> int:
        return len(self._live)

    def allocate(self, allocation: Allocation) -> list[Allocation]:
        """Record a successful allocation. Returns what it pushed out, in order: an allocation
        still live at the same address (its free was never seen), then LRU evictions."""
        key = (allocation.node, allocation.pid, allocation.address)
        lost = []
        replaced = self._remove(key)
        if replaced is not None:
            lost.append(replaced)
        self._freed.pop(key, None)
        self._live[key] = allocation
        self._by_pid.setdefault(key[:2], set()).add(allocation.address)
        while len(self._live) > self.capacity:
            oldest = next(iter(self._live))
            evicted = self._remove(oldest)
            assert evicted is not None
            lost.append(evicted)
        return lost

    def free(self, node: str, pid: int, address: int) -> tuple[FreeOutcome, Allocation | None]:
        key = (node, pid, address)
        freed = self._remove(key)
        if freed is not None:
            self._freed[key] = None
            if len(self._freed) > self._freed_memory:
                self._freed.popitem(last=False)
            return FreeOutcome.FREED, freed
        if key in self._freed:
            return FreeOutcome.DOUBLE, None
        return FreeOutcome.UNKNOWN, None

    def forget_pid(self, node: str, pid: int) -> list[Allocation]:
        """Drop every allocation of a process that is gone (or whose pid now names another
        process); returns them, ordered by address, so the caller can count them."""
        addresses = sorted(self._by_pid.pop((node, pid), set()))
        gone = [self._live.pop((node, pid, a)) for a in addresses]
        for key in [k for k in self._freed if k[:2] == (node, pid)]:
            del self._freed[key]
        return gone

    def live(self, node: str, pid: int) -> list[Allocation]:
        """The process's live allocations, ordered by address."""
        addresses = sorted(self._by_pid.get((node, pid), ()))
        return [self._live[(node, pid, a)] for a in addresses]

    def in_use(self, node: str, pid: int) -> dict[str, dict[str, int]]:
        """service -> folded stack -> bytes still allocated, for one process."""
        out: dict[str, dict[str, int]] = {}
        for a in self.live(node, pid):
            stacks = out.setdefault(a.service, {})
            stacks[a.stack] = stacks.get(a.stack, 0) + a.size
        return out

    def _remove(self, key: AllocKey) -> Allocation | None:
        found = self._live.pop(key, None)
        if found is not None:
            addresses = self._by_pid[key[:2]]
            addresses.discard(key[2])
            if not addresses:
                del self._by_pid[key[:2]]
        return found
