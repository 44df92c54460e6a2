"""`zerotrace profile`: the top stacks, the top frames and a text flame graph of a time range,
read from a running query service's HTTP API (/api/v1/profiles/flamegraph); or the raw folded,
pprof, speedscope or JSON answer for other tools. Rendering is pure (render_profile); the
command only parses arguments, fetches and prints."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from zerotrace import settings
from zerotrace.clock import SystemClock
from zerotrace.errors import ConfigError
from zerotrace_cli import api_fetch
from zerotrace_query.flame_graph import PROFILE_TYPES

NS_PER_S = 1_000_000_000
_SPAN = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_SPAN_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FORMATS = ("text", "folded", "pprof", "speedscope", "json")
FLAMEGRAPH_PATH = "/api/v1/profiles/flamegraph"
START_HINT = (
    ": start one with `zerotrace query` (distributed) or `zerotrace run` (embedded), or pass --http"
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "profile",
        help="top stacks and a text flame graph from a running query service",
        description="Merges the profile windows of a time range (on-CPU samples, off-CPU time, "
        "GPU memory, GPU launches) and prints the heaviest stacks, the frames with the most "
        "self value and a flame graph as an indented tree. --format folded|pprof|speedscope "
        "writes a file for flamegraph.pl, `go tool pprof` or speedscope instead.",
    )
    p.add_argument("--http", default="http://127.0.0.1:8080", help="query service base URL")
    p.add_argument("--type", default="ON_CPU", choices=list(PROFILE_TYPES), help="profile type")
    p.add_argument("--service", default="", help="only this service (process name)")
    p.add_argument("--node", default="", help="only this node")
    p.add_argument("--pid", type=int, default=0, help="only this process")
    p.add_argument("--thread", type=int, default=0, help="only this thread id")
    p.add_argument("--frame", default="", help="only stacks with a frame containing this text")
    p.add_argument("--since", default="15m", help="time range up to now: 30s, 15m, 2h, 1d")
    p.add_argument("--from", dest="from_ns", type=int, default=0, help="start, ns since epoch")
    p.add_argument("--to", dest="to_ns", type=int, default=0, help="end, ns since epoch")
    p.add_argument("--by-thread", action="store_true", help="keep threads apart (first level)")
    p.add_argument("--top", type=int, default=10, help="how many stacks and frames to list")
    p.add_argument(
        "--min-percent", type=float, default=1.0, help="tree: hide frames below this share"
    )
    p.add_argument("--format", choices=FORMATS, default="text", help="what to print")
    p.add_argument("-o", "--output", default="", help="write to this file instead of stdout")
    p.set_defaults(handler=profile)


def span_ns(text: str) -> int:
    """'15m' -> ns; ConfigError for anything else."""
    match = _SPAN.fullmatch(text.strip())
    if not match:
        raise ConfigError(f"--since {text!r}: use a number and s, m, h or d (e.g. 15m)")
    return round(float(match[1]) * _SPAN_S[match[2]] * NS_PER_S)


def query_params(args: argparse.Namespace, now_ns: int) -> dict[str, str]:
    """The API's query parameters for these arguments, at time `now_ns`."""
    to_ns = args.to_ns or (0 if args.from_ns else now_ns)
    from_ns = args.from_ns or (to_ns - span_ns(args.since))
    params = {"type": args.type, "from": str(from_ns)}
    if to_ns:
        params["to"] = str(to_ns)
    for name in ("service", "node", "frame"):
        if getattr(args, name):
            params[name] = getattr(args, name)
    for name in ("pid", "thread"):
        if getattr(args, name):
            params[name] = str(getattr(args, name))
    if args.by_thread:
        params["group"] = "thread"
    if args.format != "text":
        params["format"] = args.format
    return params


def fetch(base: str, params: Mapping[str, str], token: str = "") -> bytes:
    """The flame graph route's answer; token: the API's bearer token ("" = none)."""
    return api_fetch.fetch(
        base,
        FLAMEGRAPH_PATH,
        params,
        token,
        refused="the query service refused the request",
        hint=START_HINT,
    )


