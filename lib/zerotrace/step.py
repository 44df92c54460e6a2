"""What every pure stream step returns to its shell, and what it counts: the correlator and
profiler-agg steps share these, so their faust and embedded shells move messages alike."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Output:
    """One message for the shell to produce: topic, key and Avro-encoded value."""

    topic: str
    key: bytes | None
    value: bytes


@dataclass
class StepCounters:
    consumed: int = 0
    produced: int = 0
    dead_letters: int = 0
