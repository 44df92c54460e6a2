"""The embedded runner: drives any list of Steps over the bus port in this process.

The caller owns the loop and the clock: `run_once(now_ns)` on every turn (never blocks),
`finish(now_ns)` once at the end of input. Per step: take what its input topics hold, hand
each message to the step, produce what it returns; once a second let time pass (`tick`) and
commit. Side effects first: offsets commit only after the producer has every output, and no
further than the step's `held()` allows (step.py), the same discipline as the faust shell.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from zerotrace.bus import Bus, Consumer, Message, Producer
from zerotrace.errors import TransientIO
from zerotrace.step import Output, Step

TICK_EVERY_NS = 1_000_000_000  # as the faust shell's timer
COMMIT_EVERY_NS = 1_000_000_000  # as the faust shell's commit interval
FLUSH_TIMEOUT_S = 30.0


class _Lane:
    """One step with its own consumer (its group) and producer."""

    def __init__(self, bus: Bus, step: Step) -> None:
        self.step = step
        self.consumer: Consumer = bus.consumer(step.group)
        self.consumer.subscribe(step.input_topics)
        self.producer: Producer = bus.producer()
        self.last: dict[tuple[str, int], Message] = {}  # newest message taken per partition
        self.committed: dict[tuple[str, int], int] = {}  # offset committed through

    def take(self, limit: int) -> int:
        taken = 0
        while taken < limit and (message := self.consumer.poll(0)) is not None:
            taken += 1
            self.last[(message.topic, message.partition)] = message
            self.send(self.step.process(message))
        return taken

    def send(self, outputs: list[Output]) -> None:
        for out in outputs:
            self.producer.produce(out.topic, out.key, out.value)

    def commit(self, honour_held: bool = True) -> None:
        if self.producer.flush(FLUSH_TIMEOUT_S) != 0:
            raise TransientIO(f"{self.step.group}: outputs not acknowledged; nothing committed")
        held = self.step.held() if honour_held else {}
        for where, message in self.last.items():
            through = message.offset
            if where in held:
                through = min(through, held[where] - 1)
            if through > self.committed.get(where, -1):
                self.consumer.commit(dataclasses.replace(message, offset=through))
                self.committed[where] = through


class StepRunner:
    def __init__(self, bus: Bus, steps: Sequence[Step], batch: int = 1000) -> None:
        self._lanes = [_Lane(bus, step) for step in steps]
        self._batch = batch
        self._ticked_ns: int | None = None
        self._committed_ns: int | None = None

    @property
    def steps(self) -> list[Step]:
        return [lane.step for lane in self._lanes]

    def run_once(self, now_ns: int) -> int:
        """Move what waits (at most `batch` messages per step); returns how many were taken."""
        taken = sum(lane.take(self._batch) for lane in self._lanes)
        if self._ticked_ns is None or now_ns - self._ticked_ns >= TICK_EVERY_NS:
            self._ticked_ns = now_ns
            for lane in self._lanes:
                lane.send(lane.step.tick(now_ns))
        if self._committed_ns is None or now_ns - self._committed_ns >= COMMIT_EVERY_NS:
            self._committed_ns = now_ns
            for lane in self._lanes:
                lane.commit()
        return taken

    def finish(self, now_ns: int, reason: str = "end of input") -> None:
        """End of input: take what is left, then flush every step (windows close, exchanges
        in flight are reported with `reason`) and commit everything."""
        for lane in self._lanes:
            while lane.take(self._batch):
                pass
            lane.send(lane.step.flush(now_ns, reason))
            lane.commit(honour_held=False)

    def counters(self) -> dict[str, dict[str, int]]:
        return {lane.step.group: lane.step.counters() for lane in self._lanes}
