"""`zerotrace gpu-report`: the chip comparison report, as a terminal table and with ``--html
FILE`` as one self-contained HTML page. Of recorded amd-smi, rocm-smi and npu-smi outputs (one
reading of one node per folder; see the collector's smi_recordings), or with ``--api URL`` of a
period of the GPU device windows a running query service holds (/api/v1/gpu/models). The
command parses arguments, reads or fetches, and prints; rendering is chip_report_view's."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zerotrace import settings
from zerotrace.errors import ConfigError
from zerotrace.replay import parse_time
from zerotrace_cli.api_fetch import fetch
from zerotrace_cli.chip_report_view import (
    PeriodFacts,
    render_html,
    render_text,
    rows_of_comparison,
)
from zerotrace_cli.export_cmd import RELATIVE_TIME
from zerotrace_collector.chip_report import ChipRow, chip_report
from zerotrace_collector.smi_recordings import read_recording
from zerotrace_collector.smi_values import SmiOutputError
from zerotrace_query.chip_compare import MODELS_PATH

MS_NS = 1_000_000
START_HINT = (
    ": start one with `zerotrace run` (embedded) or `zerotrace query` (distributed), or fix --api"
)
EXAMPLES = """examples:
  zerotrace gpu-report tests/fixtures/amd_smi/rocm-6.4 tests/fixtures/npu_smi/25.3.rc1-a3
  zerotrace gpu-report --api http://127.0.0.1:8080                      # the last hour
  zerotrace gpu-report --api http://127.0.0.1:8080 --last 24h --html chips.html
  zerotrace gpu-report --api http://gpu-query:8080 --from 2026-03-02T09:00 --to 2026-03-02T17:00
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "gpu-report",
        help="compare GPU/NPU chip models side by side: from recorded vendor CLI outputs, "
        "or over a period from a running query service (--api)",
        description="Per chip model: devices and samples, and per metric the min, mean and max\n"
        "(recordings also p50 and p95) and the share of samples where it was a gap.\n\n"
        "DIR...: recording folders (amd-smi static/metric/list/process JSON, rocm-smi\n"
        "--showallinfo JSON, npu-smi info and info -t TYPE text, as under\n"
        "tests/fixtures/amd_smi and tests/fixtures/npu_smi).\n\n"
        "--api URL: the GPU device windows of a period from a running query service\n"
        "(`zerotrace run` serves one on http://127.0.0.1:8080), which adds the windows, XID\n"
        "errors, counter increases (energy, ECC, PCIe replays) and what each model did not\n"
        "give. The period is the last hour, or --last DURATION up to now, or --from/--to.\n"
        "$ZEROTRACE_API_TOKEN is sent when set.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p._negative_number_matcher = RELATIVE_TIME  # `--from -2h` is a value, not an option
    p.add_argument("folders", nargs="*", type=Path, metavar="DIR", help="a recording folder")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write the report as HTML")
    p.add_argument("--api", metavar="URL", help="a query service's base URL: report its store")
    p.add_argument(
        "--last",
        metavar="DURATION",
        help="--api: the period up to now: 30m, 6h, 7d (s, m, h, d; default 1h)",
    )
    p.add_argument(
        "--from",
        dest="start",
        metavar="TIME",
        help="--api: start: -2h (before now), epoch seconds, or ISO 8601 (UTC without a zone)",
    )
    p.add_argument("--to", dest="end", metavar="TIME", help="--api: end, excluded (default now)")
    p.add_argument("--node", default="", help="--api: only this node's GPUs")
    p.set_defaults(handler=run)


def period_ns(args: argparse.Namespace, now_ms: int) -> tuple[int, int]:
    """[from, to) in ns of --last or --from/--to at time `now_ms`; ConfigError when they
    conflict or make no period."""
    if args.last and args.start:
        raise ConfigError("give --last or --from, not both")
    if args.start:
        from_ms = parse_time(args.start, now_ms)
    else:
        last = (args.last or "1h").strip()
        if not RELATIVE_TIME.match(f"-{last}") or not last[-1:].isalpha():
            raise ConfigError(f"--last {last!r}: use a number and s, m, h or d (e.g. 6h)")
        from_ms = parse_time(f"-{last}", now_ms)
    to_ms = parse_time(args.end, now_ms) if args.end else now_ms
    if to_ms <= from_ms:
        raise ConfigError("the period is empty: --to must be later than --from")
    return from_ms * MS_NS, to_ms * MS_NS


def fetch_comparison(base: str, params: Mapping[str, str], token: str = "") -> Any:
    """The /api/v1/gpu/models answer; ConfigError when refused, TransientIO when no service
    answers."""
    return json.loads(fetch(base, MODELS_PATH, params, token, hint=START_HINT))


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def period_line(body: Mapping[str, Any]) -> str:
    """What the report covers: the period, its windows, and the cut when there was one."""
    line = f"GPU windows from {_utc(body['from_ns'])} to {_utc(body['to_ns'])}"
    line += f": {body['windows']} windows"
    if body.get("node"):
        line += f" of node {body['node']}"
    if body.get("truncated"):
        line += f" (newest only, from {_utc(body['covered_from_ns'])}: {body['warning']})"
    return line


def _from_api(args: argparse.Namespace) -> tuple[list[ChipRow], dict[str, PeriodFacts], str]:
    from_ns, to_ns = period_ns(args, time.time_ns() // MS_NS)
    params = {"from": str(from_ns), "to": str(to_ns)}
    if args.node:
        params["node"] = args.node
    token = settings.load(settings.CommonSettings).api_token
    body = fetch_comparison(args.api, params, token)
    rows, facts = rows_of_comparison(body)
    return rows, facts, period_line(body)


def run(args: argparse.Namespace) -> int:
    if args.api and args.folders:
        raise ConfigError("give recording folders or --api, not both")
    if not args.api and (args.last or args.start or args.end or args.node):
        raise ConfigError("--last, --from, --to and --node need --api")
    if args.api:
        rows, facts, heading = _from_api(args)
        print(heading)
        print("\n".join(render_text(rows, facts)))
        if args.html is not None:
            html = render_html(rows, f"GPU chip comparison: {heading}", facts)
            args.html.write_text(html, encoding="utf-8")
        return 0
    if not args.folders:
        raise ConfigError("give recording folders (DIR...) or --api URL")
    samples = []
    for folder in args.folders:
        if not folder.is_dir():
            raise ConfigError(f"{folder}: not a folder")
        try:
            samples.extend(read_recording(folder))
        except SmiOutputError as exc:
            raise ConfigError(str(exc)) from None
    rows = chip_report(samples)
    print("\n".join(render_text(rows)))
    if args.html is not None:
        args.html.write_text(render_html(rows), encoding="utf-8")
    return 0
