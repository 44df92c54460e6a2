"""The distributed mode: one subcommand per service, each a separate process over Kafka."""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.request
from typing import TYPE_CHECKING, Any

from zerotrace import settings
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.errors import ConfigError, FeatureUnavailable
from zerotrace.schemas import load_schema_dir
from zerotrace_cli.common import BPF_DIR, StopFlag, probe_text, say
from zerotrace_cli.profiling_args import (
    add_profiling_arguments,
    profiling_feeds,
    profiling_notes,
)
from zerotrace_cli.profiling_args import follow as follow_profiled
from zerotrace_cli.socket_args import add_socket_arguments, socket_options

if TYPE_CHECKING:
    from zerotrace.spooling_producer import SpoolingProducer


def register(sub: Any) -> None:
    p = sub.add_parser(
        "collector",
        help="attach probes on this node and publish to Kafka",
        description="File opens, and TCP traffic (syscalls and TLS plaintext) of the processes "
        "named by --pid (and their children), --process or --cgroup, or of the ports named by "
        "--port. Socket capture needs one of them here: unfiltered, it would capture Kafka's "
        "own traffic, which carries what it captures.",
    )
    p.add_argument(
        "--pid", type=int, default=0, help="observe only this process and the processes it starts"
    )
    p.add_argument(
        "--port",
        type=int,
        action="append",
        default=[],
        help="TCP traffic on this port (repeatable)",
    )
    add_socket_arguments(p)
    p.add_argument("--no-files", action="store_true", help="do not trace file opens")
    p.add_argument("--no-sockets", action="store_true", help="do not capture TCP traffic")
    p.add_argument("--no-tls", action="store_true", help="do not attach the TLS uprobes")
    p.add_argument("--duration", type=float, default=0, help="stop after this many seconds")
    p.add_argument(
        "--spool-mb",
        type=int,
        default=1024,
        help="while Kafka is away, keep up to this many MiB of records on disk under "
        "$ZEROTRACE_HOME/spool and send them, in order, when it is back; past it records are "
        "counted lost (default 1024)",
    )
    p.add_argument("--ebpf", action="store_true", help=argparse.SUPPRESS)
    add_profiling_arguments(p)
    p.set_defaults(handler=collector)

    p = sub.add_parser("correlator", help="faust worker: raw events -> spans")
    p.set_defaults(handler=correlator)
    p = sub.add_parser("profiler-agg", help="faust worker: stack samples -> profile windows")
    p.set_defaults(handler=profiler_agg)

    p = sub.add_parser("query", help="index derived topics into OpenSearch; serve HTTP and gRPC")
    p.add_argument("--http-port", type=int, default=8080, help="HTTP API port on 127.0.0.1")
    p.add_argument("--grpc-port", type=int, default=50051, help="gRPC API port on 127.0.0.1")
    p.add_argument("--host", default="127.0.0.1", help="address the APIs listen on")
    p.set_defaults(handler=query)

    p = sub.add_parser("spans", help="list spans from a running query service")
    p.add_argument("--http", default="", help="HTTP base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--grpc", default="", help="gRPC address, e.g. 127.0.0.1:50051")
    p.add_argument("--kind", default="", help="only spans of this kind, e.g. file.open")
    p.add_argument("--pid", type=int, default=0, help="only spans of this process")
    p.add_argument("--limit", type=int, default=20, help="at most this many (newest first)")
    p.set_defaults(handler=spans)

    p = sub.add_parser(
        "topics",
        help="list the topics of the names registry, or create them on Kafka",
        description="Without --create: print each topic with its key, partitions and "
        "retention. With --create: create the named topics (default: all) on $ZEROTRACE_KAFKA.",
    )
    p.add_argument("--create", action="store_true", help="create them on Kafka")
    p.add_argument("names", nargs="*", help="topic names (default: every registry topic)")
    p.set_defaults(handler=topics)

    p = sub.add_parser("settings", help="list every setting with its environment variable")
    p.set_defaults(handler=show_settings)


