"""What keeping raw events for replay costs the embedded mode, and how fast a replay re-derives.

1. The raw log's cost per event: the embedded collector's producer (the in-process bus) with
   and without zerotrace.raw_log.LoggingProducer around it, the same encoded SocketBatch and
   StackSample messages, in one run (CPU time of this process per message).
2. Replay rate: the log just written, read back for its whole period and driven through the
   correlator and profiler-agg steps by zerotrace.replay.ReplayDriver (what `zerotrace replay
   --local` does, without the store writes), raw events per second per core.

The messages: --conversations streaming chat conversations (one SocketData record per call, as
captures give them, a dozen calls each) interleaved across connections, and one stack sample
per 10 ms of each of 8 processes over the same time.

Run: .venv/bin/python -m bench.replay_rate [--conversations 5000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.harness.llm_conversations import interleaved
from tests.unit.test_profile_step import sample
from zerotrace import names
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.raw_log import LoggingProducer, RawLogPeriod, RawLogWriter
from zerotrace.replay import ReplayDriver, ReplayFilter, ReplayName
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.step import Step
from zerotrace_correlator.pipeline import CorrelatorStep
from zerotrace_profiler_agg.profile_step import ProfileStep

MS = 1_000_000


def messages(codec: AvroCodec, conversations: int, t0: int) -> list[tuple[str, bytes, bytes]]:
    out: list[tuple[str, bytes, bytes]] = []
    rounds = interleaved(conversations, t0, tokens=8, node="bench")
    for batch in rounds:
        for record in batch:
            key = str(record["conn_id"]).encode()
            out.append((names.RAW_SOCKET.name, key, codec.encode(names.RAW_SOCKET.record, record)))
    span_ns = len(rounds) * MS + 1_000 * MS
    for step in range(0, span_ns, 10 * MS):
        for pid in range(8):
            datum = sample(
                t0 + step, ["thread:1", f"py:f{step % 7} (a.py:1)"], node_id="bench", pid=pid
            )
            out.append(
                (
                    names.RAW_STACK.name,
                    str(pid).encode(),
                    codec.encode(names.RAW_STACK.record, datum),
                )
            )
    return out


def produce_cost(batch: list[tuple[str, bytes, bytes]], folder: Path | None, t0: int) -> float:
    broker = InMemoryBroker(trim_committed=True)
    broker.ensure_topics()
    inner = broker.producer()
    producer = (
        LoggingProducer(inner, RawLogWriter(folder, 1 << 30, SteppingClock(t0)))
        if folder
        else inner
    )
    started = time.process_time()
    for topic, key, value in batch:
        producer.produce(topic, key, value)
    producer.flush(1.0)
    spent = time.process_time() - started
    producer.close()
    return spent / len(batch) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=5000)
    args = parser.parse_args()
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    t0 = time.time_ns()
    batch = messages(codec, args.conversations, t0)
    print(f"{len(batch):,} raw messages ({args.conversations:,} conversations, stack samples)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "rawlog"
        plain = min(produce_cost(batch, None, t0) for _ in range(3))
        logged = min(produce_cost(batch, folder / str(i), t0) for i in range(3))
        print(
            f"produce to the in-process bus: {plain:.2f} µs/message; with the raw log "
            f"{logged:.2f} µs/message: +{logged - plain:.2f} µs ({logged / plain:.2f} x)"
        )
        size = sum(p.stat().st_size for p in (folder / "0").glob("*.seg"))
        print(f"raw log on disk: {size / len(batch):.0f} bytes/message")
        period = RawLogPeriod(folder / "0", 0, 2**62)
        steps: list[Step] = [CorrelatorStep(codec), ProfileStep(codec)]
        driver = ReplayDriver(steps, codec.decode, ReplayName("bench"), ReplayFilter())
        started = time.process_time()
        derived = 0
        for message in period.messages():
            derived += len(driver.feed(message))
        derived += len(driver.finish())
        spent = time.process_time() - started
        read = driver.counts.read
        print(
            f"replay: {read:,} raw events -> {derived:,} records in {spent:.1f} s CPU: "
            f"{read / spent:,.0f} raw events/s per core"
        )


class SteppingClock:
    """Each reading 20 µs after the last: the log's stamps spread as a live run's would, so
    the replay ticks through them."""

    def __init__(self, start_ns: int) -> None:
        self._now = start_ns

    def now_ns(self) -> int:
        self._now += 20_000
        return self._now


if __name__ == "__main__":
    main()
