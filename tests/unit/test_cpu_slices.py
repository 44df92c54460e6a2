"""zerotrace.cpu_slices: a pause after each slice of the thread's CPU time, none before, none
while steered off, and none at all with a slice of 0 (fake clocks)."""

from __future__ import annotations

from zerotrace.cpu_slices import CpuSlices


class FakeThread:
    def __init__(self) -> None:
        self.cpu_ns = 0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)  # a sleep costs no CPU time


def slices(thread: FakeThread, slice_us: int = 500) -> CpuSlices:
    return CpuSlices(slice_us, 20e-6, thread_ns=lambda: thread.cpu_ns, sleep=thread.sleep)


def test_it_pauses_once_a_slice_of_cpu_time_has_gone_and_not_before() -> None:
    thread = FakeThread()
    pacer = slices(thread)
    for _ in range(4):
        thread.cpu_ns += 100_000  # 0.4 ms of work: under the 0.5 ms slice
        pacer.point()
    assert thread.slept == []
    thread.cpu_ns += 100_000  # 0.5 ms since the start
    pacer.point()
    assert thread.slept == [20e-6] and pacer.pauses == 1
    thread.cpu_ns += 499_000  # the next slice counts from that pause
    pacer.point()
    assert pacer.pauses == 1
    thread.cpu_ns += 1_000
    pacer.point()
    assert pacer.pauses == 2


def test_one_long_piece_of_work_gives_one_pause_not_one_per_slice_it_held() -> None:
    thread = FakeThread()
    pacer = slices(thread)
    thread.cpu_ns += 3_000_000  # a store write: 6 slices in one call
    pacer.point()
    pacer.point()
    assert pacer.pauses == 1


def test_steered_off_it_never_pauses_and_a_slice_starts_when_it_is_steered_on() -> None:
    thread = FakeThread()
    pacer = slices(thread)
    pacer.steer(keeping_up=False)  # zerotrace fell behind: catch up at the budget
    thread.cpu_ns += 2_000_000
    pacer.point()
    assert thread.slept == []
    pacer.steer(keeping_up=True)  # kept up again: a slice starts now, no pause at once
    thread.cpu_ns += 100_000
    pacer.point()
    assert thread.slept == []
    thread.cpu_ns += 400_000
    pacer.point()
    assert pacer.pauses == 1


def test_a_slice_of_zero_turns_pausing_off() -> None:
    thread = FakeThread()
    pacer = slices(thread, slice_us=0)
    assert not pacer.active
    for _ in range(3):
        thread.cpu_ns += 10_000_000
        pacer.point()
    assert thread.slept == [] and pacer.pauses == 0


def test_steering_follows_the_budget_only_where_pausing_is_on() -> None:
    thread = FakeThread()
    on, off = slices(thread), slices(thread, slice_us=0)
    on.steer(keeping_up=False)
    off.steer(keeping_up=True)
    assert (on.active, off.active) == (False, False)
    on.steer(keeping_up=True)
    assert on.active
