"""Post-mortem replay, pure: raw messages of a period in, the derived records today's steps make
of them out, under a replay name that keeps them apart from live data.

The shells (cli/zerotrace_cli/replay_cmd.py) read the messages (Kafka by time offsets:
replay_source_kafka.py; the embedded mode's local log: raw_log.py) and write what comes out
(suffixed derived topics, suffixed indices). Here:

- `parse_time`: what `--from` and `--to` accept;
- `ReplayName`: the checked name and the topic and index suffixes it gives;
- `TimeMerge`: messages of several partitions in time order, each partition in offset order;
- `ReplayDriver`: the steps driven as the live shells drive them, with the messages' own times
  as the clock, so the same messages give the same records (same ids, same fields) as live;
- `Progress`: the terminal line (done, rate, ETA).

Determinism. Live workers tick about once a second by the wall clock, and a step lets time pass
on a quiet input only through those ticks (a connection waiting for its close, a window of a
process that exited). Raw messages carry the time they were produced (the collector publishes
within a fraction of a second of the event), so the driver ticks at every second of message
time, gaps included, as a live worker would have. At the end of the period it ticks on, past
the longest timeout a step has, before the final flush: what live work closed by waiting, the
replay closes the same way. What stays in flight at the end of the period (an exchange cut by
`--to`) is reported incomplete with the reason "end of replay"; pick a period with a margin.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.errors import ConfigError
from zerotrace.step import Output, Step

S_NS = 1_000_000_000
MS_NS = 1_000_000
TICK_EVERY_NS = S_NS  # as the live shells' timers
# After the last message, ticks go on this far in message time: past the correlator's idle
# timeout (300 s, http_llm_step.IDLE_TIMEOUT_NS), the longest wait of any step, so that every
# connection and window a live worker would have closed by waiting closes here too.
DRAIN_NS = 310 * S_NS
# A gap longer than this between two messages is ticked through second by second only up to
# here, then jumps: by then every step has let all its waits run out (see DRAIN_NS).
GAP_TICKS = DRAIN_NS // TICK_EVERY_NS
END_REASON = "end of replay"

_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_]{0,39}$")


def parse_time(text: str, now_ms: int) -> int:
    """Milliseconds since the epoch for `--from`/`--to`: `now`; `-30s`, `-15m`, `-2h`, `-1d`
    (before now); seconds since the epoch (`1764860000`, fractions allowed; 13 digits or more
    are milliseconds); or ISO 8601 (`2026-12-04T15:00:00Z`; without a zone: UTC)."""
    text = text.strip()
    if text == "now":
        return now_ms
    relative = _RELATIVE.match(text)
    if relative:
        return now_ms - int(float(relative.group(1)) * _UNIT_S[relative.group(2)] * 1000)
    if re.fullmatch(r"\d+(\.\d+)?", text):
        whole = text.split(".")[0]
        return int(whole) if len(whole) >= 13 else int(float(text) * 1000)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"cannot read the time {text!r}: give now, -15m (s, m, h, d), seconds since the"
            " epoch or ISO 8601 such as 2026-12-04T15:00:00Z"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def check_period(from_ms: int, to_ms: int) -> None:
    if to_ms <= from_ms:
        raise ConfigError("--to must be later than --from")


@dataclass(frozen=True)
class ReplayName:
    """A replay's name: lower-case letters, digits and `_`, at most 40. No `-`, so one
    replay's index names never begin another's (their templates must not overlap)."""

    name: str

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):  # match's $ would let a trailing newline in
            raise ConfigError(
                f"--into {self.name!r}: use lower-case letters, digits and _ (at most 40),"
                " starting with a letter or digit"
            )

    @property
    def topic_suffix(self) -> str:
        return names.REPLAY_TOPIC_SUFFIX + self.name

    @property
    def index_suffix(self) -> str:
        return names.REPLAY_INDEX_SUFFIX + self.name

    def topic(self, live_topic: str) -> str:
        return live_topic + self.topic_suffix


class TimeMerge:
    """Messages of several partitions, out in time order (the smallest timestamp at the head of
    a partition first; ties by topic and partition), each partition's in offset order.

    The reader adds what it fetched and says when a partition has no more (`end`); `next()`
    answers a message only when every partition still open has one buffered, since an empty one
    might be about to give an older message. `wanting()` lists those the reader must fetch for.
    """

    def __init__(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._buffers: dict[tuple[str, int], deque[Message]] = {p: deque() for p in partitions}
        self._open = set(self._buffers)

    def add(self, message: Message) -> None:
        self._buffers[(message.topic, message.partition)].append(message)

    def end(self, partition: tuple[str, int]) -> None:
        self._open.discard(partition)

    def buffered(self, partition: tuple[str, int]) -> int:
        return len(self._buffers[partition])

    def wanting(self) -> list[tuple[str, int]]:
        return [p for p in self._open if not self._buffers[p]]

    @property
    def done(self) -> bool:
        return not self._open and not any(self._buffers.values())

    def next(self) -> Message | None:
        if self.wanting():
            return None
        heads = [(b[0].timestamp_ms, p) for p, b in self._buffers.items() if b]
        if not heads:
            return None
        _, partition = min(heads)
        return self._buffers[partition].popleft()


def merge_in_time(streams: Sequence[Iterator[Message]]) -> Iterator[Message]:
    """Already-ordered per-partition iterators merged by time (TimeMerge's order)."""
    heap: list[tuple[int, str, int, int, Message]] = []
    for i, stream in enumerate(streams):
        first = next(stream, None)
        if first is not None:
            heap.append((first.timestamp_ms, first.topic, first.partition, i, first))
    heapq.heapify(heap)
    while heap:
        _, _, _, i, message = heapq.heappop(heap)
        yield message
        following = next(streams[i], None)
        if following is not None:
            item = (following.timestamp_ms, following.topic, following.partition, i, following)
            heapq.heappush(heap, item)


@dataclass(frozen=True)
class ReplayFilter:
    """`--node` keeps the raw events of one node (the others are not fed to the steps, so they
    cannot mix in); `--service` keeps the derived records of one service (a service is known
    only once records are derived)."""

    node: str = ""
    service: str = ""

    def keeps_raw(self, datum: dict[str, Any]) -> bool:
        return not self.node or datum.get("node_id") == self.node

    def keeps_derived(self, datum: dict[str, Any]) -> bool:
        if self.node and datum.get("node_id", self.node) != self.node:
            return False
        return not self.service or datum.get("service", self.service) == self.service


Decode = Callable[[bytes], tuple[str, dict[str, Any]]]


@dataclass
class ReplayCounts:
    read: int = 0  # raw messages read in the period
    fed: int = 0  # of those, the ones the filter kept and a step took
    skipped: int = 0  # kept out by --node
    derived: int = 0  # records out, under the replay's names
    left_out: int = 0  # derived records kept out by --node/--service
    dead_letters: int = 0  # poison input: counted, not published (live has them already)
    by_topic: dict[str, int] = field(default_factory=dict)


class ReplayDriver:
    """Drives `steps` over raw messages as the live shells would (see the module's docstring)
    and hands back their outputs under the replay's topic names. Pure: time is the messages'."""

    def __init__(
        self, steps: Sequence[Step], decode: Decode, into: ReplayName, keep: ReplayFilter
    ) -> None:
        self._steps = list(steps)
        self._decode = decode
        self._into = into
        self._keep = keep
        self._ticked_ns: int | None = None
        self._last_ns = 0
        self.counts = ReplayCounts()

    def feed(self, message: Message) -> list[Output]:
        self.counts.read += 1
        now_ns = message.timestamp_ms * MS_NS
        out = self._tick_until(now_ns)
        if self._keep.node and not self._keep.keeps_raw(self._raw(message)):
            self.counts.skipped += 1
            return out
        for step in self._steps:
            if message.topic in step.input_topics:
                self.counts.fed += 1
                out += self._retarget(step.process(message))
        return out

    def finish(self) -> list[Output]:
        """End of the period: tick through DRAIN_NS of message time, then flush every step."""
        end_ns = self._last_ns + DRAIN_NS  # before ticking: the ticks move _last_ns there
        out = self._tick_until(end_ns)
        for step in self._steps:
            out += self._retarget(step.flush(end_ns, END_REASON))
        return out

    def _raw(self, message: Message) -> dict[str, Any]:
        try:
            return self._decode(message.value)[1]
        except Exception:
            return {}  # undecodable: the step dead-letters it if the node is unknown

    def _tick_until(self, now_ns: int) -> list[Output]:
        self._last_ns = max(self._last_ns, now_ns)
        if self._ticked_ns is None:
            self._ticked_ns = now_ns
            return self._tick(now_ns)
        out: list[Output] = []
        ticks = 0
        while self._ticked_ns + TICK_EVERY_NS <= now_ns:
            ticks += 1
            if ticks > GAP_TICKS:  # a long gap: every wait has run out; on to its last second
                self._ticked_ns += (now_ns - self._ticked_ns) // TICK_EVERY_NS * TICK_EVERY_NS
            else:
                self._ticked_ns += TICK_EVERY_NS
            out += self._tick(self._ticked_ns)
        return out

    def _tick(self, now_ns: int) -> list[Output]:
        out: list[Output] = []
        for step in self._steps:
            out += self._retarget(step.tick(now_ns))
        return out

    def _retarget(self, outputs: list[Output]) -> list[Output]:
        kept = []
        for output in outputs:
            if output.topic == names.DEAD_LETTER.name:
                self.counts.dead_letters += 1
                continue
            _, datum = self._decode(output.value)
            if not self._keep.keeps_derived(datum):
                self.counts.left_out += 1
                continue
            self.counts.derived += 1
            by = self.counts.by_topic
            by[output.topic] = by.get(output.topic, 0) + 1
            kept.append(Output(self._into.topic(output.topic), output.key, output.value))
        return kept


@dataclass
class Progress:
    """The terminal line of a replay: messages done of the total, rate and time left."""

    total: int
    started_s: float

    def line(self, done: int, derived: int, now_s: float) -> str:
        elapsed = max(now_s - self.started_s, 1e-9)
        rate = done / elapsed
        share = f" ({100 * done / self.total:.1f} %)" if self.total else ""
        left = max(self.total - done, 0)
        eta = f"ETA {_duration(left / rate)}" if rate > 0 and left else "ETA -"
        return (
            f"replay: {done:,}/{self.total:,} raw events{share}, {rate:,.0f} events/s, {eta},"
            f" {derived:,} records derived"
        )


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
