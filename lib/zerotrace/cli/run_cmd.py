"""`zerotrace run`: the embedded mode. Collector, correlator and query in one process over the
in-process bus and the embedded DuckDB store; the same pure steps as the distributed mode."""

from __future__ import annotations

import argparse
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from zerotrace import names, settings
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.cli.common import BPF_DIR, StopFlag, embedded_store_path, probe_text, say, span_line
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.errors import FeatureUnavailable
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="observe this machine or one command, all in one process (the default mode)",
        description="Attach the probes, derive spans and serve them, all in this process: no "
        "Kafka, no OpenSearch. Prints a line per derived record (unless --quiet) and a summary "
        "at the end. Needs root for eBPF. Results stay in $ZEROTRACE_HOME/embedded.duckdb.",
        epilog="examples:\n  zerotrace run --duration 10\n  zerotrace run -- python3 train.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--duration", type=float, default=0, help="stop after this many seconds")
    p.add_argument("--pid", type=int, default=0, help="observe only this process id")
    p.add_argument("--http-port", type=int, default=8080, help="HTTP API port on 127.0.0.1")
    p.add_argument("--grpc-port", type=int, default=50051, help="gRPC API port on 127.0.0.1")
    p.add_argument(
        "--store", type=Path, help="DuckDB file (default $ZEROTRACE_HOME/embedded.duckdb)"
    )
    p.add_argument("--quiet", action="store_true", help="no line per record, only the summary")
    p.add_argument("--ebpf", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS]: run and observe it"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from zerotrace.store_duckdb import DuckDBStore
    from zerotrace_collector.collector import (
        Collector,
        monotonic_to_epoch_offset_ns,
        require_root,
    )
    from zerotrace_collector.feeds import FileOpenFeed
    from zerotrace_collector.probes.fileio import FileOpenProbe, ProbeUnavailable
    from zerotrace_collector.process_family import ProcessFamily
    from zerotrace_correlator.pipeline import INPUT_TOPICS, CorrelatorStep
    from zerotrace_query.grpc_api import GrpcApi
    from zerotrace_query.http_api import HttpApi
    from zerotrace_query.indexer import Indexer

    if args.ebpf:
        print(probe_text(args.pid))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    common = settings.load(settings.CommonSettings)
    require_root()
    clock = SystemClock()
    broker = InMemoryBroker()
    broker.ensure_topics()
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    store = DuckDBStore(str(args.store or embedded_store_path(common.home)))
    feed = FileOpenFeed(
        FileOpenProbe(BPF_DIR, pid_filter=args.pid), common.node_id, monotonic_to_epoch_offset_ns()
    )
    say("compiling and attaching the eBPF file-open probe")
    try:
        feed.attach()
    except ProbeUnavailable as exc:
        raise FeatureUnavailable(str(exc)) from None
    stop = StopFlag()
    child: subprocess.Popen[bytes] | None = None
    if command:
        child = subprocess.Popen(command)
        say(f"observing `{' '.join(command)}` (pid {child.pid})")
    family = ProcessFamily(child.pid) if child else None
    collector = Collector(
        [feed],
        broker.producer(),
        codec,
        keep=(lambda r: family.contains(r.pid)) if family else None,
    )
    step = CorrelatorStep(codec, clock)
    correlator_in = broker.consumer(names.GROUP_CORRELATOR)
    correlator_in.subscribe(INPUT_TOPICS)
    correlator_out = broker.producer()
    summary = Summary()

    def on_document(_index: str, doc: dict[str, Any]) -> None:
        summary.add(doc)
        if not args.quiet:
            print(span_line(doc), flush=True)

    indexer = Indexer(
        broker.consumer(names.GROUP_QUERY_INDEXER),
        broker.producer(),
        store,
        codec,
        clock,
        on_document=on_document,
    )
    http = HttpApi(store, port=args.http_port).start()
    grpc = GrpcApi(store, port=args.grpc_port).start()
    say(f"serving spans at {http.url}/api/v1/spans and gRPC {grpc.address}; Ctrl-C stops")
    started = time.monotonic()
    exit_code = 0
    drain_until: float | None = None
    try:
        while not stop:
            collector.pump(100)
            while (message := correlator_in.poll(0)) is not None:
                for out in step.process(message):
                    correlator_out.produce(out.topic, out.key, out.value)
                correlator_in.commit(message)
            indexer.run_once(0)
            now = time.monotonic()
            if drain_until is not None and now >= drain_until:
                break
            if child is not None and drain_until is None and child.poll() is not None:
                exit_code = child.returncode
                drain_until = now + 0.5  # the last events are still in the ring buffer
            if args.duration and now - started >= args.duration and drain_until is None:
                drain_until = now + 0.2
    finally:
        feed.close()
        http.stop()
        grpc.stop()
        store.close()
        if child is not None and child.poll() is None:
            child.terminate()
    for line in summary.lines(step.counters.dead_letters + indexer.dead_letters):
        print(line)
    return exit_code


class Summary:
    def __init__(self) -> None:
        self.spans = 0
        self.errors = 0
        self.by_process: Counter[str] = Counter()
        self.by_path: Counter[str] = Counter()

    def add(self, doc: dict[str, Any]) -> None:
        self.spans += 1
        self.errors += doc["status"] == "ERROR"
        self.by_process[doc["process_name"]] += 1
        self.by_path[(doc.get("attributes") or {}).get(names.ATTR_FILE_PATH, "?")] += 1

    def lines(self, dead_letters: int) -> list[str]:
        out = [
            f"summary: {self.spans} file-open spans ({self.errors} failed), "
            f"{dead_letters} dead letters"
        ]
        for name, count in self.by_process.most_common(5):
            out.append(f"  process {name}: {count}")
        for path, count in self.by_path.most_common(5):
            out.append(f"  path {path}: {count}")
        return out
