"""The distributed mode: one subcommand per service, each a separate process over Kafka."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zerotrace import settings
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.errors import ConfigError, TransientIO
from zerotrace.kafka_security import kafka_security
from zerotrace_cli.api_fetch import fetch
from zerotrace_cli.common import StopFlag, say
from zerotrace_cli.kafka_wiring import kafka_bus, kafka_codec

if TYPE_CHECKING:
    from zerotrace.step import Step

SPANS_PATH = "/api/v1/spans"


def register(sub: Any) -> None:
    p = sub.add_parser("correlator", help="faust worker: raw events -> spans")
    p.set_defaults(handler=correlator)
    p = sub.add_parser("profiler-agg", help="faust worker: stack samples -> profile windows")
    p.set_defaults(handler=profiler_agg)
    _register_traces(sub)

    p = sub.add_parser("query", help="index derived topics into OpenSearch; serve HTTP and gRPC")
    p.add_argument("--http-port", type=int, default=8080, help="HTTP API port (on --host)")
    p.add_argument("--grpc-port", type=int, default=50051, help="gRPC API port (on --host)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address both APIs listen on (0.0.0.0: every interface; set ZEROTRACE_API_TOKEN)",
    )
    p.add_argument(
        "--replay",
        default="",
        metavar="NAME",
        help="serve the indices of `zerotrace replay --into NAME` instead of live ones (no"
        " indexing)",
    )
    p.set_defaults(handler=query)

    p = sub.add_parser(
        "spans",
        help="list spans from a running query service",
        description="Spans, newest first, one line each: start time, duration, status, kind, "
        "process and name. Filters combine; they run in the store, so --limit counts matches. "
        "Example: zerotrace spans --protocol postgresql --status error --min-ms 50",
    )
    p.add_argument("--http", default="", help="HTTP base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--grpc", default="", help="gRPC address, e.g. 127.0.0.1:50051")
    p.add_argument("--kind", default="", help="only spans of this kind, e.g. file.open")
    p.add_argument(
        "--protocol", default="", help="only this protocol's spans: redis, postgresql, grpc, ..."
    )
    p.add_argument("--service", default="", help="only spans of this service")
    p.add_argument("--status", default="", help="only spans with this status: ok, error, unset")
    p.add_argument("--min-ms", type=float, default=0, help="only spans lasting at least this")
    p.add_argument("--max-ms", type=float, default=0, help="only spans shorter than this")
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


def _register_traces(sub: Any) -> None:
    p = sub.add_parser(
        "traces",
        help="faust workers: spans -> trace links (derived.trace)",
        description=(
            "Trace assembly in two stages, each a faust worker scaled by partition: "
            "'exchange' joins the client's and the server's span of one request across "
            "processes and hosts (TCP sequence numbers), and passes spans on keyed by "
            "process; 'process' links the calls a request's thread made, and calls that "
            "carry the request's traceparent, b3 or X-Request-ID. 'both' (the default) "
            "runs the process stage in a child process beside the exchange stage."
        ),
    )
    p.add_argument("--stage", choices=("both", "exchange", "process"), default="both")
    p.set_defaults(handler=traces)


def correlator(args: argparse.Namespace) -> int:
    from zerotrace_correlator.pipeline import CorrelatorStep

    return _run_step_worker(CorrelatorStep)


def profiler_agg(args: argparse.Namespace) -> int:
    from zerotrace_profiler_agg.profile_step import ProfileStep
    from zerotrace_profiler_agg.settings import ProfilerAggSettings

    agg = settings.load(ProfilerAggSettings)
    return _run_step_worker(lambda codec: ProfileStep(codec, agg))


def traces(args: argparse.Namespace) -> int:
    from zerotrace_correlator.trace_step import ExchangeTraceStep, ProcessTraceStep

    if args.stage == "process":
        return _run_step_worker(ProcessTraceStep)
    if args.stage == "exchange":
        return _run_step_worker(ExchangeTraceStep)
    argv = [sys.executable, "-m", "zerotrace_cli", "traces", "--stage", "process"]
    child = subprocess.Popen(argv)
    try:
        return _run_step_worker(ExchangeTraceStep)
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


def _run_step_worker(make_step: Callable[[AvroCodec], Step]) -> int:
    """A faust worker (the one shell for every step) until SIGTERM or Ctrl-C."""
    from zerotrace.faust_shell import run_worker, step_app

    common = settings.load(settings.CommonSettings)
    kafka_bus(common)
    codec = kafka_codec(common)
    security = kafka_security(common)
    datadir = common.home / "faust"
    app = step_app(lambda: make_step(codec), common.kafka, SystemClock(), datadir, security)
    run_worker(app)
    return 0


def query(args: argparse.Namespace) -> int:
    from zerotrace.names import GROUP_QUERY_INDEXER
    from zerotrace.store_opensearch import OpenSearchStore
    from zerotrace_query.indexer import Indexer, run_indexer

    common = settings.load(settings.CommonSettings)
    if args.replay:
        return _serve_replay(args, common)
    bus = kafka_bus(common)
    store = OpenSearchStore(common.opensearch)
    indexer = Indexer(
        bus.consumer(GROUP_QUERY_INDEXER),
        bus.producer(),
        store,
        kafka_codec(common),
        SystemClock(),
        reconnect=lambda: bus.consumer(GROUP_QUERY_INDEXER),
    )
    http, grpc = _start_apis(store, args, common.api_token)
    say(
        f"query: indexing into {common.opensearch}; HTTP {http.url}/api/v1/spans, "
        f"gRPC {grpc.address}; {access_line(common.api_token)}"
    )
    stop = StopFlag()
    try:
        run_indexer(indexer, stop, say)
    finally:
        http.stop()
        grpc.stop()
        indexer.close()
    say(f"indexed {indexer.indexed} documents, {indexer.dead_letters} dead letters")
    return 0


def _serve_replay(args: argparse.Namespace, common: settings.CommonSettings) -> int:
    """The APIs over a replay's indices (zerotrace replay --into NAME); nothing is indexed."""
    from zerotrace.replay import ReplayName
    from zerotrace.store_opensearch import OpenSearchStore

    into = ReplayName(args.replay)
    store = OpenSearchStore(common.opensearch, suffix=into.index_suffix)
    http, grpc = _start_apis(store, args, common.api_token)
    say(
        f"query: serving replay {into.name} from {common.opensearch}; HTTP {http.url}/, "
        f"gRPC {grpc.address}; {access_line(common.api_token)}; Ctrl-C stops"
    )
    stop = StopFlag()
    try:
        while not stop:
            stop.wait(1.0)
    finally:
        http.stop()
        grpc.stop()
        store.close()
    return 0


