"""What the faust shell keeps beside its step, pure: the outputs waiting for the next
transaction, the last offset taken per partition, and the progress a predecessor recorded.
`commit_plan` says what a transaction carries (faust_shell.py explains why it is safe)."""

from __future__ import annotations

from collections.abc import Callable

from zerotrace.bus import Message
from zerotrace.step import Output, Step


class StepWorker:
    """What the shell keeps beside the step (pure): outputs waiting for the next transaction,
    the last offset taken per partition, and the progress a predecessor recorded (whose
    outputs are dropped). Exposed as `app.zerotrace_worker` for tests and status."""

    def __init__(self, make_step: Callable[[], Step], step: Step | None = None) -> None:
        self._make_step = make_step
        self.step = step or make_step()
        self.pending: list[Output] = []
        self.taken: dict[tuple[str, int], int] = {}
        self.published: dict[tuple[str, int], int] = {}
        self.dropped = 0  # outputs a predecessor had published already
        self._committed: dict[tuple[str, int], tuple[int, int]] = {}

    def process(self, message: Message) -> None:
        where = (message.topic, message.partition)
        outputs = self.step.process(message)
        self.taken[where] = message.offset
        if message.offset <= self.published.get(where, -1):
            self.dropped += len(outputs)
        else:
            self.pending += outputs

    def tick(self, now_ns: int) -> None:
        self.pending += self.step.tick(now_ns)

    def commit_plan(self) -> tuple[list[Output], dict[tuple[str, int], tuple[int, int]]]:
        """What the next transaction carries: the outputs, and per partition whose position
        moved the offset to commit and the progress. The outputs are handed over (no longer
        pending); an idle worker plans nothing."""
        held = self.step.held()
        offsets = {}
        for where, last in self.taken.items():
            progress = max(last, self.published.get(where, -1))
            offsets[where] = (min(last + 1, held.get(where, last + 1)), progress)
        moved = {w: o for w, o in offsets.items() if self._committed.get(w) != o}
        self._committed.update(moved)
        outputs, self.pending = self.pending, []
        return outputs, moved

    def restart(self, published: dict[tuple[str, int], int]) -> None:
        """Partitions assigned anew: a new step, the predecessors' progress as given."""
        self.step = self._make_step()
        self.pending = []
        self.taken = {}
        self.published = dict(published)
        self._committed = {}
