"""The live-allocation table: LRU bound, frees matched by (node, pid, address), counted misses."""

from __future__ import annotations

import pytest

from zerotrace_profiler_agg.gpu_memory import Allocation, FreeOutcome, LiveAllocations


def alloc(
    address: int, size: int = 100, pid: int = 7, stack: str = "thread:7;cuda:cudaMalloc"
) -> Allocation:
    return Allocation("n", pid, address, size, "train", stack)


def test_free_matches_by_pid_and_address() -> None:
    table = LiveAllocations(capacity=10)
    assert table.allocate(alloc(0x1000, 300)) == []
    assert table.allocate(alloc(0x1000, 50, pid=8)) == []  # another process, same address
    outcome, freed = table.free("n", 7, 0x1000)
    assert outcome is FreeOutcome.FREED and freed is not None and freed.size == 300
    assert table.in_use("n", 8) == {"train": {"thread:7;cuda:cudaMalloc": 50}}
    assert table.in_use("n", 7) == {}
    assert len(table) == 1


def test_double_free_and_unknown_free_are_told_apart() -> None:
    table = LiveAllocations(capacity=10)
    table.allocate(alloc(0x2000))
    assert table.free("n", 7, 0x2000)[0] is FreeOutcome.FREED
    assert table.free("n", 7, 0x2000) == (FreeOutcome.DOUBLE, None)
    assert table.free("n", 7, 0x3000) == (FreeOutcome.UNKNOWN, None)
    table.allocate(alloc(0x2000))  # reused address: live again, its free is a plain free
    assert table.free("n", 7, 0x2000)[0] is FreeOutcome.FREED


def test_lru_evicts_the_oldest_allocation_past_the_cap() -> None:
    table = LiveAllocations(capacity=3)
    for address in (1, 2, 3):
        assert table.allocate(alloc(address)) == []
    [evicted] = table.allocate(alloc(4))
    assert evicted.address == 1
    assert [a.address for a in table.live("n", 7)] == [2, 3, 4]
    assert table.free("n", 7, 1)[0] is FreeOutcome.UNKNOWN  # evicted: its free is unknown
    assert len(table) == 3


def test_allocating_a_live_address_returns_the_one_it_replaces() -> None:
    table = LiveAllocations(capacity=3)
    table.allocate(alloc(5, 10, stack="a"))
    [replaced] = table.allocate(alloc(5, 20, stack="b"))
    assert (replaced.size, replaced.stack) == (10, "a")
    assert table.in_use("n", 7) == {"train": {"b": 20}}


def test_forget_pid_drops_only_that_process() -> None:
    table = LiveAllocations(capacity=10)
    for address in (3, 1, 2):
        table.allocate(alloc(address))
    table.allocate(alloc(9, pid=8))
    table.free("n", 7, 3)
    gone = table.forget_pid("n", 7)
    assert [a.address for a in gone] == [1, 2]
    assert table.live("n", 7) == [] and len(table) == 1
    assert table.free("n", 7, 3)[0] is FreeOutcome.UNKNOWN  # the old process's history is gone


def test_stacks_are_summed_per_service_and_stack() -> None:
    table = LiveAllocations(capacity=10)
    table.allocate(alloc(1, 100, stack="s"))
    table.allocate(alloc(2, 23, stack="s"))
    table.allocate(Allocation("n", 7, 3, 5, "worker", "t"))
    assert table.in_use("n", 7) == {"train": {"s": 123}, "worker": {"t": 5}}


def test_a_table_without_room_is_refused() -> None:
    with pytest.raises(ValueError):
        LiveAllocations(capacity=0)
