"""The embedded node: collector, the stream steps, the indexer and the APIs in one process,
over the in-process bus and the embedded DuckDB store. It owns the loop, the drain at the end
and the summary; `zerotrace run` only parses arguments and hands them over."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zerotrace import names, settings
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.cpu_budget import CpuBudget
from zerotrace.raw_log import LoggingProducer, RawLogWriter
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.self_cost import SelfCost
from zerotrace.step_runner import StepRunner
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_cli.common import StopFlag, profile_line, say, span_line
from zerotrace_cli.node_feeds import NodeFeeds
from zerotrace_cli.run_view import Summary, draw_live, llm_line

LIVE_REFRESH_S = 1.0
# Stopping: the last events must come out of the ring buffers and through every stage, which
# on a busy machine may run seconds behind. After a child exits, and after --duration:
CHILD_GRACE_S = 0.5
DURATION_GRACE_S = 0.2
DRAIN_LIMIT_S = 60.0  # at most this long past the grace while stages still move records
# The store is written at most this often, unless a full batch waits (then at once). A DuckDB
# write has a fixed cost: on a quiet machine 1.5 ms of CPU for 1 row, 2.4 ms for 50, 4.8 ms
# for 200 (store_duckdb._insert; 4.5 ms for 1 row before it tried a plain INSERT first), and
# several times that beside a CPU-bound server. Writing each loop turn's few records made
# DuckDB most of zerotrace's own CPU in bench.busy_llm (20 records a second). Records reach the
# store and the APIs this much later at most; finish() writes the rest at the end.
INDEX_EVERY_S = 1.0


class EmbeddedNode:
    def __init__(
        self,
        feeds: NodeFeeds,
        store_path: Path,
        common: settings.CommonSettings,
        keep: Callable[[Any], bool] | None,
        output: str,
    ) -> None:
        """output: "live" (a table redrawn on a terminal), "lines" (a line per derived
        record) or "quiet" (the summary only)."""
        from zerotrace_collector.collector import Collector
        from zerotrace_correlator.pipeline import CorrelatorStep
        from zerotrace_correlator.span_timings import FileDirs
        from zerotrace_correlator.trace_step import ExchangeTraceStep, ProcessTraceStep
        from zerotrace_profiler_agg.profile_step import ProfileStep
        from zerotrace_profiler_agg.settings import ProfilerAggSettings
        from zerotrace_query.indexer import Indexer

        self.clock = SystemClock()
        self.feeds = feeds
        self.output = output
        self.summary = Summary()
        broker = InMemoryBroker(trim_committed=True)  # hold the backlog, not the history
        broker.ensure_topics()
        codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
        self.store = DuckDBStore(str(store_path))
        # Raw events also go to the bounded local log, for `zerotrace replay --local`.
        self.raw_log = (
            RawLogWriter(raw_log_folder(common.home), common.raw_log_mb << 20, self.clock)
            if common.raw_log_mb > 0
            else None
        )
        producer = broker.producer()
        raw = LoggingProducer(producer, self.raw_log) if self.raw_log else producer
        self.slices = feeds.paced(common.cpu_slice_us)
        pause = self.slices.point
        self.collector = Collector(feeds.feeds, raw, codec, keep=keep, slices=self.slices)
        self.correlator = CorrelatorStep(
            codec, FileDirs.parse(common.kv_cache_dirs, common.model_dirs)
        )
        self.profiles = ProfileStep(codec, settings.load(ProfilerAggSettings))
        # Trace assembly after the correlator: at the end of input its last spans come first.
        traces = [ExchangeTraceStep(codec), ProcessTraceStep(codec)]
        self.steps = StepRunner(broker, [self.correlator, self.profiles, *traces], pause=pause)
        consumer = broker.consumer(names.GROUP_QUERY_INDEXER)
        dlq, on_doc = broker.producer(), self._on_document
        self.indexer = Indexer(consumer, dlq, self.store, codec, self.clock, on_doc, pause=pause)
        self._apis: list[Any] = []
        self.api_token = common.api_token  # the APIs' bearer token ("" = none); never shown
        self.monotonic = time.monotonic  # when the store is written next (tests replace it)
        self._index_due = 0.0
        self.budget: CpuBudget | None = None  # the CPU budget held for it, for the summary
        self.cost = SelfCost(time.monotonic)  # last: observing starts here

    def serve(self, http_port: int, grpc_port: int) -> None:
        from zerotrace_query.grpc_api import GrpcApi
        from zerotrace_query.http_api import HttpApi

        token = self.api_token
        http = HttpApi(self.store, host="127.0.0.1", port=http_port, token=token).start()
        grpc = GrpcApi(self.store, host="127.0.0.1", port=grpc_port, token=token).start()
        self._apis = [http, grpc]
        page = f"{http.url}/?token=$ZEROTRACE_API_TOKEN (once)" if token else f"{http.url}/"
        say(
            f"web page {page}  API {http.url}/api/v1/llm/requests  gRPC {grpc.address};"
            " Ctrl-C stops"
        )

    def run(
        self,
        stop: StopFlag,
        child: subprocess.Popen[bytes] | None,
        duration_s: float,
    ) -> int:
        """Observe until Ctrl-C/SIGTERM, the child's exit or the duration; then drain every
        stage and report what was in flight. Returns the child's exit code (0 without one)."""
        started = last_draw = time.monotonic()
        drain_until: float | None = None
        exit_code = 0
        while not stop:
            moved = self.step_once()
            now = time.monotonic()
            if self.budget is not None:
                self.budget.steer(self.feeds.behind, now)
                self.slices.steer(self.budget.keeping_up)
            if self.output == "live" and now - last_draw >= LIVE_REFRESH_S:
                last_draw = now
                draw_live(self.summary, now - started)
            if child is not None and drain_until is None and child.poll() is not None:
                exit_code = child.returncode
                drain_until = now + CHILD_GRACE_S
            if duration_s and now - started >= duration_s and drain_until is None:
                drain_until = now + DURATION_GRACE_S
            if _drained(drain_until, now, moved):
                break
        self.finish()
        return exit_code

    def step_once(self) -> int:
        """One turn of the loop: feeds -> bus -> steps -> store; how many records moved."""
        moved = self.collector.pump(50)
        moved += self.steps.run_once(self.clock.now_ns())
        now = self.monotonic()
        if now >= self._index_due:
            if self.raw_log is not None:
                self.raw_log.flush()  # a replay may read the log while this run goes on
            self.slices.point()  # the store's write is one piece: it starts a slice
            indexed = self.indexer.run_once(0)
            moved += indexed
            if indexed < self.indexer.batch_size:  # else more wait: the next turn takes them
                self._index_due = now + INDEX_EVERY_S
        return moved

    def finish(self) -> None:
        """End of observation: exchanges still open are reported (incomplete, with the
        reason), windows close, and everything is indexed."""
        self.steps.finish(self.clock.now_ns(), "end of observation")
        while self.indexer.run_once(0):
            pass

    def close(self) -> None:
        self.feeds.close()
        if self.raw_log is not None:
            self.raw_log.close()
        for api in self._apis:
            api.stop()
        self.store.close()

    def summary_lines(self) -> list[str]:
        cost, budget, indexed = self.cost.snapshot(), self.budget, self.indexer.indexed
        return self.summary.lines(*self._totals(), cost=cost, budget=budget, indexed=indexed)

    def summary_document(self) -> dict[str, Any]:
        """The summary as a JSON object (run_view.Summary.document)."""
        cost, budget, indexed = self.cost.snapshot(), self.budget, self.indexer.indexed
        return self.summary.document(*self._totals(), cost=cost, budget=budget, indexed=indexed)

    def write_summary(self, path: Path) -> None:
        """`zerotrace run --summary-json PATH`: the summary document, for benchmarks."""
        path.write_text(json.dumps(self.summary_document(), indent=2) + "\n")

    def _totals(self) -> tuple[int, dict[str, int], dict[str, int]]:
        """Dead letters, the collector's counters and the correlator's HTTP counters."""
        dead_letters = sum(c["dead_letters"] for c in self.steps.counters().values())
        dead_letters += self.indexer.dead_letters
        return dead_letters, self.collector.counters(), dict(self.correlator.http.counters)

    def _on_document(self, index: str, doc: dict[str, Any]) -> None:
        self.summary.add(index, doc)
        if index == names.INDEX_DEVICES:
            return  # GPU and RDMA windows: a line per device in the summary, none per window
        if self.output == "lines" and index != names.INDEX_TRACE_EDGES:
            line = {names.INDEX_LLM: llm_line, names.INDEX_PROFILES: profile_line}.get(index)
            print((line or span_line)(doc), flush=True)


def raw_log_folder(home: Path) -> Path:
    return home / "rawlog"


def _drained(drain_until: float | None, now: float, moved: int) -> bool:
    """Stopping, past the grace, and every stage is idle (or the drain took too long)."""
    if drain_until is None or now < drain_until:
        return False
    return not moved or now >= drain_until + DRAIN_LIMIT_S


def output_mode(quiet: bool, lines: bool) -> str:
    if quiet:
        return "quiet"
    return "live" if sys.stdout.isatty() and not lines else "lines"
