"""What the faust shell's delivery costs, beside a plain idempotent producer.

The shell (lib/zerotrace/faust_shell.py, _Transactions) delivers a step's outputs once a
second in one Kafka transaction: begin, send the outputs, send_offsets_to_transaction with
each input partition's OffsetAndMetadata(offset, progress), commit. The plain alternative
sends the same outputs with an idempotent, acks=all aiokafka producer and awaits every
delivery: no transaction, no offsets (and none of the shell's guarantee: nothing lost,
nothing published twice across a worker's death).

For outputs-per-commit batches of 1, 100 and 1000 (600-byte values by default), each round
times --commits commits of each mode, the order alternating between rounds so a slow
stretch of a shared machine does not land on one mode only. The transactional commits are
the shell's own code (_Transactions.commit), with offsets for a bench-only consumer group.
Before each commit of either mode the bench waits --gap-ms, untimed: a worker commits once
a second, and a transaction begun right after the previous commit waits for that one's
markers (KAFKA-5477: aiokafka retries its AddPartitionsToTxn after 20 ms), which no worker
meets (--gap-ms 0 shows it).

Printed per batch: median and p90 wall time per commit, outputs/s one commit after another,
the bench process's CPU time per commit, and the ratio transactional / plain of the medians
(with the spread of the same ratio round by round). The broker's own work is not included:
it is in another process.

The bench creates the topic bench.delivery (6 partitions, as the derived topics) on
$ZEROTRACE_KAFKA (default 127.0.0.1:9092) and deletes it, and its consumer group, at the end.
About a minute at the defaults on a quiet 2-core machine.

Run: .venv/bin/python -m bench.delivery_cost [--rounds 6 --commits 10 --gap-ms 100
    --payload-bytes 600]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from zerotrace import names, settings
from zerotrace.bus_kafka import KafkaBus
from zerotrace.errors import ZerotraceError
from zerotrace.faust_shell import _Transactions
from zerotrace.step import Output

BATCH_SIZES = (1, 100, 1000)
# Six partitions, as the derived topics: a second's outputs spread over them, and a
# transaction writes its commit marker to every partition it touched.
TOPIC = names.Topic("bench.delivery", "", "bench", names.DERIVED_LLM.partitions, 3_600_000)
GROUP = "bench.delivery"
COMMIT_TIMEOUT_S = 30.0  # one commit of 1000 outputs takes tens of ms; a stuck broker, this
LEADER_TIMEOUT_S = 10.0  # a new topic's partitions get their leaders within a second or so
WARMUP_COMMITS = 2  # per mode and batch: producer ids, coordinators and metadata come first


# --- figures (pure) -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else math.nan


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.nan


@dataclass(frozen=True)
class Summary:
    commits: int
    median_ms: float
    p90_ms: float
    outputs_per_s: float  # one commit after another
    cpu_ms: float  # median CPU time of this process per commit


def summarize(wall_s: Sequence[float], cpu_s: Sequence[float], batch: int) -> Summary:
    median = statistics.median(wall_s) if wall_s else math.nan
    return Summary(
        commits=len(wall_s),
        median_ms=median * 1000,
        p90_ms=percentile(wall_s, 0.9) * 1000,
        outputs_per_s=ratio(batch, median),
        cpu_ms=(statistics.median(cpu_s) if cpu_s else math.nan) * 1000,
    )


def report(batch: int, tx: Summary, plain: Summary, round_ratios: Sequence[float]) -> list[str]:
    """The lines printed for one batch size."""
    spread = f"{min(round_ratios):.2f}-{max(round_ratios):.2f}" if round_ratios else "-"
    lines = [f"{batch} outputs per commit ({tx.commits} commits of each mode):"]
    for mode, s in (("transactional", tx), ("plain", plain)):
        lines.append(
            f"  {mode:<13} median {s.median_ms:8.2f} ms  p90 {s.p90_ms:8.2f} ms  "
            f"{s.outputs_per_s:10,.0f} outputs/s  CPU {s.cpu_ms:7.2f} ms"
        )
    lines.append(
        f"  transactional/plain {ratio(tx.median_ms, plain.median_ms):.2f} (rounds {spread}); "
        f"added per commit {tx.median_ms - plain.median_ms:+.2f} ms, "
        f"CPU {tx.cpu_ms - plain.cpu_ms:+.2f} ms"
    )
    return lines


# --- measuring (Kafka) ----------------------------------------------------------------------


def outputs(batch: int, payload_bytes: int) -> list[Output]:
    # Random bytes: no producer here compresses, and neither does the shell's.
    return [Output(TOPIC.name, f"k{i}".encode(), os.urandom(payload_bytes)) for i in range(batch)]


class Modes:
    """The two deliveries, each timed per commit: wall and CPU seconds per mode and batch."""

    def __init__(self, bootstrap: str) -> None:
        self.transactions = _Transactions(bootstrap, GROUP)
        # As the shell's producer, less the transaction.
        self.plain = AIOKafkaProducer(
            bootstrap_servers=bootstrap, enable_idempotence=True, acks="all"
        )
        self.commits = 0
        self.wall: dict[tuple[str, int], list[float]] = {}
        self.cpu: dict[tuple[str, int], list[float]] = {}

    async def transactional(self, batch: list[Output]) -> None:
        self.commits += 1  # offset and progress move on, as a worker's would
        offsets = {(TOPIC.name, 0): (self.commits, self.commits - 1)}
        await self.transactions.commit(batch, offsets)

    async def send_plain(self, batch: list[Output]) -> None:
        futures = [await self.plain.send(o.topic, value=o.value, key=o.key) for o in batch]
        await asyncio.gather(*futures)

    async def timed(
        self,
        mode: str,
        deliver: Callable[[list[Output]], Awaitable[None]],
        batch: list[Output],
        gap_s: float,
    ) -> None:
        await asyncio.sleep(gap_s)
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.wait_for(deliver(batch), COMMIT_TIMEOUT_S)
        key = (mode, len(batch))
        self.wall.setdefault(key, []).append(time.perf_counter() - wall)
        self.cpu.setdefault(key, []).append(time.process_time() - cpu)

    async def close(self) -> None:
        await self.plain.stop()
        # _Transactions has no close: a worker's producer lives as long as its process.
        if self.transactions._producer is not None:
            await self.transactions._producer.stop()


async def measure(
    bootstrap: str, rounds: int, commits: int, gap_s: float, payload_bytes: int
) -> None:
    modes = Modes(bootstrap)
    await modes.plain.start()
    try:
        runs = {"transactional": modes.transactional, "plain": modes.send_plain}
        batches = {size: outputs(size, payload_bytes) for size in BATCH_SIZES}
        for batch in batches.values():
            for deliver in runs.values():
                for _ in range(WARMUP_COMMITS):
                    await asyncio.sleep(gap_s)
                    await asyncio.wait_for(deliver(batch), COMMIT_TIMEOUT_S)
        round_ratios: dict[int, list[float]] = {size: [] for size in BATCH_SIZES}
        for round_ in range(rounds):
            order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
            for size, batch in batches.items():
                start = {mode: len(modes.wall.get((mode, size), [])) for mode in order}
                for mode in order:
                    for _ in range(commits):
                        await modes.timed(mode, runs[mode], batch, gap_s)
                tx_s, plain_s = (
                    statistics.median(modes.wall[(m, size)][start[m] :])
                    for m in ("transactional", "plain")
                )
                round_ratios[size].append(ratio(tx_s, plain_s))
            print(f"round {round_ + 1}/{rounds} done ({' then '.join(order)})", flush=True)
        print(
            f"\n{payload_bytes}-byte outputs, topic {TOPIC.name} ({TOPIC.partitions} "
            f"partitions), {gap_s * 1000:.0f} ms between commits"
        )
        for size in BATCH_SIZES:
            tx, plain = (
                summarize(modes.wall[(m, size)], modes.cpu[(m, size)], size)
                for m in ("transactional", "plain")
            )
            print("\n".join(report(size, tx, plain, round_ratios[size])))
    finally:
        await modes.close()


def wait_for_leaders(bootstrap: str) -> None:
    """A topic just created answers produce requests with NotLeaderForPartition for a moment."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + LEADER_TIMEOUT_S
    while time.monotonic() < deadline:
        topic = admin.list_topics(TOPIC.name, timeout=5).topics.get(TOPIC.name)
        partitions = [] if topic is None or topic.error else list(topic.partitions.values())
        if len(partitions) == TOPIC.partitions and all(p.leader >= 0 for p in partitions):
            return
        time.sleep(0.2)


