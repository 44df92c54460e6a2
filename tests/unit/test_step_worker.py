"""The faust shell's bookkeeping (zerotrace/step_worker.py, pure): what each transaction
carries, and what a successor drops. The shell over real Kafka and faust:
tests/integration/test_faust_shell.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from zerotrace.bus import Message
from zerotrace.step import Held, Output
from zerotrace.step_worker import StepWorker

pytestmark = pytest.mark.unit


@dataclass
class EchoStep:
    """One output per message; holds what it is told to."""

    group: str = "g"
    input_topics: tuple[str, ...] = ("t",)
    holding: dict[tuple[str, int], int] = field(default_factory=dict)
    ticks: int = 0

    def process(self, message: Message) -> list[Output]:
        return [Output("out", None, b"%d" % message.offset)]

    def tick(self, now_ns: int) -> list[Output]:
        self.ticks += 1
        return [Output("out", None, b"tick")] if now_ns else []

    def flush(self, now_ns: int, reason: str = "end of input") -> list[Output]:
        return []

    def held(self) -> Held:
        return self.holding

    def counters(self) -> dict[str, int]:
        return {}


def message(offset: int, partition: int = 0) -> Message:
    return Message("t", partition, offset, None, b"", 0)


def test_a_transaction_carries_the_outputs_and_offsets_no_further_than_held() -> None:
    step = EchoStep(holding={("t", 0): 3})
    worker = StepWorker(EchoStep, step)
    for offset in range(6):
        worker.process(message(offset))
    worker.process(message(9, partition=1))
    outputs, offsets = worker.commit_plan()
    assert [o.value for o in outputs] == [b"0", b"1", b"2", b"3", b"4", b"5", b"9"]
    # partition 0: committed up to the held record, progress at the last one taken
    assert offsets == {("t", 0): (3, 5), ("t", 1): (10, 9)}
    assert worker.pending == []


def test_an_idle_worker_plans_nothing_and_a_tick_output_goes_alone() -> None:
    worker = StepWorker(EchoStep)
    worker.process(message(0))
    worker.commit_plan()
    assert worker.commit_plan() == ([], {})
    worker.tick(now_ns=5)
    assert worker.commit_plan() == ([Output("out", None, b"tick")], {})


def test_a_successor_drops_what_its_predecessor_published_and_keeps_the_progress() -> None:
    worker = StepWorker(EchoStep)
    worker.restart({("t", 0): 4})
    for offset in range(2, 8):  # read again from the committed offset, 2
        worker.process(message(offset))
    outputs, offsets = worker.commit_plan()
    assert [o.value for o in outputs] == [b"5", b"6", b"7"] and worker.dropped == 3
    assert offsets == {("t", 0): (8, 7)}


def test_progress_never_moves_back_while_a_successor_is_still_behind_it() -> None:
    worker = StepWorker(EchoStep)
    worker.restart({("t", 0): 10})
    worker.process(message(4))
    assert worker.commit_plan() == ([], {("t", 0): (5, 10)})


def test_a_restart_forgets_the_step_and_what_was_pending() -> None:
    made: list[EchoStep] = []

    def make() -> EchoStep:
        made.append(EchoStep())
        return made[-1]

    worker = StepWorker(make)
    worker.process(message(0))
    worker.restart({})
    assert worker.step is made[-1] and len(made) == 2
    assert worker.commit_plan() == ([], {})
