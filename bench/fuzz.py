"""Fuzz every parser of untrusted bytes: a million mutated inputs each, 0 crashes, no growth.

    .venv/bin/python -m bench.fuzz [--target NAME ...] [--inputs 1000000] [--seed 1] [--seconds S]

Per target (`bench.fuzz_targets`): the seed corpus (`bench.fuzz_corpus`) as it is, then
inputs from `bench.fuzz_mutate.Mutator`, all through one long-lived instance of the parser.
Printed per target: inputs run, crashes (the first one's traceback; the input is saved under
--crash-dir with the inputs the instance had been fed before it), inputs refused the
documented way, the retained bytes of the instance (peak, and first and last sample, against
the bound its limits allow), inputs/s and a verdict. Exit status 1 on any crash, any sample
past the bound, or retained bytes still growing in the last quarter of the run.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.fuzz_mutate import Mutator
from bench.fuzz_retained import retained_bytes
from bench.fuzz_targets import TARGETS, seed_corpus

# Inputs kept to replay a crash of a long-lived parser: the state it crashed in is what they
# built, since the instance was made (a crash replaces it with a fresh one).
HISTORY = 2_000
SAMPLES = 16  # retained-bytes samples over a run
# Growth: the last quarter's peak over the first half's by more than this share and slack.
GROWTH_RATIO, GROWTH_SLACK = 1.25, 64 * 1024
Progress = Callable[[str, int, int, float, int], None]


@dataclass
class Crash:
    index: int  # the input's number in the run (0: the first seed)
    data: bytes
    history: list[bytes]  # what the instance was fed before it, oldest first
    error: str  # the traceback


@dataclass
class FuzzResult:
    target: str
    inputs: int = 0
    crashes: int = 0
    rejected: int = 0
    seconds: float = 0.0
    bound: int = 0
    stateless: bool = True
    retained: list[int] = field(default_factory=list)  # samples, in run order
    first_crash: Crash | None = None

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    @property
    def peak(self) -> int:
        return max(self.retained, default=0)

    @property
    def growing(self) -> bool:
        samples = self.retained
        if len(samples) < 8:
            return False
        early = max(samples[: len(samples) // 2])
        late = max(samples[-(len(samples) // 4) :])
        return late > GROWTH_RATIO * early + GROWTH_SLACK

    @property
    def verdict(self) -> str:
        if self.crashes:
            return "FAIL: crash"
        if self.peak > self.bound and not self.stateless:
            return "FAIL: retained past the bound"
        if self.growing:
            return "FAIL: retained bytes growing"
        return "PASS"


def fuzz(
    name: str,
    inputs: int,
    seed: int = 1,
    seconds: float | None = None,
    max_len: int = 256 * 1024,
    progress: Progress | None = None,
) -> FuzzResult:
    """Runs target *name* over *inputs* inputs (seeds first), or until *seconds* passed."""
    make = TARGETS[name]
    target = make()
    corpus = seed_corpus(name, target)
    mutator = Mutator(corpus, seed, max_len)
    result = FuzzResult(name, stateless=target.state() is None, bound=target.bound())
    history: deque[bytes] = deque(maxlen=HISTORY)
    every = max(1, inputs // SAMPLES)
    start = time.monotonic()
    for index in range(inputs):
        data = corpus[index] if index < len(corpus) else mutator.next()
        try:
            target.feed(data)
        except Exception:
            result.crashes += 1
            if result.first_crash is None:
                error = traceback.format_exc()
                result.first_crash = Crash(index, data, list(history), error)
            result.rejected += target.rejected
            target = make()  # a fresh instance: the state the crash left is not trusted
            history.clear()
        else:
            history.append(data)
        result.inputs = index + 1
        if result.inputs % every == 0 and not result.stateless:
            result.retained.append(retained_bytes(target.state()))
        if index % 1024 == 1023:
            elapsed = time.monotonic() - start
            if progress is not None:
                progress(name, result.inputs, inputs, elapsed, result.crashes)
            if seconds is not None and elapsed >= seconds:
                break
    result.seconds = time.monotonic() - start
    result.rejected += target.rejected
    if not result.stateless:
        result.bound = target.bound()  # a bound taken from the instance (the codec's size)
    return result


def save_crash(result: FuzzResult, folder: Path) -> Path:
    """The crashing input as `<target>.crash`, and what the instance had been fed before it
    as `<target>.history` (each input a 4-byte little-endian length and its bytes)."""
    crash = result.first_crash
    assert crash is not None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.target}.crash"
    path.write_bytes(crash.data)
    history = b"".join(len(d).to_bytes(4, "little") + d for d in crash.history)
    (folder / f"{result.target}.history").write_bytes(history)
    return path


class Meter:
    """Progress on stderr: rewritten in place on a terminal, a line every 15 s otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, name: str, done: int, total: int, elapsed: float, crashes: int) -> None:
        now = time.monotonic()
        if now - self._last < (0.5 if self.tty else 15.0):
            return
        self._last = now
        rate = done / elapsed if elapsed else 0.0
        eta = (total - done) / rate if rate else 0.0
        line = (
            f"{name}: {done:,}/{total:,} inputs, {rate:,.0f}/s, ETA {eta:,.0f} s, crashes {crashes}"
        )
        sys.stderr.write(f"\r{line}\033[K" if self.tty else f"{line}\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K")


def report(result: FuzzResult, crash_dir: Path) -> str:
    kib = 1024
    if result.stateless:
        kept = "stateless"
    else:
        first, last = result.retained[:1] or [0], result.retained[-1:] or [0]
        kept = (
            f"retained peak {result.peak / kib:,.0f} KiB of {result.bound / kib:,.0f} KiB "
            f"(first {first[0] / kib:,.0f}, last {last[0] / kib:,.0f})"
        )
    lines = [
        f"{result.target}: {result.inputs:,} inputs, {result.crashes} crashes, "
        f"{result.rejected:,} refused, {kept}, {result.rate:,.0f} inputs/s "
        f"({result.seconds:,.1f} s): {result.verdict}"
    ]
    if result.first_crash is not None:
        path = save_crash(result, crash_dir)
        lines.append(
            f"  first crash at input {result.first_crash.index:,} "
            f"({len(result.first_crash.data)} bytes), saved to {path}:"
        )
        lines.append("  " + result.first_crash.error.rstrip().replace("\n", "\n  "))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.fuzz", description=__doc__.split("\n")[0])
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), default=None)
    parser.add_argument("--inputs", type=int, default=1_000_000, help="per target")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=None, help="stop a target after this")
    parser.add_argument("--max-len", type=int, default=256 * 1024, help="input size cap")
    parser.add_argument("--crash-dir", type=Path, default=Path(".zerotrace/fuzz"))
    args = parser.parse_args(argv)
    failed = False
    for name in args.target or list(TARGETS):
        meter = Meter()
        result = fuzz(name, args.inputs, args.seed, args.seconds, args.max_len, meter)
        meter.done()
        print(report(result, args.crash_dir), flush=True)
        failed |= result.verdict != "PASS"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
