"""`zerotrace run`: the embedded mode. Collector, correlator and query in one process over the
in-process bus and the embedded DuckDB store; the same pure steps as the distributed mode."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zerotrace import names, settings
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.errors import FeatureUnavailable
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_cli.common import (
    BPF_DIR,
    StopFlag,
    embedded_store_path,
    probe_text,
    profile_line,
    say,
    span_line,
)
from zerotrace_cli.held_start import HeldCommand
from zerotrace_cli.llm_view import render_llm_view
from zerotrace_cli.profiling_args import (
    add_profiling_arguments,
    profiling_feeds,
    profiling_notes,
)
from zerotrace_cli.profiling_args import follow as follow_profiled
from zerotrace_cli.socket_args import add_socket_arguments, socket_options

LIVE_REFRESH_S = 1.0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="observe this machine or one command, all in one process (the default mode)",
        description="Attach the probes (file opens, TCP sockets, TLS plaintext), derive spans "
        "and LLM request metrics (TTFT, TPOT, tokens/s) and serve them, all in this process: "
        "no Kafka, no OpenSearch. On a terminal it shows the LLM requests live; otherwise it "
        "prints a line per derived record. A summary comes at the end. Needs root for eBPF. "
        "Results stay in $ZEROTRACE_HOME/embedded.duckdb; the web page is at the HTTP port.",
        epilog="examples:\n  zerotrace run --duration 10\n  zerotrace run -- python3 serve.py\n"
        "  zerotrace run --port 8000      # only traffic to or from port 8000\n"
        "  zerotrace run --profile -- python3 train.py   # and its flame graphs",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--duration", type=float, default=0, help="stop after this many seconds")
    p.add_argument("--pid", type=int, default=0, help="observe only this process (and children)")
    p.add_argument(
        "--port",
        type=int,
        action="append",
        default=[],
        help="only TCP traffic on this port (repeatable)",
    )
    add_socket_arguments(p)
    p.add_argument("--no-files", action="store_true", help="do not trace file opens")
    p.add_argument("--no-tls", action="store_true", help="do not attach the TLS uprobes")
    p.add_argument("--http-port", type=int, default=8080, help="HTTP API and web page port")
    p.add_argument("--grpc-port", type=int, default=50051, help="gRPC API port on 127.0.0.1")
    p.add_argument(
        "--store", type=Path, help="DuckDB file (default $ZEROTRACE_HOME/embedded.duckdb)"
    )
    p.add_argument("--quiet", action="store_true", help="no line per record, only the summary")
    p.add_argument("--lines", action="store_true", help="a line per record even on a terminal")
    p.add_argument(
        "--cpu-priority",
        choices=("idle", "normal"),
        default="idle",
        help="idle (default): zerotrace's own work runs only on CPU time the observed programs "
        "leave (SCHED_IDLE), so they are not slowed; normal: compete with them, for a machine "
        "so busy that events get lost",
    )
    p.add_argument("--ebpf", action="store_true", help=argparse.SUPPRESS)
    add_profiling_arguments(p)
    p.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS]: run and observe it"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from zerotrace.cpu_priority import set_cpu_priority
    from zerotrace.store_duckdb import DuckDBStore
    from zerotrace_collector.collector import (
        Collector,
        monotonic_to_epoch_offset_ns,
        require_root,
    )
    from zerotrace_collector.feeds import FileOpenFeed, SocketFeed
    from zerotrace_collector.probes.fileio import FileOpenProbe, ProbeUnavailable
    from zerotrace_collector.probes.socket import SocketProbe
    from zerotrace_collector.probes.tls import find_libssl
    from zerotrace_collector.process_family import ProcessFamily
    from zerotrace_correlator.pipeline import INPUT_TOPICS, CorrelatorStep
    from zerotrace_profiler_agg.embedded import EmbeddedProfileAgg
    from zerotrace_profiler_agg.settings import ProfilerAggSettings
    from zerotrace_query.grpc_api import GrpcApi
    from zerotrace_query.http_api import HttpApi
    from zerotrace_query.indexer import Indexer

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    follow = bool(command or args.pid)
    libssl = None if args.no_tls else find_libssl()
    socket_probe = SocketProbe(
        BPF_DIR,
        follow=follow,
        ports=args.port,
        tls=not args.no_tls,
        libssl=libssl,
        **socket_options(args),
    )
    if args.ebpf:
        print(probe_text(args.pid))
        print(socket_probe.program_text())
        for feed in profiling_feeds(args, BPF_DIR, "", 0, follows=follow):
            print(feed.probe.program_text())
        return 0
    common = settings.load(settings.CommonSettings)
    require_root()
    clock = SystemClock()
    broker = InMemoryBroker(trim_committed=True)  # hold the backlog, not the history
    broker.ensure_topics()
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    store = DuckDBStore(str(args.store or embedded_store_path(common.home)))
    offset = monotonic_to_epoch_offset_ns()
    feeds: list[Any] = [SocketFeed(socket_probe, common.node_id, offset)]
    if not args.no_files:
        feeds.append(
            FileOpenFeed(FileOpenProbe(BPF_DIR, pid_filter=args.pid), common.node_id, offset)
        )
    profiling = profiling_feeds(args, BPF_DIR, common.node_id, offset, follows=follow)
    feeds = profiling + feeds  # the GPU feed first: see profiling_feeds
    say(f"compiling and attaching the eBPF probes ({', '.join(f.name for f in feeds)})")
    try:
        for feed in feeds:
            feed.attach()
    except ProbeUnavailable as exc:
        raise FeatureUnavailable(str(exc)) from None
    for note in [*socket_probe.notes, *profiling_notes(profiling)]:
        say(note)
    stop = StopFlag()
    child: subprocess.Popen[bytes] | None = None
    held = HeldCommand(command) if command else None
    if held is not None:
        child = held.proc
        say(f"observing `{' '.join(command)}` (pid {child.pid}) and its children")
    root = child.pid if child else args.pid
    if root:
        socket_probe.follow_pid(root)
        follow_profiled(profiling, root)
    if held is not None:
        held.release()  # only now: nothing it does comes before the probes follow it
    family = ProcessFamily(root) if root else None
    collector = Collector(
        feeds, broker.producer(), codec, keep=(lambda r: family.contains(r.pid)) if family else None
    )
    step = CorrelatorStep(codec, clock)
    profiles = EmbeddedProfileAgg(broker, codec, settings.load(ProfilerAggSettings))
    correlator_in = broker.consumer(names.GROUP_CORRELATOR)
    correlator_in.subscribe(INPUT_TOPICS)
    correlator_out = broker.producer()
    summary = Summary()
    live = sys.stdout.isatty() and not args.lines and not args.quiet

    def on_document(index: str, doc: dict[str, Any]) -> None:
        summary.add(index, doc)
        if not args.quiet and not live:
            line = {names.INDEX_LLM: llm_line, names.INDEX_PROFILES: profile_line}.get(index)
            print((line or span_line)(doc), flush=True)

    indexer = Indexer(
        broker.consumer(names.GROUP_QUERY_INDEXER),
        broker.producer(),
        store,
        codec,
        clock,
        on_document=on_document,
    )
    http = HttpApi(store, host="127.0.0.1", port=args.http_port).start()
    grpc = GrpcApi(store, port=args.grpc_port).start()
    # After the child started (it must not inherit it) and every thread exists.
    set_cpu_priority(args.cpu_priority)
    say(
        f"web page {http.url}/  API {http.url}/api/v1/llm/requests  gRPC {grpc.address};"
        " Ctrl-C stops"
    )
    started = last_draw = time.monotonic()
    exit_code = 0
    drain_until: float | None = None

    last_tick = started
    catching_up = False

    def correlate() -> int:
        nonlocal last_tick
        taken = 0
        while (message := correlator_in.poll(0)) is not None:
            taken += 1
            for out in step.process(message):
                correlator_out.produce(out.topic, out.key, out.value)
            correlator_in.commit(message)
        if time.monotonic() - last_tick >= 1.0:
            last_tick = time.monotonic()
            for out in step.tick():
                correlator_out.produce(out.topic, out.key, out.value)
        return taken

    try:
        while not stop:
            moved = collector.pump(50)
            # Idle priority keeps zerotrace out of the observed programs' way, but when the
            # socket ring is left full after a poll (a burst: a large download) it competes
            # normally until it caught up, rather than lose what comes next.
            if args.cpu_priority == "idle" and socket_probe.backlog != catching_up:
                catching_up = socket_probe.backlog
                set_cpu_priority("normal" if catching_up else "idle")
            moved += correlate()
            moved += profiles.run_once(clock.now_ns())
            moved += indexer.run_once(0)
            now = time.monotonic()
            if live and now - last_draw >= LIVE_REFRESH_S:
                last_draw = now
                draw_live(summary, now - started)
            # Stopping: wait until the last events are out of the ring buffers and through
            # every stage (on a busy machine the stages may run seconds behind).
            if (
                drain_until is not None
                and now >= drain_until
                and (not moved or now >= drain_until + 60)
            ):
                break
            if child is not None and drain_until is None and child.poll() is not None:
                exit_code = child.returncode
                drain_until = now + 0.5
            if args.duration and now - started >= args.duration and drain_until is None:
                drain_until = now + 0.2
        # End of observation: exchanges still open are reported (as aborted, with a reason).
        for out in step.flush():
            correlator_out.produce(out.topic, out.key, out.value)
        profiles.run_once(clock.now_ns())
        profiles.finish()
        while indexer.run_once(0):
            pass
    finally:
        for feed in feeds:
            feed.close()
        http.stop()
        grpc.stop()
        store.close()
        if child is not None and child.poll() is None:
            child.terminate()
    counters = collector.counters()
    dead_letters = (
        step.counters.dead_letters + profiles.step.counters.dead_letters + indexer.dead_letters
    )
    for line in summary.lines(dead_letters, counters, step.http.counters):
        print(line)
    return exit_code


def llm_line(doc: dict[str, Any]) -> str:
    def ms(key: str) -> str:
        value = doc.get(key)
        return "-" if value is None else f"{value / 1e6:.1f}ms"

    tokens = doc.get("output_tokens")
    mark = "~" if doc.get("output_tokens_estimated") else ""
    outcome = doc.get("error") or doc.get("finish_reason") or ""
    return (
        f"LLM {doc['service']} {doc['model']} {doc['endpoint']} "
        f"{'stream' if doc['stream'] else 'no-stream'} ttft={ms('ttft_ns')} "
        f"tpot={ms('tpot_ns')} tokens={mark}{tokens} {outcome}"
    )


def draw_live(summary: Summary, elapsed_s: float) -> None:
    sys.stdout.write("\x1b[H\x1b[2J")  # home and clear: redraw in place
    sys.stdout.write(
        f"zerotrace run  {elapsed_s:.0f}s  {summary.spans} spans  "
        f"{len(summary.llm)} LLM requests\n\n"
    )
    sys.stdout.write(render_llm_view(summary.llm, rows=20) + "\n")
    sys.stdout.flush()


class Summary:
    def __init__(self) -> None:
        self.spans = 0
        self.errors = 0
        self.by_kind: Counter[str] = Counter()
        self.by_process: Counter[str] = Counter()
        self.llm: list[dict[str, Any]] = []
        self.profile_windows: Counter[str] = Counter()
        self.profile_samples: Counter[str] = Counter()

    def add(self, index: str, doc: dict[str, Any]) -> None:
        if index == names.INDEX_LLM:
            self.llm.append(doc)
            return
        if index == names.INDEX_PROFILES:
            self.profile_windows[doc["profile_type"]] += 1
            self.profile_samples[doc["profile_type"]] += int(doc["samples"])
            return
        self.spans += 1
        self.errors += doc["status"] == "ERROR"
        self.by_kind[doc["kind"]] += 1
        self.by_process[doc["process_name"]] += 1

    def lines(
        self, dead_letters: int, counters: dict[str, int], correlator: Mapping[str, int]
    ) -> list[str]:
        """correlator: the HTTP/LLM correlation's counters (http_counters.py), limits hit and
        connections given up among them, so "no LLM traffic" and "traffic we could not read"
        look different."""
        kinds = ", ".join(f"{kind} {n}" for kind, n in self.by_kind.most_common())
        out = [
            f"summary: {self.spans} spans ({kinds or 'none'}; {self.errors} failed), "
            f"{len(self.llm)} LLM requests, {dead_letters} dead letters"
        ]
        for name, count in self.by_process.most_common(5):
            out.append(f"  process {name}: {count} spans")
        losses = {k: v for k, v in counters.items() if v and k != "published"}
        if losses:
            out.append("  counted: " + ", ".join(f"{k} {v}" for k, v in sorted(losses.items())))
        seen = ", ".join(f"{k} {v}" for k, v in sorted(correlator.items()) if v)
        if seen:
            out.append(f"  correlator: {seen}")
        if self.profile_windows:
            kinds = ", ".join(
                f"{kind} {n} windows ({self.profile_samples[kind]} samples)"
                for kind, n in sorted(self.profile_windows.items())
            )
            out.append(f"  profiles: {kinds}; see /flamegraph or `zerotrace profile`")
        if self.llm:
            out += ["", render_llm_view(self.llm, rows=20)]
        return out
