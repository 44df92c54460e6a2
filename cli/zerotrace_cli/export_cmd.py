"""`zerotrace export`: a time window of the store's records, out to the tools users already run:
Parquet files for a data lake, Grafana Pyroscope for profiles, an OTLP collector or Zipkin for
traces. This file parses the arguments, opens the store and reports; the exports themselves
are the query service's (parquet_sink, pyroscope_push, otlp_export, zipkin_export).

The store is the one the other commands use: OpenSearch at $ZEROTRACE_OPENSEARCH (the
distributed mode) unless --local or --store names the embedded mode's DuckDB file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zerotrace import names, settings
from zerotrace.errors import ConfigError, TransientIO
from zerotrace.replay import ReplayName, parse_time
from zerotrace.store import Query, Store
from zerotrace_cli.common import embedded_store_path, say
from zerotrace_collector.probes.profile import DEFAULT_RATE_HZ
from zerotrace_query.parquet_export import RECORD_NAMES, RECORD_TYPES, record_type
from zerotrace_query.pyroscope_export import FORMATS as PYROSCOPE_FORMATS

FORMATS = ("parquet", "pyroscope", "otlp-grpc", "otlp-http", "zipkin")
# --format -> (module with export_window(store, from_ns, to_ns, endpoint, ...), extra args):
# the trace exports, imported when asked for.
TRACE_EXPORTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "otlp-grpc": ("zerotrace_query.otlp_export", (names.PROTOCOL_GRPC,)),
    "otlp-http": ("zerotrace_query.otlp_export", ("http",)),
    "zipkin": ("zerotrace_query.zipkin_export", ()),
}
PROGRESS_EVERY_S = 1.0
NS_PER_MS = 1_000_000
# A number of 17 digits or more is ns since the epoch (19 digits today); fewer, as replay's
# --from reads them: seconds, or milliseconds from 13 digits.
_NS_DIGITS = 17
RELATIVE_TIME = re.compile(r"^-\d+(\.\d+)?[smhd]?$|^-\.\d+[smhd]?$")

EXAMPLES = """\
examples:
  zerotrace export --format parquet --from -1h ./lake
      the last hour of spans, LLM requests, trace edges and profiles, as
      ./lake/record=spans/date=2026-12-05/node=gpu-07/part-<from>_<to>.parquet ...
  zerotrace export --format parquet --local --from 2026-12-05T10:00:00Z \\
      --to 2026-12-05T11:00:00Z --records spans,llm ./lake   (the embedded run's DuckDB file)
  zerotrace export --format pyroscope --endpoint http://127.0.0.1:4040 --from -15m
  zerotrace export --format otlp-grpc --endpoint 127.0.0.1:4317 --from -10m
  zerotrace export --format zipkin --endpoint http://127.0.0.1:9411 --from -10m

read the Parquet files back:
  duckdb -c "SELECT kind, count(*) FROM read_parquet('lake/record=spans/**/*.parquet',
             hive_partitioning=true) GROUP BY kind"
  spark.read.parquet("lake/record=spans")       (partition columns: date, node)

Parquet: one file per record type, UTC date and node, named after the window. Exporting the
same --from/--to again REPLACES that window's files (nothing is duplicated); other windows'
files stay beside them, so export adjoining windows, not overlapping ones. Spans carry the
trace id and parent their links give them. A trace edge is filed under its child span's node.

