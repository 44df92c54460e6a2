"""The one shape of every stream stage: a Step. Pure: messages and times in, messages out.

A step is driven by a shell that owns the I/O: the embedded runner (step_runner.py, one process,
in-process bus) or the faust shell (faust_shell.py, a worker over Kafka). Both call it alike:

- `process(message)` for each message of `input_topics`, in partition order;
- `tick(now_ns)` about once a second with the clock, so time passes on a quiet input;
- `flush(now_ns, reason)` once at the end of input (the embedded run stops, a replay ends):
  every window closes and every exchange in flight is reported, incomplete, with the reason;
- `held()` whenever the shell is about to commit input offsets: for each input partition, the
  lowest offset the step's open state still needs. The shell commits no further, so a worker
  that dies (or hands its partitions over) is followed by one that reads those records again
  and rebuilds the same state: nothing in flight is lost. Outputs are published no later than
  the offsets that produced them commit (the faust shell: in the same Kafka transaction).

None of them blocks or reads a clock; outputs are produced in the order returned. A poison
message becomes a dead letter among the outputs; only a bug raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from zerotrace.bus import Message

# (topic, partition) -> the lowest input offset still needed there.
Held = Mapping[tuple[str, int], int]


@dataclass(frozen=True)
class Output:
    """One message for the shell to produce: topic, key and Avro-encoded value."""

    topic: str
    key: bytes | None
    value: bytes


@dataclass
class StepCounters:
    """What every step counts; `Step.counters()` adds its own counts to these."""

    consumed: int = 0
    produced: int = 0
    dead_letters: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "consumed": self.consumed,
            "produced": self.produced,
            "dead_letters": self.dead_letters,
        }


class Step(Protocol):
    @property
    def group(self) -> str:
        """Consumer group (and faust app id) of the step's workers."""
        ...

    @property
    def input_topics(self) -> tuple[str, ...]: ...

    def process(self, message: Message) -> list[Output]: ...

    def tick(self, now_ns: int) -> list[Output]: ...

    def flush(self, now_ns: int, reason: str = "end of input") -> list[Output]: ...

    def held(self) -> Held: ...

    def counters(self) -> dict[str, int]:
        """consumed, produced, dead_letters and the step's own counts (limits hit, late
        records, ...), for summaries and status lines."""
        ...
