"""`zerotrace replay`: a period of raw events re-derived by today's steps into a named replay,
beside live data (lib/zerotrace/replay.py has the logic; this file wires the shells).

Distributed (the default): raw topics read back from Kafka by time, derived records produced to
`derived.*.replay-NAME` and indexed into OpenSearch as `zerotrace-*-replay-NAME`.
`--local`: the embedded mode's raw log ($ZEROTRACE_HOME/rawlog) into the embedded DuckDB file,
tables `zerotrace-*-replay-NAME`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from zerotrace import names, settings
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec
from zerotrace.errors import ConfigError, TransientIO
from zerotrace.kafka_security import kafka_security
from zerotrace.replay import (
    Progress,
    ReplayDriver,
    ReplayFilter,
    ReplayName,
    check_period,
    parse_time,
)
from zerotrace.step import Output, Step
from zerotrace.store import Store
from zerotrace_cli.common import embedded_store_path, say

PROGRESS_EVERY_S = 1.0
BULK_DOCS = 500
STORE_RETRY_S = 120.0  # how long a replay waits for an index that went away

EXAMPLES = """\
examples:
  zerotrace replay --from -2h --to -1h --into incident1
  zerotrace replay --from 2026-12-04T15:00:00Z --to 2026-12-04T15:10:00Z --node gpu-07 \\
      --into gpu07_oom
  zerotrace replay --local --from -10m --into retry   (the embedded mode's own log)

The replay's records: topics derived.span.replay-NAME, derived.llm.replay-NAME, ...;
indices zerotrace-spans-replay-NAME, zerotrace-llm-replay-NAME, zerotrace-profiles-replay-NAME.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="re-derive a period of raw events into a named replay, apart from live data",
        description="Read the raw events of a period again (Kafka's raw topics by time, or the\n"
        "embedded mode's local log with --local), derive spans, LLM requests and profiles with\n"
        "today's steps, and write them under --into NAME: the same ids and fields as live\n"
        "processing made, never mixed with live data. Progress, rate and ETA on stderr.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--from", dest="start", required=True, help="start: now, -15m, epoch s, ISO")
    p.add_argument("--to", dest="end", default="now", help="end, excluded (default: now)")
    p.add_argument(
        "--into", required=True, metavar="NAME", help="replay name: a-z, 0-9, _ (names' suffix)"
    )
    p.add_argument("--node", default="", help="only the raw events of this node id")
    p.add_argument("--service", default="", help="only the derived records of this service")
    p.add_argument(
        "--local",
        action="store_true",
        help="read $ZEROTRACE_HOME/rawlog (embedded mode) and write the embedded DuckDB file",
    )
    p.add_argument("--store", type=Path, help="DuckDB file with --local (default: run's)")
    p.set_defaults(handler=replay)


def replay(args: argparse.Namespace) -> int:
    from zerotrace_correlator.pipeline import CorrelatorStep
    from zerotrace_profiler_agg.profile_step import ProfileStep
    from zerotrace_profiler_agg.settings import ProfilerAggSettings

    common = settings.load(settings.CommonSettings)
    now_ms = time.time_ns() // 1_000_000
    from_ms, to_ms = parse_time(args.start, now_ms), parse_time(args.end, now_ms)
    check_period(from_ms, to_ms)
    into = ReplayName(args.into)
    keep = ReplayFilter(node=args.node, service=args.service)
    source = _local_source(args, common) if args.local else _kafka_source(common)
    codec = source.codec
    steps: list[Step] = [
        CorrelatorStep(codec),
        ProfileStep(codec, settings.load(ProfilerAggSettings)),
    ]
    topics = sorted({t for step in steps for t in step.input_topics})
    messages, total = source.period(topics, from_ms, to_ms)
    driver = ReplayDriver(steps, codec.decode, into, keep)
    sink = source.sink(into)
    where = f"{'the local log' if args.local else 'Kafka'}, {_period(from_ms, to_ms)}"
    say(f"replay {into.name}: {total:,} raw events in {where}{_filter_text(keep)}")
    started = time.monotonic()
    progress, shown = Progress(total, started), started
    try:
        for message in messages:
            sink.take(driver.feed(message))
            now = time.monotonic()
            if now - shown >= PROGRESS_EVERY_S:
                shown = now
                _show(progress.line(driver.counts.read, driver.counts.derived, now))
        sink.take(driver.finish())
        sink.finish()
    finally:
        source.close()
    _show(progress.line(driver.counts.read, driver.counts.derived, time.monotonic()), last=True)
    for line in summary(into, driver, sink, time.monotonic() - started):
        print(line)
    torn = getattr(getattr(source, "torn", None), "torn", 0)
    if torn:
        print(
            f"  {torn:,} records of the local log cut short or damaged (a crash, a run still"
            " writing): skipped"
        )
    if not args.local:
        print(f"serve it: zerotrace query --replay {into.name}  (web page and APIs)")
    return 0