Pyroscope: one push per profile window (app = service; labels node, pid, profile_type), tried
again on 429 and 5xx as Retry-After asks. Pushing the same window twice adds it twice.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="write a time window out: Parquet files, Pyroscope, OTLP, Zipkin",
        description="Export the records of [--from, --to) from the store: --format parquet writes"
        " files to DIR; pyroscope, otlp-grpc, otlp-http and zipkin send to --endpoint. Progress"
        " on stderr, what was written on stdout.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # `--from -1h` is a value, not an option: argparse takes `-<digits>...` for a value only
    # when it looks like a negative number, so teach this parser the relative times too.
    p._negative_number_matcher = RELATIVE_TIME
    p.add_argument("folder", nargs="?", type=Path, metavar="DIR", help="--format parquet: where")
    p.add_argument("--format", required=True, choices=FORMATS, help="where the records go")
    p.add_argument(
        "--from",
        dest="start",
        required=True,
        help="start: now, -15m (s, m, h, d), epoch s, ms or ns, ISO 8601 (UTC without a zone)",
    )
    p.add_argument("--to", dest="end", default="now", help="end, excluded (default: now)")
    p.add_argument("--endpoint", default="", help="pyroscope, otlp-*, zipkin: the server's URL")
    p.add_argument(
        "--records",
        default=",".join(RECORD_NAMES),
        help=f"parquet: which record types, comma-separated (default {','.join(RECORD_NAMES)})",
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="read the embedded mode's DuckDB file ($ZEROTRACE_HOME/embedded.duckdb), not"
        " OpenSearch",
    )
    p.add_argument("--store", type=Path, help="read this DuckDB file (implies --local)")
    p.add_argument(
        "--replay", default="", metavar="NAME", help="a replay's records (replay --into NAME)"
    )
    p.add_argument(
        "--pyroscope-format",
        choices=PYROSCOPE_FORMATS,
        default="pprof",
        help="pyroscope: pprof (every profile type) or folded (ON_CPU and GPU memory only)",
    )
    p.add_argument(
        "--sample-hz",
        type=int,
        default=DEFAULT_RATE_HZ,
        help=f"pyroscope: the on-CPU sampling rate the profiles were taken at (default"
        f" {DEFAULT_RATE_HZ})",
    )
    p.add_argument("--tenant", default="", help="pyroscope: X-Scope-OrgID of a multi-tenant one")
    p.set_defaults(handler=export)