def _start_apis(store: Any, args: argparse.Namespace, token: str) -> tuple[Any, Any]:
    """The HTTP and gRPC APIs over `store`, on --host and the ports of `args`."""
    from zerotrace_query.grpc_api import GrpcApi
    from zerotrace_query.http_api import HttpApi

    http = HttpApi(store, host=args.host, port=args.http_port, token=token).start()
    grpc = GrpcApi(store, host=args.host, port=args.grpc_port, token=token).start()
    return http, grpc


def access_line(token: str) -> str:
    """Who may ask the APIs, for the start-up line; never the token itself."""
    if not token:
        return "no API token (anyone who reaches these ports may query)"
    return "bearer token $ZEROTRACE_API_TOKEN required (web page: open /?token=... once)"


def spans(args: argparse.Namespace) -> int:
    token = settings.load(settings.CommonSettings).api_token
    if args.grpc:
        import grpc

        from zerotrace_query.grpc_api import list_spans

        try:
            found = list_spans(args.grpc, token, **_span_filters(args))
        except grpc.RpcError as exc:
            why = f"query service at {args.grpc}: {exc.details()}"
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                raise TransientIO(f"no {why}") from None
            raise ConfigError(f"the {why}") from None
        for span in found:
            print(_span_line(span.start_ns, span.end_ns, span.status, span.kind, span.process_name,
                             span.pid, span.name))  # fmt: skip
        return 0
    base = args.http or "http://127.0.0.1:8080"
    body = json.loads(fetch(base, SPANS_PATH, _span_filters(args), token, timeout_s=10))
    for span in body["spans"]:
        print(_span_line(span["start_ns"], span["end_ns"], span["status"], span["kind"],
                         span["process_name"], span["pid"], span["name"]))  # fmt: skip
    return 0


def _span_filters(args: argparse.Namespace) -> dict[str, Any]:
    """The `spans` command's filters as the APIs name them (durations in ns)."""
    return {
        "kind": args.kind,
        "protocol": args.protocol,
        "service": args.service,
        "status": args.status.upper(),
        "min_duration_ns": round(args.min_ms * 1e6),
        "max_duration_ns": round(args.max_ms * 1e6),
        "pid": args.pid,
        "limit": args.limit,
    }


def _span_line(
    start_ns: Any, end_ns: Any, status: Any, kind: Any, process: Any, pid: Any, name: Any
) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(int(start_ns) / 1e9))
    took_ms = (int(end_ns) - int(start_ns)) / 1e6
    return f"{at} {took_ms:9.3f} ms {status or '-':5} {kind:18} {process}[{pid}] {name}"


def topics(args: argparse.Namespace) -> int:
    from zerotrace import names

    try:
        chosen = [names.topic_named(n) for n in args.names] or list(names.ALL_TOPICS)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    if args.create:
        from zerotrace.bus_kafka import KafkaBus

        common = settings.load(settings.CommonSettings)
        KafkaBus(common.kafka, security=kafka_security(common)).ensure_topics(chosen)
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