def _kafka_codec(bootstrap: str) -> AvroCodec:
    from zerotrace.schema_registry_kafka import KafkaSchemaRegistry

    return AvroCodec(load_schema_dir(), KafkaSchemaRegistry(bootstrap))


def _kafka_bus(common: settings.CommonSettings) -> Any:
    from zerotrace.bus_kafka import KafkaBus

    bus = KafkaBus(common.kafka)
    bus.ensure_topics()  # raises TransientIO with one line when Kafka is away
    return bus


def collector(args: argparse.Namespace) -> int:
    from zerotrace_collector.collector import (
        Collector,
        monotonic_to_epoch_offset_ns,
        require_root,
    )
    from zerotrace_collector.feeds import FileOpenFeed, SocketFeed
    from zerotrace_collector.probes.fileio import FileOpenProbe, ProbeUnavailable
    from zerotrace_collector.probes.socket import SocketProbe
    from zerotrace_collector.probes.tls import find_libssl

    if args.ebpf:
        print(probe_text(args.pid))
        return 0
    require_root()
    common = settings.load(settings.CommonSettings)
    bus = _kafka_bus(common)
    producer = _collector_producer(bus, common, args.spool_mb)
    offset = monotonic_to_epoch_offset_ns()
    feeds: list[Any] = []
    socket_probe = None
    filtered = args.pid or args.port or args.process or args.cgroup
    if filtered and not args.no_sockets:
        socket_probe = SocketProbe(
            BPF_DIR,
            follow=bool(args.pid),
            ports=args.port,
            tls=not args.no_tls,
            libssl=None if args.no_tls else find_libssl(),
            **socket_options(args),
        )
        feeds.append(SocketFeed(socket_probe, common.node_id, offset))
    elif not args.no_sockets:
        say(
            "socket capture off: give --pid, --port, --process or --cgroup "
            "(unfiltered it would see Kafka's traffic)"
        )
    if not args.no_files:
        feeds.append(
            FileOpenFeed(FileOpenProbe(BPF_DIR, pid_filter=args.pid), common.node_id, offset)
        )
    profiling = profiling_feeds(args, BPF_DIR, common.node_id, offset, follows=bool(args.pid))
    feeds = profiling + feeds  # the GPU feed first: see profiling_feeds
    try:
        for feed in feeds:
            feed.attach()
    except ProbeUnavailable as exc:
        raise FeatureUnavailable(str(exc)) from None
    for note in profiling_notes(profiling):
        say(note)
    if socket_probe is not None:
        for note in socket_probe.notes:
            say(note)
        if args.pid:
            socket_probe.follow_pid(args.pid)
    if args.pid:
        follow_profiled(profiling, args.pid)
    col = Collector(feeds, producer, _kafka_codec(common.kafka))
    stop = StopFlag()
    say(f"collector attached ({', '.join(f.name for f in feeds)}); publishing to {common.kafka}")
    started = time.monotonic()
    try:
        while not stop:
            if col.pump(100) == 0:
                producer.tick()  # idle: the spool still goes on, an outage is still seen
            if args.duration and time.monotonic() - started >= args.duration:
                break
    finally:
        col.pump(0)
        for feed in feeds:
            feed.close()
        pending = producer.flush(30)
    lost = ", ".join(f"{k} {v}" for k, v in col.counters().items() if k != "published")
    spooled = producer.spooled
    kept = f" ({spooled} on disk in {producer.spool_folder}: sent next run)" if spooled else ""
    say(
        f"published {col.published} records, {pending} unacknowledged{kept}, "
        f"{producer.failed} failed; {lost}"
    )
    if producer.failed and producer.last_error:
        say(f"the last failure: {producer.last_error}")
    return 0 if pending == spooled and producer.failed == 0 else 1


def _collector_producer(
    bus: Any, common: settings.CommonSettings, spool_mb: int
) -> SpoolingProducer:
    """The Kafka producer behind a disk spool, one folder per node id: a collector restarted
    on the node sends what its predecessor kept."""
    from zerotrace.spool_file import SpoolFile
    from zerotrace.spooling_producer import SpoolingProducer

    node = re.sub(r"[^A-Za-z0-9_.-]", "_", common.node_id)  # a node id is not a path
    folder = common.home / "spool" / f"collector-{node}"
    spool = SpoolFile(folder, max(0, spool_mb) * 1024 * 1024)
    if spool.pending:
        say(f"sending {spool.pending} records kept in {folder} by an earlier run first")
    return SpoolingProducer(bus.producer(), spool, SystemClock())