def format_value(value: float, unit: str, profile_type: str) -> str:
    if unit == "nanoseconds":
        for size, name in ((NS_PER_S, "s"), (1_000_000, "ms"), (1_000, "µs")):
            if abs(value) >= size:
                return f"{value / size:.2f} {name}"
        return f"{value:.0f} ns"
    if unit == "bytes":
        for size, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(value) >= size:
                return f"{value / size:.1f} {name}"
        return f"{value:.0f} B"
    word = "launches" if profile_type == "GPU_LAUNCH" else "samples"
    return f"{value:,.0f} {word}"


def leaf_stacks(
    node: Mapping[str, Any], path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], int]]:
    """(stack root first, self value) for every node with self value: the folded stacks back."""
    out = [(path, int(node["self"]))] if path and node["self"] else []
    for child in node["children"]:
        out.extend(leaf_stacks(child, (*path, child["name"])))
    return out


def _frame_totals(
    node: Mapping[str, Any], on_path: frozenset[str], out: dict[str, list[int]]
) -> None:
    for child in node["children"]:
        entry = out.setdefault(child["name"], [0, 0])
        entry[0] += int(child["self"])
        if child["name"] not in on_path:  # recursion counts once
            entry[1] += int(child["total"])
        _frame_totals(child, on_path | {child["name"]}, out)


def render_profile(body: Mapping[str, Any], top: int = 10, min_percent: float = 1.0) -> str:
    """The text answer for one /api/v1/profiles/flamegraph JSON body."""
    ptype, unit, total = body["type"], body["unit"], int(body["total"])

    def value(v: float) -> str:
        return format_value(v, unit, ptype)

    def share(v: float) -> str:
        return f"{100 * v / total:5.1f}%" if total else "    –"

    def when(ns: int) -> str:
        return datetime.fromtimestamp(ns / NS_PER_S, UTC).strftime("%Y-%m-%d %H:%M:%S")

    lines = [
        f"{ptype} · {value(total)} · {body['windows']} windows · "
        f"{when(body['from_ns'])} → {when(body['to_ns'])} UTC"
    ]
    if body.get("dropped"):
        lines.append(f"dropped while profiling: {body['dropped']:,} (counted, not shown)")
    if body.get("warning"):
        lines.append(f"warning: {body['warning']}")
    if not total:
        lines.append("no samples in this range: widen --since or loosen the filters")
        return "\n".join(lines) + "\n"
    lines += ["", f"Top {top} stacks by self value:"]
    stacks = sorted(leaf_stacks(body["root"]), key=lambda s: (-s[1], s[0]))[:top]
    for stack, weight in stacks:
        lines.append(f"  {share(weight)} {value(weight):>16}  {stack[-1]}")
        callers = list(stack[:-1])
        shown = callers[-4:]
        via = " ← ".join(reversed(shown)) + (" ← …" if len(callers) > len(shown) else "")
        if via:
            lines.append(f"  {'':23}  ← {via}")
    frames: dict[str, list[int]] = {}
    _frame_totals(body["root"], frozenset(), frames)
    lines += ["", f"Top {top} frames by self value (self / total):"]
    ranked = sorted(frames.items(), key=lambda f: (-f[1][0], f[0]))[:top]
    for name, (self_value, frame_total) in ranked:
        if self_value:
            lines.append(f"  {share(self_value)} {share(frame_total)}  {name}")
    lines += ["", f"Flame graph (frames ≥ {min_percent:g}% of the total):"]

    def tree(node: Mapping[str, Any], depth: int) -> None:
        bar = "█" * max(1, round(20 * node["total"] / total))
        lines.append(f"  {share(node['total'])} {bar:<20} {'  ' * depth}{node['name']}")
        for child in sorted(node["children"], key=lambda c: (-c["total"], c["name"])):
            if 100 * child["total"] >= min_percent * total:
                tree(child, depth + 1)

    tree(body["root"], 0)
    return "\n".join(lines) + "\n"


def profile(args: argparse.Namespace) -> int:
    params = query_params(args, SystemClock().now_ns())
    data = fetch(args.http, params, settings.load(settings.CommonSettings).api_token)
    if args.format == "text":
        out = render_profile(json.loads(data), args.top, args.min_percent).encode()
    else:
        out = data
    if args.output:
        with open(args.output, "wb") as f:
            f.write(out)
        print(f"wrote {len(out):,} bytes ({args.format}) to {args.output}", file=sys.stderr)
    elif args.format == "pprof" and sys.stdout.isatty():
        raise ConfigError("pprof is binary: pass -o FILE (e.g. -o cpu.pb.gz)")
    else:
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
    return 0
