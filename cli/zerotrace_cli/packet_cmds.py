"""`zerotrace capture` (packets from an interface into a pcap) and `zerotrace analyze` (a
pcap or pcapng through the same correlator as live traffic, printing the LLM table)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from zerotrace import names, settings
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_cli.common import StopFlag, say
from zerotrace_cli.llm_view import render_llm_view
from zerotrace_cli.roce_view import render_roce_table
from zerotrace_cli.socket_args import add_content_argument, redactor
from zerotrace_cli.span_tables import protocol_of, render_protocol_tables


def register(sub: Any) -> None:
    p = sub.add_parser(
        "capture",
        help="capture packets from an interface into a pcap file (root)",
        description="Live capture with an AF_PACKET socket (no tcpdump needed) into a "
        "nanosecond pcap, for `zerotrace analyze` or any pcap tool. Stops after --duration "
        "or on Ctrl-C/SIGTERM, then prints what it kept and what the kernel dropped.",
    )
    p.add_argument("-i", "--interface", default="lo", help="interface (default lo)")
    p.add_argument(
        "-w",
        "--write",
        type=Path,
        required=True,
        help="pcap file to write (mode 0600: unlike what the collector publishes, it keeps"
        " credentials and prompts as they were sent)",
    )
    p.add_argument("--port", type=int, help="only TCP packets to or from this port")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.set_defaults(handler=capture)

    p = sub.add_parser(
        "analyze",
        help="LLM requests and HTTP exchanges in a pcap/pcapng file",
        description="Reassembles the TCP streams of a capture (Ethernet, Linux cooked, raw IP, "
        "loopback; out-of-order, duplicated and missing segments handled), runs them through "
        "the correlator and prints the LLM request table. Times are taken on the wire, so "
        "the observation point is NETWORK. RoCEv2 traffic (UDP port 4791) gets a table of "
        "its queue pair flows: throughput, PSN loss and retransmission, NAKs, CNPs and "
        "request-to-ACK latency.",
    )
    p.add_argument("file", type=Path, help="pcap or pcapng file")
    p.add_argument("--json", type=Path, help="also write every derived record as JSON lines")
    p.add_argument("--rows", type=int, default=30, help="table rows (newest first)")
    add_content_argument(p)
    p.set_defaults(handler=analyze)


def capture(args: argparse.Namespace) -> int:
    from zerotrace_collector.packets.af_packet import capture as live_capture

    stop = StopFlag()
    say(
        f"capturing on {args.interface} into {args.write}"
        + (f" (port {args.port})" if args.port else "")
        + "; Ctrl-C stops"
    )
    stats = live_capture(
        args.interface,
        seconds=args.duration,
        stop_event=stop.event,
        pcap_path=args.write,
        port=args.port,
    )
    say(
        f"kept {stats.kept} frames of {stats.received}, {stats.kernel_drops} dropped by the "
        f"kernel, {stats.truncated} truncated, {stats.reordered} put back in time order"
        + (f", {stats.late} too late to reorder" if stats.late else "")
    )
    return 0


def analyze(args: argparse.Namespace) -> int:
    from zerotrace_collector.packets.analysis import PcapAnalysis
    from zerotrace_collector.rdma.rdma_records import RDMA_COUNTERS, flow_record
    from zerotrace_correlator.pipeline import CorrelatorStep

    common = settings.load(settings.CommonSettings)
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    step = CorrelatorStep(codec)
    analysis = PcapAnalysis(common.node_id, redactor=redactor(args))
    try:
        outputs = [
            o for rec, datum in analysis.records(args.file) for o in step.process_record(rec, datum)
        ]
    except OSError as exc:
        say(f"cannot read {args.file}: {exc.strerror}")
        return 1
    outputs += step.flush()
    derived = [codec.decode(o.value) for o in outputs]
    derived += [(RDMA_COUNTERS, flow_record(common.node_id, f)) for f in analysis.roce_figures]
    llm = [d for r, d in derived if r == names.DERIVED_LLM.record]
    spans = [d for r, d in derived if r == names.DERIVED_SPAN.record]
    if args.json:
        with open(args.json, "w") as out:
            for record, datum in derived:
                out.write(json.dumps({"record": record, **datum}, default=_plain) + "\n")
    for line in render_protocol_tables(spans, rows=args.rows):
        print(line)
    print(render_llm_view(llm, rows=args.rows))
    for line in render_roce_table(analysis.roce_figures, rows=args.rows):
        print(line)
    summary = analysis.summary()
    problem = summary.pop("problem", None)
    http_spans = sum(protocol_of(s) == "http" for s in spans)
    others = len(spans) - http_spans
    print(
        f"\n{summary.get('packets', 0)} packets, {http_spans} HTTP exchanges, "
        f"{len(llm)} LLM requests" + (f", {others} spans of other protocols" if others else "")
    )
    counted = {k: v for k, v in summary.items() if isinstance(v, int) and v and k != "packets"}
    print("counted: " + ", ".join(f"{k} {v}" for k, v in sorted(counted.items())))
    http = {k: v for k, v in step.http.counters.items() if v}
    if http:
        print("correlator: " + ", ".join(f"{k} {v}" for k, v in sorted(http.items())))
    if problem:
        print(f"zerotrace: {args.file}: {problem}", file=sys.stderr)
    return 0


def _plain(value: Any) -> Any:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)