def summary(into: ReplayName, driver: ReplayDriver, sink: _Sink, took_s: float) -> list[str]:
    c = driver.counts
    lines = [
        f"replay {into.name}: {c.read:,} raw events read ({c.skipped:,} of other nodes), "
        f"{c.derived:,} records derived in {took_s:.1f} s"
    ]
    for topic, count in sorted(c.by_topic.items()):
        lines.append(f"  {into.topic(topic):40} {count:,} records")
    for index, count in sorted(sink.indexed.items()):
        lines.append(f"  {sink.index_name(index):40} {count:,} documents")
    if c.left_out:
        lines.append(f"  {c.left_out:,} derived records of other nodes or services left out")
    if c.dead_letters:
        lines.append(f"  {c.dead_letters:,} poison messages (on the live dead-letter topic)")
    if sink.refused:
        lines.append(f"  {sink.refused:,} documents refused by the store: {sink.refusal}")
    return lines


def _show(line: str, last: bool = False) -> None:
    if sys.stderr.isatty():
        print(f"\r{line}", end="\n" if last else "", file=sys.stderr, flush=True)
    else:
        say(line)


def _period(from_ms: int, to_ms: int) -> str:
    def iso(ms: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"

    return f"[{iso(from_ms)}, {iso(to_ms)})"


def _filter_text(keep: ReplayFilter) -> str:
    parts = [f"node {keep.node}"] * bool(keep.node) + [f"service {keep.service}"] * bool(
        keep.service
    )
    return f" (only {', '.join(parts)})" if parts else ""


class _Sink:
    """Where derived records go: the replay's topics (when there is a bus) and its indices,
    written in bulks, retried while the store is away, never past a refusal unseen."""

    def __init__(
        self,
        store: Store,
        codec: AvroCodec,
        index_name: Callable[[str], str],
        produce: Callable[[Output], None] | None,
        flush: Callable[[], int] | None,
    ) -> None:
        from zerotrace_query.documents import INDEX_SPECS

        self._store, self._codec = store, codec
        self.index_name = index_name
        self._produce, self._flush = produce, flush
        self._waiting: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.indexed: dict[str, int] = {}
        self.refused = 0
        self.refusal = ""
        for spec in INDEX_SPECS:
            _retry(partial(store.ensure_index, spec))

    def take(self, outputs: list[Output]) -> None:
        from zerotrace_query.documents import document_for

        for out in outputs:
            if self._produce is not None:
                self._produce(out)
            record, datum = self._codec.decode(out.value)
            index, doc_id, doc = document_for(record, datum)
            batch = self._waiting.setdefault(index, [])
            batch.append((doc_id, doc))
            if len(batch) >= BULK_DOCS:
                self._write(index)

    def finish(self) -> None:
        for index in list(self._waiting):
            self._write(index)
        if self._flush is not None and self._flush() != 0:
            raise TransientIO("replay: Kafka did not acknowledge every derived record")

    def _write(self, index: str) -> None:
        docs = self._waiting.pop(index, [])
        if not docs:
            return
        result = _retry(lambda: self._store.bulk_upsert(index, docs))
        self.indexed[index] = self.indexed.get(index, 0) + result.written
        if result.failed:
            self.refused += len(result.failed)
            self.refusal = result.failed[0][1]
        self._store.refresh(index)


def _retry(call: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + STORE_RETRY_S
    pause = 0.5
    while True:
        try:
            return call()
        except TransientIO as exc:
            if time.monotonic() > deadline:
                raise
            say(f"{exc} (retrying in {pause:.0f} s)")
            time.sleep(pause)
            pause = min(pause * 2, 10.0)


class _KafkaSource:
    def __init__(self, common: settings.CommonSettings) -> None:
        from zerotrace_cli.kafka_wiring import kafka_codec

        self._common = common
        self.codec = kafka_codec(common)
        self._period: Any = None
        self._producer: Any = None

    def period(self, topics: list[str], from_ms: int, to_ms: int) -> tuple[Iterator[Message], int]:
        from zerotrace.replay_source_kafka import KafkaPeriod

        security = kafka_security(self._common)
        self._period = KafkaPeriod(self._common.kafka, topics, from_ms, to_ms, security)
        total = sum(end - first for first, end in self._period.ranges().values())
        return self._period.messages(), total

    def sink(self, into: ReplayName) -> _Sink:
        from zerotrace.bus_kafka import KafkaBus
        from zerotrace.store_opensearch import OpenSearchStore

        bus = KafkaBus(self._common.kafka, security=kafka_security(self._common))
        replay_topics = [
            dataclasses.replace(t, name=into.topic(t.name)) for t in names.DERIVED_TOPICS
        ]
        bus.ensure_topics(replay_topics)
        self._producer = bus.producer()
        store = OpenSearchStore(self._common.opensearch, suffix=into.index_suffix)
        producer = self._producer
        return _Sink(
            store,
            self.codec,
            lambda index: names.INDEX_PREFIX + index + into.index_suffix,
            lambda out: producer.produce(out.topic, out.key, out.value),
            lambda: int(producer.flush(30.0)),
        )

    def close(self) -> None:
        if self._period is not None:
            self._period.close()
        if self._producer is not None:
            self._producer.close()


class _LocalSource:
    def __init__(self, folder: Path, store_path: Path) -> None:
        from zerotrace.schema_registry import InMemorySchemaRegistry
        from zerotrace.schemas import load_schema_dir

        if not folder.is_dir():
            raise ConfigError(
                f"no raw log at {folder}: `zerotrace run` keeps one while it observes"
                " (ZEROTRACE_RAW_LOG_MB > 0); without --local, replay reads Kafka"
            )
        self._folder, self._store_path = folder, store_path
        self.codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
        self._store: Any = None
        self.torn: Any = None  # the log's counts as read: records cut short or damaged

    def period(self, topics: list[str], from_ms: int, to_ms: int) -> tuple[Iterator[Message], int]:
        from zerotrace.raw_log import RawLogPeriod

        period = RawLogPeriod(self._folder, from_ms, to_ms)
        wanted = set(topics)
        messages = (m for m in period.messages() if m.topic in wanted)
        self.torn = period.counts
        return messages, period.count()

    def sink(self, into: ReplayName) -> _Sink:
        from zerotrace.store_duckdb import DuckDBStore

        self._store = DuckDBStore(str(self._store_path), suffix=into.index_suffix)
        return _Sink(
            self._store,
            self.codec,
            lambda index: names.INDEX_PREFIX + index + into.index_suffix,
            None,
            None,
        )

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _local_source(args: argparse.Namespace, common: settings.CommonSettings) -> _LocalSource:
    from zerotrace_cli.embedded_node import raw_log_folder

    return _LocalSource(raw_log_folder(common.home), args.store or embedded_store_path(common.home))


def _kafka_source(common: settings.CommonSettings) -> _KafkaSource:
    return _KafkaSource(common)
