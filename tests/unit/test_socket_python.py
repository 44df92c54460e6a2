"""Which CPython processes the socket probe's walker knows (probes/socket_python.py): told at
first sight, looked at again when their identity changes or a recheck is due, dropped when
gone; thread states read when a call says the walker missed its thread."""

from __future__ import annotations

import itertools
import os

import pytest

from zerotrace_collector.probes.socket_python import (
    Identity,
    PythonProcesses,
    identity_of,
    parse_identity,
)
from zerotrace_collector.python_procs import LAYOUTS, PythonProcess

pytestmark = pytest.mark.unit

STAT = (
    "4242 (py (odd) name) S 1 4242 4242 0 -1 4194560 500 0 0 0 3 1 0 0 20 0 2 0 {start}"
    " 1 2 3 4 5 {stack} 7 8\n"
)


def test_identity_is_start_time_stack_and_executable_from_stat() -> None:
    stat = STAT.format(start=987654, stack=140730000000000)
    assert parse_identity(stat, "/usr/bin/python3.11") == (
        987654,
        140730000000000,
        "/usr/bin/python3.11",
    )


def python(pid: int) -> PythonProcess:
    return PythonProcess(pid, 1, (3, 11), "/usr/bin/python3.11", 0x1000, LAYOUTS[(3, 11)])


class World:
    """/proc as the tests say it is, and what the walker's map was told."""

    def __init__(self) -> None:
        self.now = 0.0
        self.identity: dict[int, Identity] = {}
        self.pythons: set[int] = set()
        self.identity_reads = 0
        self.inspections = 0
        self.told: list[int] = []
        self.forgotten: list[int] = []
        self.states: list[dict[int, int]] = []
        self.procs = PythonProcesses(
            lambda proc: self.told.append(proc.pid),
            self.forgotten.append,
            self.states.append,
            clock=lambda: self.now,
            exec_check_s=1.0,
            first_recheck_s=0.125,  # times in binary fractions: sums stay exact
            recheck_s=30.0,
            thread_walk_s=2.0,
            identity=self._identity,
            inspect_pid=self._inspect,
            read_states=lambda proc, root: {proc.pid + 1: 0xABC},
        )

    def _identity(self, pid: int, proc: str) -> Identity | None:
        self.identity_reads += 1
        return self.identity.get(pid)

    def _inspect(self, pid: int, proc: str) -> PythonProcess | None:
        self.inspections += 1
        return python(pid) if pid in self.pythons else None


def test_a_python_process_is_told_once_and_checked_at_most_every_exec_check() -> None:
    w = World()
    w.identity[10], w.pythons = (1, 100, "/usr/bin/python3.11"), {10}
    assert w.procs.saw(10) is not None and w.told == [10]
    w.now = 0.5
    assert w.procs.saw(10) is not None
    assert (w.identity_reads, w.inspections) == (1, 1)  # fresh: nothing read
    w.now = 1.5
    w.procs.saw(10)
    assert (w.identity_reads, w.inspections, w.told) == (2, 1, [10])  # same identity
    assert set(w.procs.known) == {10}


def test_an_exec_is_another_program_at_the_same_pid() -> None:
    w = World()
    w.identity[10], w.pythons = (1, 100, "/usr/bin/python3.11"), {10}
    w.procs.saw(10)
    w.identity[10] = (1, 200, "/usr/bin/python3.11")  # same interpreter, new stack: exec
    w.now = 2.0
    assert w.procs.saw(10) is not None
    assert w.forgotten == [10] and w.told == [10, 10] and w.inspections == 2


def test_a_shell_that_execs_python_is_told_at_its_next_sight() -> None:
    """A followed command is a waiting shell first: not Python, its identity read again
    at its next sight first_recheck_s later, so the exec is noticed then, not at a recheck
    seconds later."""
    w = World()
    w.identity[10] = (1, 100, "/bin/sh")
    assert w.procs.saw(10) is None
    w.now = 0.0625
    assert w.procs.saw(10) is None and w.identity_reads == 1  # read 0.125 s apart at most
    w.identity[10], w.pythons = (1, 300, "/usr/bin/python3.11"), {10}
    w.now = 0.125
    assert w.procs.saw(10) is not None and w.told == [10] and w.forgotten == []
    assert w.identity_reads == 2