def correlator(args: argparse.Namespace) -> int:
    from zerotrace.faust_shell import run_worker
    from zerotrace_correlator.faust_app import build_app

    common = settings.load(settings.CommonSettings)
    _kafka_bus(common)
    run_worker(build_app(common.kafka))
    return 0


def profiler_agg(args: argparse.Namespace) -> int:
    from zerotrace.faust_shell import run_worker
    from zerotrace_profiler_agg.faust_app import build_app

    common = settings.load(settings.CommonSettings)
    _kafka_bus(common)
    run_worker(build_app(common.kafka))
    return 0


def query(args: argparse.Namespace) -> int:
    from zerotrace.errors import TransientIO
    from zerotrace.names import GROUP_QUERY_INDEXER
    from zerotrace.store_opensearch import OpenSearchStore
    from zerotrace_query.grpc_api import GrpcApi
    from zerotrace_query.http_api import HttpApi
    from zerotrace_query.indexer import Indexer

    common = settings.load(settings.CommonSettings)
    bus = _kafka_bus(common)
    store = OpenSearchStore(common.opensearch)
    indexer = Indexer(
        bus.consumer(GROUP_QUERY_INDEXER),
        bus.producer(),
        store,
        _kafka_codec(common.kafka),
        SystemClock(),
    )
    http = HttpApi(store, port=args.http_port).start()
    grpc = GrpcApi(store, port=args.grpc_port).start()
    say(
        f"query: indexing into {common.opensearch}; HTTP {http.url}/api/v1/spans, "
        f"gRPC {grpc.address}"
    )
    stop = StopFlag()
    backoff = 0.5
    try:
        while not stop:
            try:
                indexer.run_once(0.5)
                backoff = 0.5
            except TransientIO as exc:
                say(f"{exc}; retrying in {backoff:.0f}s")
                stop.wait(backoff)
                backoff = min(backoff * 2, 30)
    finally:
        http.stop()
        grpc.stop()
        indexer.close()
    say(f"indexed {indexer.indexed} documents, {indexer.dead_letters} dead letters")
    return 0


def spans(args: argparse.Namespace) -> int:
    if args.grpc:
        from zerotrace_query.grpc_api import list_spans

        for span in list_spans(args.grpc, kind=args.kind, pid=args.pid, limit=args.limit):
            print(f"{span.start_ns} {span.process_name}[{span.pid}] {span.name} {span.status}")
        return 0
    base = args.http or "http://127.0.0.1:8080"
    url = f"{base}/api/v1/spans?kind={args.kind}&pid={args.pid}&limit={args.limit}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    for span in body["spans"]:
        print(
            f"{span['start_ns']} {span['process_name']}[{span['pid']}] {span['name']} "
            f"{span['status']}"
        )
    return 0


def topics(args: argparse.Namespace) -> int:
    from zerotrace import names

    try:
        chosen = [names.topic_named(n) for n in args.names] or list(names.ALL_TOPICS)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    if args.create:
        from zerotrace.bus_kafka import KafkaBus

        common = settings.load(settings.CommonSettings)
        KafkaBus(common.kafka).ensure_topics(chosen)
        say(f"{len(chosen)} topics exist on {common.kafka}")
        return 0
    for t in chosen:
        retention = "compacted" if t.compacted else f"{t.retention_ms // names.DAY_MS}d"
        print(f"{t.name:18} key={t.key:12} partitions={t.partitions:<3} {retention:9} {t.record}")
    return 0


def show_settings(args: argparse.Namespace) -> int:
    from zerotrace_profiler_agg.settings import ProfilerAggSettings

    for kind in (settings.CommonSettings, ProfilerAggSettings):
        for line in settings.describe(settings.load(kind)):
            print(line)
    return 0