def remove_topic_and_group(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = [
        (f"consumer group {GROUP}", admin.delete_consumer_groups([GROUP], request_timeout=10)),
        (f"topic {TOPIC.name}", admin.delete_topics([TOPIC.name], operation_timeout=30)),
    ]
    for what, by_name in futures:
        for future in by_name.values():
            try:
                future.result()
            except Exception as exc:  # no group when the run stopped before its first commit
                print(f"delivery_cost: {what} not deleted: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.delivery_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rounds", type=int, default=6, help="rounds of both modes, order alternating (6)"
    )
    parser.add_argument(
        "--commits", type=int, default=10, help="timed commits per mode, batch and round (10)"
    )
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=100.0,
        help="untimed pause before every commit, as the worker's second between them (100)",
    )
    parser.add_argument(
        "--payload-bytes",
        type=int,
        default=600,
        help="bytes of each output's value (600, as the task's encoded LlmRequest)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.commits < 1 or args.payload_bytes < 0 or args.gap_ms < 0:
        parser.error("--rounds and --commits must be at least 1, the others at least 0")
    # Sends retried (a busy broker's NotEnoughReplicas, say) are in the times measured; the
    # warning aiokafka logs for each would only break up the figures.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    bootstrap = settings.load(settings.CommonSettings).kafka
    try:
        KafkaBus(bootstrap, client_id="bench-delivery").ensure_topics([TOPIC])
        wait_for_leaders(bootstrap)
    except ZerotraceError as exc:
        print(f"delivery_cost: {exc}", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        asyncio.run(
            measure(bootstrap, args.rounds, args.commits, args.gap_ms / 1000, args.payload_bytes)
        )
    except (ZerotraceError, KafkaError, TimeoutError, OSError) as exc:
        print(f"delivery_cost: Kafka at {bootstrap} failed: {exc!r}", file=sys.stderr)
        return 1
    finally:
        remove_topic_and_group(bootstrap)
    print(f"\n{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