def time_ns(text: str, now_ns: int) -> int:
    """ns since the epoch for --from/--to: replay's forms (now, -15m, epoch seconds or
    milliseconds, ISO 8601), and ns since the epoch (17 digits or more)."""
    text = text.strip()
    if re.fullmatch(rf"\d{{{_NS_DIGITS},}}", text):
        return int(text)
    return parse_time(text, now_ns // NS_PER_MS) * NS_PER_MS


def window_ns(start: str, end: str, now_ns: int) -> tuple[int, int]:
    from_ns, to_ns = time_ns(start, now_ns), time_ns(end, now_ns)
    if to_ns <= from_ns:
        raise ConfigError(f"--to ({iso(to_ns)}) must be later than --from ({iso(from_ns)})")
    return from_ns, to_ns


def iso(ns: int) -> str:
    return (
        datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        + f".{ns % 1_000_000_000 // NS_PER_MS:03d}Z"
    )


def check_args(args: argparse.Namespace) -> None:
    """ConfigError for arguments that do not go together."""
    if args.format == "parquet":
        if args.folder is None:
            raise ConfigError("--format parquet writes files: give the folder, e.g. ./lake")
        if args.endpoint:
            raise ConfigError("--format parquet writes files to DIR; --endpoint is not used")
    else:
        if not args.endpoint:
            raise ConfigError(f"--format {args.format} sends to a server: give --endpoint URL")
        if args.folder is not None:
            raise ConfigError(f"--format {args.format} writes no files: drop {args.folder}")
    if args.sample_hz <= 0:
        raise ConfigError("--sample-hz must be positive")


def records_of(text: str) -> list[Any]:
    """--records as record types, in the export's order."""
    wanted = [name.strip() for name in text.split(",") if name.strip()]
    try:
        chosen = {record_type(name).name for name in wanted}
    except ValueError as exc:
        raise ConfigError(f"--records: {exc}") from None
    if not chosen:
        raise ConfigError(f"--records: name at least one of {', '.join(RECORD_NAMES)}")
    return [r for r in RECORD_TYPES if r.name in chosen]


def open_store(args: argparse.Namespace, common: settings.CommonSettings) -> tuple[Store, str]:
    """The store to read and a few words naming it."""
    from zerotrace_query.documents import INDEX_SPECS

    suffix = ReplayName(args.replay).index_suffix if args.replay else ""
    store: Store
    if args.local or args.store:
        from zerotrace.store_duckdb import DuckDBStore

        path = args.store or embedded_store_path(common.home)
        if not path.exists():
            raise ConfigError(f"no DuckDB file at {path}: `zerotrace run` writes one")
        try:
            store = DuckDBStore(str(path), suffix=suffix)
        except TransientIO as exc:
            raise TransientIO(
                f"{exc} (a running `zerotrace run` holds it: stop it, or export from a copy)"
            ) from None
        where = str(path)
    else:
        from zerotrace.store_opensearch import OpenSearchStore

        if not getattr(args, "verbose", False):  # its client logs each failed call, traceback
            logging.getLogger("opensearch").setLevel(logging.ERROR)  # and all: one line is ours
        store = OpenSearchStore(common.opensearch, suffix=suffix)
        where = common.opensearch
    try:
        if args.replay:  # a replay that does not exist is a mistake, not an empty replay
            _check_replay(store, args.replay, where)
        for spec in INDEX_SPECS:
            store.ensure_index(spec)
    except BaseException:
        store.close()
        raise
    return store, where + (f" (replay {args.replay})" if args.replay else "")


def _check_replay(store: Store, name: str, where: str) -> None:
    from zerotrace_query.documents import SPANS

    try:
        store.count(SPANS.name, Query(limit=0))
    except ConfigError:
        raise ConfigError(
            f"no replay {name!r} in {where}: `zerotrace replay --into {name}` makes one"
        ) from None


def export(args: argparse.Namespace) -> int:
    check_args(args)
    records = records_of(args.records)
    from_ns, to_ns = window_ns(args.start, args.end, time.time_ns())
    common = settings.load(settings.CommonSettings)
    store, where = open_store(args, common)
    say(f"export {args.format}: [{iso(from_ns)}, {iso(to_ns)}) from {where}")
    try:
        if args.format == "parquet":
            return _parquet(store, args.folder, from_ns, to_ns, records)
        if args.format == "pyroscope":
            return _pyroscope(store, args, from_ns, to_ns)
        return _trace_export(store, args, from_ns, to_ns)
    finally:
        store.close()


class _Progress:
    """A stderr line at most once a second: records written per type."""

    def __init__(self, what: str) -> None:
        self.what, self.record, self.shown = what, "", 0.0

    def __call__(self, record: str, count: int) -> None:
        now = time.monotonic()
        if record != self.record:  # a type's first row: its first line a second later
            self.record, self.shown = record, now
        elif now - self.shown >= PROGRESS_EVERY_S:
            self.shown = now
            say(f"export {self.what}: {count:,} {record} so far")


def _parquet(store: Store, folder: Path, from_ns: int, to_ns: int, records: list[Any]) -> int:
    from zerotrace_query.parquet_sink import export_window

    written = export_window(store, folder, from_ns, to_ns, records, _Progress("parquet"))
    for record in records:
        say(
            f"export parquet: {written.rows(record.name):,} {record.name} records written in"
            f" {written.files(record.name)} files"
        )
    for record, fields in sorted(written.left_out.items()):
        say(f"export parquet: {record} fields not in the Parquet columns, left out: {fields}")
    print(written.summary())
    if written.replaced:
        print(f"  {written.replaced} files of an earlier export of this window replaced")
    files = f"{folder}/**/*.parquet"
    print(
        f"  read them: duckdb -c \"SELECT record, count(*) FROM read_parquet('{files}',"
        ' hive_partitioning=true, union_by_name=true) GROUP BY record"'
    )
    return 0


def _pyroscope(store: Store, args: argparse.Namespace, from_ns: int, to_ns: int) -> int:
    from zerotrace_query.pyroscope_push import PyroscopeClient, export_window

    client = PyroscopeClient(args.endpoint, tenant=args.tenant)
    progress = _Progress("pyroscope")
    pushed = export_window(
        store,
        from_ns,
        to_ns,
        client,
        args.pyroscope_format,
        args.sample_hz,
        lambda n: progress("profile windows pushed", n),
    )
    for kind, count in sorted(pushed.pushed.items()):
        say(f"export pyroscope: {count:,} {kind} windows pushed")
    print(pushed.summary())
    return 0


def _trace_export(store: Store, args: argparse.Namespace, from_ns: int, to_ns: int) -> int:
    module_name, extra = TRACE_EXPORTS[args.format]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise ConfigError(
                f"--format {args.format} is not in this build ({module_name} is missing)"
            ) from None
        raise ConfigError(f"--format {args.format} needs the Python module {exc.name}") from None
    sent = module.export_window(store, from_ns, to_ns, args.endpoint, *extra)
    say(f"export {args.format}: {int(sent.spans):,} spans sent")
    print(sent.summary())
    return 0
