"""`zerotrace run`: the embedded mode. Collector, correlator and query in one process over the
in-process bus and the embedded DuckDB store; the same pure steps as the distributed mode."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerotrace import settings
from zerotrace_cli.budget_args import add_budget_argument, hold_budget
from zerotrace_cli.common import StopFlag, embedded_store_path, say
from zerotrace_cli.held_start import HeldCommand
from zerotrace_cli.node_feeds import add_node_arguments

if TYPE_CHECKING:
    from zerotrace.cpu_budget import CpuBudget
    from zerotrace_cli.node_feeds import NodeFeeds


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
    add_node_arguments(p)
    add_budget_argument(p)
    p.add_argument("--http-port", type=int, default=8080, help="HTTP API and web page port")
    p.add_argument("--grpc-port", type=int, default=50051, help="gRPC API port on 127.0.0.1")
    p.add_argument(
        "--store", type=Path, help="DuckDB file (default $ZEROTRACE_HOME/embedded.duckdb)"
    )
    p.add_argument("--quiet", action="store_true", help="no line per record, only the summary")
    p.add_argument("--lines", action="store_true", help="a line per record even on a terminal")
    p.add_argument(
        "--summary-json",
        type=Path,
        metavar="PATH",
        help="also write the summary to PATH as a JSON object (spans, LLM requests, profile "
        "samples, each feed's counters, zerotrace's own CPU, RSS and events per second)",
    )
    p.add_argument("--ebpf", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS]: run and observe it"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from zerotrace_cli.node_feeds import node_feeds
    from zerotrace_collector.collector import monotonic_to_epoch_offset_ns, require_root

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    common = settings.load(settings.CommonSettings)
    offset = monotonic_to_epoch_offset_ns()
    feeds = node_feeds(
        args,
        common.node_id,
        offset,
        follows=bool(command or args.pid),
        file_rw=common.file_rw,
        service_names=common.service_names,
    )
    if args.ebpf:
        print("\n".join(feeds.programs()))
        return 0
    require_root()
    budget = hold_budget(args, common)  # first: compiling the probes is zerotrace's work too
    try:  # released however it ends: an attach that fails, the command's end, Ctrl-C
        return _observe(args, common, feeds, command, budget)
    finally:
        budget.release()


def _observe(
    args: argparse.Namespace,
    common: settings.CommonSettings,
    feeds: NodeFeeds,
    command: list[str],
    budget: CpuBudget,
) -> int:
    from zerotrace_cli.embedded_node import EmbeddedNode, output_mode
    from zerotrace_collector.process_family import ProcessFamily

    say(f"compiling and attaching the eBPF probes ({feeds.names})")
    for note in feeds.attach():
        say(note)
    stop = StopFlag()
    held = HeldCommand(command) if command else None
    if held is not None:
        refused = budget.exempt(held.pid)  # observed, not part of zerotrace's own work
        if refused:
            say(refused)
        say(f"observing `{' '.join(command)}` (pid {held.pid}) and its children")
    root = held.pid if held else args.pid
    if root:
        feeds.follow(root)
    if held is not None:
        held.release()  # only now: nothing it does comes before the probes follow it
    family = ProcessFamily(root) if root else None
    node = EmbeddedNode(
        feeds,
        args.store or embedded_store_path(common.home),
        common,
        keep=(lambda r: family.contains(r.pid)) if family else None,
        output=output_mode(args.quiet, args.lines),
    )
    child = held.proc if held else None
    try:
        node.budget = budget
        node.serve(args.http_port, args.grpc_port)
        exit_code = node.run(stop, child, args.duration)
    finally:
        node.close()
        if child is not None and child.poll() is None:
            child.terminate()
    for line in node.summary_lines():
        print(line)
    if args.summary_json:
        node.write_summary(args.summary_json)
    return exit_code