def test_a_process_not_python_is_inspected_again_sooner_first_then_ever_later() -> None:
    """Right after an exec a shared build has not mapped libpython yet: looked at again
    0.125 s later, then 0.25 s after that, ..., at most every recheck_s (30 s)."""
    w = World()
    w.identity[10] = (1, 100, "/usr/bin/python3.11")
    w.procs.saw(10)
    inspected_at = []
    for step in range(1, 1000):
        w.now = step / 8
        before = w.inspections
        w.procs.saw(10)
        if w.inspections > before:
            inspected_at.append(w.now)
    assert inspected_at[:4] == [0.125, 0.375, 0.875, 1.875]
    waits = [b - a for a, b in itertools.pairwise(inspected_at)]
    assert waits[:8] == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert set(waits[8:]) == {30.0}
    w.pythons = {10}  # libpython is mapped now
    w.now = 200.0
    assert w.procs.saw(10) is not None and w.told == [10]


def test_an_exec_reported_by_the_probe_is_looked_at_until_python_or_too_old() -> None:
    """A followed process that exec'd (the probe's exec queue): its old image is forgotten at
    once, even when it was Python and fresh; it is looked at on every watch() at saw()'s
    pace, with no event of its own, until libpython is mapped; one that never becomes Python
    is let go after young_s."""
    w = World()
    w.identity[10], w.pythons = (1, 100, "/usr/bin/python3.11"), {10}
    w.procs.saw(10)  # the fork: the parent's image
    w.identity[10], w.pythons = (1, 200, "/opt/venv/bin/python"), set()  # exec'd, no lib yet
    w.now = 0.0625
    w.procs.started(10)
    assert w.forgotten == [10] and 10 not in w.procs.known
    w.now = 0.125
    w.procs.watch()
    assert 10 not in w.procs.known
    w.pythons = {10}  # the dynamic loader mapped libpython
    w.now = 0.25
    w.procs.watch()
    assert 10 in w.procs.known and w.told == [10, 10]
    inspections = w.inspections
    w.now = 10.0
    w.procs.watch()  # done with: no more looks
    assert w.inspections == inspections
    w.identity[11] = (1, 300, "/bin/sh")
    w.procs.started(11)
    for step in range(1, 100):
        w.now = 10.0 + step / 8
        w.procs.watch()
    reads = w.identity_reads
    w.now = 40.0
    w.procs.watch()
    assert w.identity_reads == reads and 11 not in w.procs.known  # let go after young_s


def test_gone_processes_are_dropped_at_sight_or_by_the_sweep() -> None:
    w = World()
    w.identity = {10: (1, 100, "/usr/bin/python3.11"), 11: (1, 100, "/usr/bin/python3.11")}
    w.pythons = {10, 11}
    w.procs.saw(10)
    w.procs.saw(11)
    del w.identity[10]
    w.identity[11] = (7, 100, "/usr/bin/python3.11")  # pid reused
    w.procs.sweep()
    assert sorted(w.forgotten) == [10, 11] and w.procs.known == {}
    w.now = 5.0
    assert w.procs.saw(10) is None and w.forgotten == [10, 11]  # gone: nothing to forget


def test_a_missed_thread_makes_one_read_of_the_thread_list_per_interval() -> None:
    w = World()
    w.identity[10], w.pythons = (1, 100, "/usr/bin/python3.11"), {10}
    w.procs.saw(10)
    w.procs.no_thread(10)
    w.procs.no_thread(10)
    assert w.states == [{11: 0xABC}] and w.procs.thread_walks == 1
    w.now = 2.5
    w.procs.no_thread(10)
    assert len(w.states) == 2
    w.procs.no_thread(99)  # never seen: nothing to read
    assert w.procs.thread_walks == 2


def test_identity_of_a_live_process_and_of_a_gone_one() -> None:
    mine = identity_of(os.getpid())
    assert mine is not None and mine[2] == os.readlink("/proc/self/exe")
    assert identity_of(2**22 + 12345) is None
