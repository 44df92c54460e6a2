"""The user-space walk of a CPython thread list, over a memory image written here."""

from __future__ import annotations

from zerotrace_collector.python_procs import LAYOUTS, PythonProcess
from zerotrace_collector.python_threads import (
    ThreadStateRefill,
    kernel_tids,
    read_thread_states,
    thread_states,
)

OFFSETS = LAYOUTS[(3, 11)].walker
RUNTIME, INTERP = 0x1000, 0x2000


def image(tids: list[int], cycle: bool = False) -> dict[int, int]:
    """_PyRuntime -> interpreter -> thread states at 0x10000, 0x11000, ... (newest first)."""
    memory = {
        RUNTIME + OFFSETS.runtime_interp_head: INTERP,
        INTERP + OFFSETS.interp_threads_head: 0x10000 if tids else 0,
    }
    for i, tid in enumerate(tids):
        at = 0x10000 + i * 0x1000
        memory[at + OFFSETS.tstate_native_tid] = tid
        last = i == len(tids) - 1
        memory[at + OFFSETS.tstate_next] = (0x10000 if cycle else 0) if last else at + 0x1000
    return memory


def test_every_thread_of_a_long_list() -> None:
    tids = list(range(5000, 5200))  # 200 threads: far past the BPF walker's 64
    states = thread_states(image(tids).get, OFFSETS, RUNTIME)
    assert list(states) == tids
    assert states[5199] == 0x10000 + 199 * 0x1000


def test_a_cycle_a_limit_and_unreadable_memory_end_the_walk() -> None:
    assert list(thread_states(image([1, 2, 3], cycle=True).get, OFFSETS, RUNTIME)) == [1, 2, 3]
    assert len(thread_states(image(list(range(100))).get, OFFSETS, RUNTIME, limit=10)) == 10
    memory = image([1, 2, 3])
    del memory[0x11000 + OFFSETS.tstate_native_tid]
    assert list(thread_states(memory.get, OFFSETS, RUNTIME)) == [1]
    empty: dict[int, int] = {}
    assert thread_states(empty.get, OFFSETS, RUNTIME) == {}
    assert thread_states(image([]).get, OFFSETS, RUNTIME) == {}


def test_thread_ids_inside_a_pid_namespace_map_to_kernel_ids() -> None:
    lines = [(4242, "NSpid:\t4242\t7\n"), (4243, "NSpid:\t4243\t8\n"), (99, "NSpid:\t99\n")]
    assert kernel_tids(lines) == {7: 4242, 8: 4243, 99: 99}
    assert kernel_tids([(5, "")]) == {}


def test_refill_reads_at_most_once_per_interval_per_process() -> None:
    now = [100.0]
    told: list[dict[int, int]] = []
    reads: list[int] = []

    def read(proc: PythonProcess, root: str) -> dict[int, int]:
        reads.append(proc.pid)
        return {proc.pid: 0x10000} if proc.pid != 3 else {}

    refill = ThreadStateRefill(told.append, every_s=2.0, clock=lambda: now[0], read=read)
    one, two, empty = process(1), process(2), process(3)
    assert refill.no_thread(one) and refill.no_thread(two)
    assert not refill.no_thread(one) and not refill.no_thread(two)  # within 2 s
    assert not refill.no_thread(None)  # not a known Python process
    refill.forget(two.pid)
    assert refill.no_thread(two)  # forgotten (exited, or reused pid): read again at once
    now[0] += 2.0
    assert refill.no_thread(one)
    assert refill.no_thread(empty)  # read, but nothing to tell
    assert reads == [1, 2, 2, 1, 3]
    assert told == [{1: 0x10000}, {2: 0x10000}, {2: 0x10000}, {1: 0x10000}]


def test_a_310_process_is_not_read() -> None:
    # CPython 3.10 keeps pthread_self() values, which /proc cannot map to kernel tids.
    assert read_thread_states(process(1, (3, 10))) == {}
    reads: list[int] = []

    def read(proc: PythonProcess, root: str) -> dict[int, int]:
        reads.append(proc.pid)
        return {}

    refill = ThreadStateRefill(print, read=read)
    assert not refill.no_thread(process(1, (3, 10))) and reads == []


def process(pid: int, version: tuple[int, int] = (3, 11)) -> PythonProcess:
    return PythonProcess(pid, 1, version, "/usr/bin/python3", RUNTIME, LAYOUTS[version])
