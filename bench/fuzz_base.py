"""What every fuzz target shares (bench.fuzz_targets, bench.fuzz_protocols): the Target
interface, the contract check, and the cutting of an input into pieces."""

from __future__ import annotations

import itertools

MS = 1_000_000
KiB = 1024
# What one small container entry (a tuple of two or three ints, a list slot) costs in CPython,
# rounded up: a bound per entry of a table whose entries a limit counts.
ENTRY_BYTES = 200


class ContractBroken(AssertionError):
    """A parser returned normally but broke what its docstring promises."""


def check(ok: bool, what: str) -> None:
    if not ok:
        raise ContractBroken(what)


def pieces(data: bytes) -> list[bytes]:
    """*data* cut into 1-4 pieces at places its own bytes choose: records split a stream
    anywhere, and a parser must give the same framing whatever the cut."""
    if len(data) < 2:
        return [data]
    count = 1 + data[-1] % 4
    cuts = sorted({(data[0] * 131 + k * len(data)) // count % len(data) for k in range(count)})
    bounds = [0, *[c for c in cuts if c], len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


class Target:
    """One parser under fuzzing. `feed` raises on a crash; `rejected` counts the inputs the
    parser refused the documented way (a counted skip, an error state, a poison error)."""

    name = ""

    def __init__(self) -> None:
        self.rejected = 0

    def feed(self, data: bytes) -> None:
        raise NotImplementedError

    def state(self) -> object | None:
        """The long-lived instances whose retained bytes are measured; None: stateless."""
        return None

    def bound(self) -> int:
        """The most bytes `state()` may retain, from the parser's documented limits."""
        return 0
