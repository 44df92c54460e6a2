"""The embedded runner: drives any list of Steps over the bus port in this process.

The caller owns the loop and the clock: `run_once(now_ns)` on every turn (never blocks),
`finish(now_ns)` once at the end of input. Per step: take what its input topics hold, hand
each message to the step, produce what it returns, then commit (side effects first: only
after the producer has every output); once a second let time pass (`tick`).

Unlike the faust shell, the runner commits everything it took, whatever the step's `held()`
says: an in-process bus dies with the process, so no successor could read held records again,
and holding them would keep a long exchange's records in memory (the in-process bus drops
what every group committed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from zerotrace.bus import Bus, Consumer, Message, Producer
from zerotrace.cpu_slices import no_pause
from zerotrace.errors import TransientIO
from zerotrace.step import Output, Step

TICK_EVERY_NS = 1_000_000_000  # as the faust shell's timer
FLUSH_TIMEOUT_S = 30.0


class _Lane:
    """One step with its own consumer (its group) and producer."""

    def __init__(self, bus: Bus, step: Step, pause: Callable[[], None]) -> None:
        self.step = step
        self._pause = pause
        self.consumer: Consumer = bus.consumer(step.group)
        self.consumer.subscribe(step.input_topics)
        self.producer: Producer = bus.producer()
        self.last: dict[tuple[str, int], Message] = {}  # newest message taken per partition

    def take(self, limit: int) -> int:
        taken = 0
        while taken < limit and (message := self.consumer.poll(0)) is not None:
            taken += 1
            self.last[(message.topic, message.partition)] = message
            self.send(self.step.process(message))
            self._pause()
        return taken

    def send(self, outputs: list[Output]) -> None:
        for out in outputs:
            self.producer.produce(out.topic, out.key, out.value)

    def commit(self) -> None:
        if self.producer.flush(FLUSH_TIMEOUT_S) != 0:
            raise TransientIO(f"{self.step.group}: outputs not acknowledged; nothing committed")
        for message in self.last.values():
            self.consumer.commit(message)
        self.last.clear()


class StepRunner:
    def __init__(
        self,
        bus: Bus,
        steps: Sequence[Step],
        batch: int = 1000,
        pause: Callable[[], None] = no_pause,
    ) -> None:
        """pause: called after each message (zerotrace.cpu_slices)."""
        self._lanes = [_Lane(bus, step, pause) for step in steps]
        self._batch = batch
        self._ticked_ns: int | None = None

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
            lane.commit()

    def counters(self) -> dict[str, dict[str, int]]:
        return {lane.step.group: lane.step.counters() for lane in self._lanes}
