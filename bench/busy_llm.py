"""Observing a CPU-bound LLM server: what zerotrace costs it and how right it stays when the
server keeps every core busy, over HTTP and over HTTPS.

The server is tests/harness/openai_server.py with `--burn-ms-per-token`: every token costs
that much CPU (SHA-256 in a thread per core, native code that releases the GIL, as a tensor
library's forward pass does) instead of a paced sleep, so the load saturates the machine. The
clients are bench/llm_overhead.py's (tests/harness/llm_load.py: their own send and arrival
times are the truth). Each round measures the load unobserved and observed by
`zerotrace run --no-files --quiet --pid SERVER` at its defaults (its CPU budget included), the
order alternating between rounds; zerotrace's records are read from its embedded store.

Per mode: served requests/s, p50 and p99 TTFT of the streamed requests, how busy the cores
were, how long requests waited before the server's app got them (its --truth stamps: a wait a
server-side observer cannot see, as its TTFT starts at the read), and, observed, the records
stored against the requests sent, the largest |TTFT| and |TPOT| difference from each client's
truth, and how many misses that wait explains. Targets, per scheme, over the means of the rounds:
throughput loss <= 5 %, added p99 TTFT <= 1 ms, one record for every request, and every
request's TTFT and TPOT within 2 ms of its client's truth (tests/harness/accuracy.py's
`compare`: 2 ms or 2 %, whichever is larger, beyond the client's own measured uncertainty).

With --pieces-too each round also runs the load observed by zerotrace with its work in 0.5 ms
pieces (ZEROTRACE_CPU_SLICE_US=500, zerotrace.cpu_slices; off by default), the three modes in
an order that turns each round, and prints that mode's added p99 TTFT and throughput loss
beside the default's: the pieces' effect measured in one sitting.

Run (root, for eBPF): .venv/bin/python -m bench.busy_llm [--requests 300 --rounds 2
    --concurrency 16 --burn-ms 5 --pieces-too]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.llm_overhead import (
    SETTLE_S,
    Measure,
    catch_up,
    measure,
    openai_server,
    percentile,
    zerotrace_attached,
)
from tests.e2e.llm_fixtures import read_server_truth, self_signed
from tests.harness.accuracy import TOLERANCE_NS, compare, truth_tpot, truth_ttft
from tests.harness.llm_load import KINDS, Truth, plan, run_load
from zerotrace.cpu_slices import MEASURED_SLICE_US
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

TARGET_LOSS_PCT = 5.0
TARGET_ADDED_P99_MS = 1.0
TOLERANCE_MS = TOLERANCE_NS / 1e6
# 5 ms of CPU a token: at most 400 tokens/s on 2 cores, the rate bench.llm_overhead's paced
# load asks for at concurrency 16; the clients' own CPU leaves the server 200-300 of them.
BURN_MS_PER_TOKEN = 5.0
SERVER = "SERVER"
# The observed mode with zerotrace's work in pieces (--pieces-too).
PIECES = "pieces"
MODE_SETTINGS: dict[str, dict[str, str]] = {
    "on": {},
    PIECES: {"ZEROTRACE_CPU_SLICE_US": str(MEASURED_SLICE_US)},
}


@dataclass
class Accuracy:
    """zerotrace's records of one observed run against the clients' truth."""

    recorded: int  # measured requests with exactly one record at the server
    worst_ttft_ms: float
    worst_tpot_ms: float
    problems: list[str]  # accuracy.compare against the clients' truth, one line each
    outside: int = 0  # requests with a problem
    # Of those, the ones the server's own stamps explain: the request waited for the server
    # to read it (a busy core), which a server-side observer cannot see.
    server_waits: int = 0
    sides: list[str] = field(default_factory=list)  # error_sides of the requests outside


@dataclass
class Run:
    scheme: str  # "http" or "https"
    mode: str  # "off" (unobserved), "on" (zerotrace at its defaults) or PIECES
    requests: int
    measure: Measure
    busy_pct: float  # the machine's cores busy over the load, in %
    read_p99_ms: float  # p99 of read_delays_ms
    accuracy: Accuracy | None = None  # observed runs only
    notes: list[str] = field(default_factory=list)  # from zerotrace's summary: its CPU, losses


@dataclass(frozen=True)
class Verdict:
    scheme: str
    target: str
    figure: str
    ok: bool


# ---- pure figures ---------------------------------------------------------------------------


def cpu_busy_pct(before: str, after: str) -> float:
    """How busy the machine's cores were between two readings of /proc/stat, in %: the
    aggregate "cpu" line's time outside idle and iowait over its total."""

    def times(stat: str) -> tuple[int, int]:
        line = next(row for row in stat.splitlines() if row.startswith("cpu "))
        values = [int(v) for v in line.split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return sum(values) - idle, sum(values)

    busy0, total0 = times(before)
    busy1, total1 = times(after)
    return 100 * (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0


def measured_server_records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records zerotrace made at the server of measured requests (warm-ups are not)."""
    return [
        r
        for r in records
        if r.get("observation_point") == SERVER and str(r.get("model", "")).startswith("model-")
    ]


def worst_errors(
    truths: Iterable[Mapping[str, Any]], records: Iterable[Mapping[str, Any]]
) -> tuple[float, float]:
    """Largest |TTFT| and |TPOT| differences in ms between each request's one server-side
    record and its client's truth (requests without exactly one record are counted apart)."""
    by_model: dict[str, list[Mapping[str, Any]]] = {}
    for r in measured_server_records(records):
        by_model.setdefault(str(r["model"]), []).append(r)
    ttft = tpot = 0.0
    for t in truths:
        found = by_model.get(t["model"], [])
        if t["error"] or len(found) != 1 or found[0].get("ttft_ns") is None:
            continue
        r = found[0]
        ttft = max(ttft, abs(int(r["ttft_ns"]) - truth_ttft(t)) / 1e6)
        truth = truth_tpot(t)
        if truth is not None and r.get("tpot_ns") is not None:
            tpot = max(tpot, abs(int(r["tpot_ns"]) - truth) / 1e6)
    return ttft, tpot


def error_sides(
    truths: Iterable[Mapping[str, Any]],
    records: Iterable[Mapping[str, Any]],
    models: Iterable[str],
    clock_offset_ns: int,
) -> list[str]:
    """Which end of each listed request's TTFT is off, one line each: zerotrace's start
    against its client's send, and its first token against the client's read of it, with
    the client's own slack for each (how long its send took; how much earlier the token may
    have come, tests/harness/llm_load.py). *clock_offset_ns*: the records' epoch time less
    the truths' CLOCK_MONOTONIC time."""
    truth_of = {str(t["model"]): t for t in truths}
    record_of: dict[str, Mapping[str, Any]] = {}
    for one in measured_server_records(records):
        record_of.setdefault(str(one["model"]), one)
    lines = []
    for model in models:
        t, found = truth_of.get(model), record_of.get(model)
        if t is None or found is None or not t["token_ns"]:
            continue
        if found.get("ttft_ns") is None or found.get("start_ns") is None:
            continue
        r = found
        start = int(r["start_ns"]) - clock_offset_ns
        first = start + int(r["ttft_ns"])
        waits = t.get("token_wait_ns") or [0]
        lines.append(
            f"{model}: start {(start - int(t['sent_ns'])) / 1e6:+.2f} ms from the client's "
            f"send (which took {(int(t['sent_done_ns']) - int(t['sent_ns'])) / 1e6:.2f} ms), "
            f"first token {(first - int(t['token_ns'][0])) / 1e6:+.2f} ms from its read "
            f"(which may be {int(waits[0]) / 1e6:.2f} ms late)"
        )
    return lines


def assess(
    truths: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    stamps: Mapping[str, Mapping[str, Any]],
    clock_offset_ns: int = 0,
) -> Accuracy:
    """Records against truths; *stamps*: the server's own, by model (openai_server --truth);
    *clock_offset_ns*: as error_sides takes it."""
    counts: dict[str, int] = {}
    for r in measured_server_records(records):
        counts[str(r["model"])] = counts.get(str(r["model"]), 0) + 1
    problems = compare(truths, records, SERVER)
    outside = {line.split(":", 1)[0] for line in problems}  # compare's lines start "model: "
    unexplained = {line.split(":", 1)[0] for line in compare(truths, records, SERVER, stamps)}
    ttft, tpot = worst_errors(truths, records)
    return Accuracy(
        recorded=sum(counts.get(t["model"]) == 1 for t in truths),
        worst_ttft_ms=ttft,
        worst_tpot_ms=tpot,
        problems=problems,
        outside=len(outside),
        server_waits=len(outside - unexplained),
        sides=error_sides(truths, records, sorted(outside), clock_offset_ns),
    )


def read_delays_ms(
    truths: Iterable[Mapping[str, Any]], stamps: Mapping[str, Mapping[str, Any]]
) -> list[float]:
    """For each request, how long after its client sent it the server's app got it (the
    server's --truth stamps): time in the server's socket and event loop, which no observer of
    the server's syscalls sees."""
    return [
        (int(stamps[t["model"]]["request_ns"]) - int(t["sent_ns"])) / 1e6
        for t in truths
        if not t["error"] and t["model"] in stamps
    ]


def summary_notes(summary: str) -> list[str]:
    """The lines of zerotrace's summary that explain a cost or a loss: its own CPU time, and
    what its socket probe lost or shed, and how often its loop paused for the server
    ("collector: cpu_pauses N")."""
    keep = ("zerotrace itself:", "socket:", "collector:")
    return [line.strip() for line in summary.splitlines() if line.strip().startswith(keep)]


MODE_NAMES = ("off", "on", PIECES)


def round_modes(round_: int, pieces_too: bool) -> tuple[str, ...]:
    """The modes of a round, in an order that turns each round, so that no mode always runs
    first (or right after another) on a machine whose speed drifts."""
    modes = MODE_NAMES if pieces_too else MODE_NAMES[:2]
    turn = round_ % len(modes)
    return modes[turn:] + modes[:turn]


def mode_lines(round_: int, mode: str, run: Run) -> list[str]:
    m = run.measure
    lines = [
        f"{run.scheme:>5} round {round_} {mode:>3}: {m.requests_per_s:6.1f} req/s, "
        f"TTFT p50 {m.p50_ttft_ms:6.2f} ms p99 {m.p99_ttft_ms:6.2f} ms, "
        f"cores {run.busy_pct:3.0f} % busy, {m.failed} failed, "
        f"requests read by the server p99 {run.read_p99_ms:.2f} ms after sent"
    ]
    a = run.accuracy
    if a is not None:
        why = f" ({a.server_waits} of them: the request waited for the server)" if a.outside else ""
        lines.append(
            f"{'':>20}{a.recorded}/{run.requests} recorded, worst |error| TTFT "
            f"{a.worst_ttft_ms:.2f} ms TPOT {a.worst_tpot_ms:.2f} ms, "
            f"{a.outside} outside tolerance{why}"
        )
    return lines + [f"{'':>20}[zerotrace] {note}" for note in run.notes]


def verdicts(runs: Sequence[Run]) -> list[Verdict]:
    """Every target, per scheme, over the means of that scheme's rounds."""
    out = []
    for scheme in dict.fromkeys(r.scheme for r in runs):
        off = [r for r in runs if r.scheme == scheme and r.mode == "off"]
        on = [r for r in runs if r.scheme == scheme and r.mode == "on"]
        if not off or not on:
            continue
        rps_off = statistics.mean(r.measure.requests_per_s for r in off)
        rps_on = statistics.mean(r.measure.requests_per_s for r in on)
        loss = 100 * (rps_off - rps_on) / rps_off if rps_off else float("nan")
        added = statistics.mean(r.measure.p99_ttft_ms for r in on) - statistics.mean(
            r.measure.p99_ttft_ms for r in off
        )
        accs = [r.accuracy for r in on if r.accuracy is not None]
        recorded = [f"{a.recorded}/{r.requests}" for a, r in zip(accs, on, strict=True)]
        every = all(
            a.recorded == r.requests and not r.measure.failed for a, r in zip(accs, on, strict=True)
        )
        outside = sum(a.outside for a in accs)
        waits = sum(a.server_waits for a in accs)
        worst_ttft = max(a.worst_ttft_ms for a in accs)
        worst_tpot = max(a.worst_tpot_ms for a in accs)
        out += [
            Verdict(
                scheme,
                f"throughput loss <= {TARGET_LOSS_PCT:g} %",
                f"{loss:+.1f} % ({rps_off:.1f} -> {rps_on:.1f} req/s)",
                loss <= TARGET_LOSS_PCT,
            ),
            Verdict(
                scheme,
                f"added p99 TTFT <= {TARGET_ADDED_P99_MS:g} ms",
                f"{added:+.2f} ms",
                added <= TARGET_ADDED_P99_MS,
            ),
            Verdict(scheme, "every request recorded", ", ".join(recorded), every),
            Verdict(
                scheme,
                f"TTFT and TPOT within {TOLERANCE_MS:g} ms of each client",
                f"{outside} outside ({waits} waited for the server); worst |error| "
                f"TTFT {worst_ttft:.2f} ms, TPOT {worst_tpot:.2f} ms",
                outside == 0 and sum(a.recorded for a in accs) > 0,
            ),
        ]
    return out


def cost_of(off: Sequence[Run], on: Sequence[Run]) -> tuple[float, float]:
    """Throughput loss (%) and added p99 TTFT (ms) of *on* against *off*, over their means."""
    rps_off = statistics.mean(r.measure.requests_per_s for r in off)
    rps_on = statistics.mean(r.measure.requests_per_s for r in on)
    loss = 100 * (rps_off - rps_on) / rps_off if rps_off else float("nan")
    p99_off = statistics.mean(r.measure.p99_ttft_ms for r in off)
    return loss, statistics.mean(r.measure.p99_ttft_ms for r in on) - p99_off


def pieces_lines(runs: Sequence[Run]) -> list[str]:
    """--pieces-too: zerotrace's cost with its work in whole batches (the default) and in
    pieces, each against the same unobserved rounds."""
    out = []
    for scheme in dict.fromkeys(r.scheme for r in runs):
        by_mode = {m: [r for r in runs if r.scheme == scheme and r.mode == m] for m in MODE_NAMES}
        if not all(by_mode.values()):
            continue
        for mode, label in (("on", "in whole batches (default)"), (PIECES, "in 0.5 ms pieces")):
            loss, added = cost_of(by_mode["off"], by_mode[mode])
            out.append(
                f"{scheme:>5}  zerotrace's work {label:<26}: added p99 TTFT {added:+.2f} ms, "
                f"throughput loss {loss:+.1f} %"
            )
    return out


def noise_lines(runs: Sequence[Run]) -> list[str]:
    """How far the unobserved rounds of each scheme differ among themselves: the noise a
    verdict's difference must stand out of (on these shared VMs it is often larger than the
    targets; more rounds narrow the means, not the spread)."""
    out = []
    for scheme in dict.fromkeys(r.scheme for r in runs):
        off = [r.measure for r in runs if r.scheme == scheme and r.mode == "off"]
        if len(off) < 2:
            continue
        rps = [m.requests_per_s for m in off]
        p99 = [m.p99_ttft_ms for m in off]
        spread_pct = 100 * (max(rps) - min(rps)) / statistics.mean(rps) if any(rps) else 0.0
        out.append(
            f"{scheme:>5}  unobserved rounds among themselves: {min(rps):.1f}-{max(rps):.1f} "
            f"req/s ({spread_pct:.1f} % apart), p99 TTFT {min(p99):.2f}-{max(p99):.2f} ms "
            f"({max(p99) - min(p99):.2f} ms apart)"
        )
    return out


def verdict_lines(found: Sequence[Verdict]) -> list[str]:
    width = max((len(v.target) for v in found), default=0)
    return [
        f"{v.scheme:>5}  {v.target:<{width}}  {v.figure}  {'PASS' if v.ok else 'MISS'}"
        for v in found
    ]


# ---- the shell: server, load, zerotrace, store ----------------------------------------------


@dataclass
class Server:
    scheme: str
    url: str
    pid: int
    cafile: str | None
    truth: Path


@contextmanager
def busy_server(scheme: str, burn_ms: float, folder: Path) -> Iterator[Server]:
    truth = folder / f"server-truth-{scheme}.jsonl"
    options = ["--burn-ms-per-token", str(burn_ms), "--truth", str(truth)]
    cafile = None
    if scheme == "https":
        cert, key = self_signed(folder)
        options += ["--certfile", str(cert), "--keyfile", str(key)]
        cafile = str(cert)
    with openai_server(options, scheme) as (url, pid):
        yield Server(scheme, url, pid, cafile, truth)


def read_stat() -> str:
    return Path("/proc/stat").read_text()


def read_records(store_file: Path) -> list[dict[str, Any]]:
    store = DuckDBStore(str(store_file))
    try:
        return list(store.search("llm", Query(limit=10_000)))
    finally:
        store.close()


def load(server: Server, args: argparse.Namespace) -> tuple[list[dict[str, Any]], float]:
    """The clients' truths, and how busy the cores were meanwhile."""
    before = read_stat()
    truths = run_load(server.url, plan(args.requests), args.concurrency, server.cafile)
    return [asdict(t) for t in truths], cpu_busy_pct(before, read_stat())


def run_mode(mode: str, server: Server, args: argparse.Namespace, store: Path) -> Run:
    accuracy, notes = None, []
    if mode == "off":
        truths, busy = load(server, args)
    else:
        summary = store.with_suffix(".summary")
        with zerotrace_attached(server.pid, store, summary, MODE_SETTINGS[mode]) as http_port:
            time.sleep(SETTLE_S)  # steady state: not the end of its start-up
            truths, busy = load(server, args)
            catch_up(http_port, args.requests + args.concurrency * len(KINDS))  # and warm-ups
        notes = summary_notes(summary.read_text())
    stamps = read_server_truth(server.truth)  # the last line per model: this run's
    if mode != "off":
        accuracy = assess(truths, read_records(store), stamps, time.time_ns() - time.monotonic_ns())
    measured = measure(mode, [Truth(**t) for t in truths])
    read_p99 = percentile(read_delays_ms(truths, stamps), 0.99)
    return Run(server.scheme, mode, args.requests, measured, busy, read_p99, accuracy, notes)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300, help="measured requests a run")
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs per scheme")
    parser.add_argument("--concurrency", type=int, default=16, help="client processes")
    parser.add_argument(
        "--burn-ms", type=float, default=BURN_MS_PER_TOKEN, help="CPU ms each token costs"
    )
    parser.add_argument(
        "--schemes", default="http,https", help="comma-separated: http, https or both"
    )
    parser.add_argument(
        "--pieces-too",
        action="store_true",
        help="also observe with zerotrace's work in 0.5 ms pieces (ZEROTRACE_CPU_SLICE_US=500)",
    )
    args = parser.parse_args()
    if args.requests < 1 or args.rounds < 1 or args.concurrency < 1 or args.burn_ms <= 0:
        parser.error("--requests, --rounds, --concurrency and --burn-ms must be positive")
    schemes = args.schemes.split(",")
    if not schemes or set(schemes) - {"http", "https"}:
        parser.error("--schemes: http, https or http,https")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
        for scheme in schemes:
            with busy_server(scheme, args.burn_ms, Path(tmp)) as server:
                for round_ in range(args.rounds):
                    for mode in round_modes(round_, args.pieces_too):
                        store = Path(tmp) / f"zt-{scheme}-{round_}-{mode}.duckdb"  # its own
                        run = run_mode(mode, server, args, store)
                        runs.append(run)
                        print("\n".join(mode_lines(round_ + 1, mode, run)), flush=True)
                        for problem in run.accuracy.problems[:3] if run.accuracy else []:
                            print(f"{'':>20}{problem}")
                        for side in run.accuracy.sides[:3] if run.accuracy else []:
                            print(f"{'':>20}{side}")
    print()
    if args.requests < 100:
        print(f"(only {args.requests} requests a run: the p99 is close to the maximum, so noisy)")
    for line in verdict_lines(verdicts(runs)) + pieces_lines(runs) + noise_lines(runs):
        print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
