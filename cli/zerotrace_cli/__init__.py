"""The `zerotrace` command: parses arguments, builds the object graph, runs it.

This package is the composition root: the only code that imports more than one service.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from zerotrace.errors import ZerotraceError

DESCRIPTION = """\
zerotrace observes AI workloads with no code change: eBPF probes on this node turn into
records on a bus, stream processors derive spans from them, and a query service indexes and
serves them.

Start here:
  zerotrace run                      observe this machine (embedded: no Kafka, no OpenSearch)
  zerotrace run -- python train.py   observe one command you start
  zerotrace analyze capture.pcap     LLM request table (TTFT, TPOT) of a packet capture
  zerotrace infra up                 start local Kafka and OpenSearch for the distributed mode
  zerotrace replay --from -1h --into incident1
                                     re-derive a past hour apart from live data (post-mortem)
  zerotrace export --format parquet --from -1h ./lake
                                     the last hour as Parquet (also Pyroscope, OTLP, Zipkin)
"""

EPILOG = """\
distributed mode, one process each (after `zerotrace infra up`):
  zerotrace collector   |  zerotrace correlator  |  zerotrace profiler-agg  |  zerotrace query
Every setting is also an environment variable: `zerotrace settings` lists them.
"""


def build_parser() -> argparse.ArgumentParser:
    from zerotrace_cli import (
        collector_cmd,
        export_cmd,
        gpu_report_cmd,
        infra_cmd,
        packet_cmds,
        profile_cmd,
        replay_cmd,
        run_cmd,
        service_cmds,
    )

    parser = argparse.ArgumentParser(
        prog="zerotrace",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run_cmd.register(sub)
    collector_cmd.register(sub)
    service_cmds.register(sub)
    packet_cmds.register(sub)
    infra_cmd.register(sub)
    profile_cmd.register(sub)
    replay_cmd.register(sub)
    export_cmd.register(sub)
    gpu_report_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(args_list)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="zerotrace %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.handler(args)
        return code
    except ZerotraceError as exc:
        print(f"zerotrace: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
