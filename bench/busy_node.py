"""Does the CPU profiler keep what it should on a node whose cores are all busy (issue 9)?

A Python program with a known profile (bench/workloads/known_profile.py: ``outer -> middle ->
hot_loop`` in Python, ``call_native`` into libc through ctypes, ``wait_for_backend`` sleeping)
runs for --seconds under ``zerotrace run --profile``, twice: on a quiet machine, then beside
one CPU-bound neighbour per core (``python3 -c 'while True: pass'``, normal priority). The
program writes down its own truth (its CPU time from os.times(), the time it slept, its pid);
the figures are held against it:

- samples expected (the program's CPU seconds x the sampling rate) against the ON_CPU samples
  of its pid in the DuckDB store zerotrace wrote, and the share of those with a ``py:`` frame;
- the OFF_CPU weight of stacks through ``wait_for_backend`` against the sleep it measured;
- what zerotrace counted lost and shed (its --summary-json where it has one, else the feed
  lines of its printed summary) and what the profile windows dropped;
- zerotrace's own CPU time while it observed (from its --summary-json, else its /proc times,
  less what they were at its `web page` line) against its budget in cores.

zerotrace is given --seconds + 180 s to finish (a starved one may take long to drain); past
that it gets SIGTERM, then SIGKILL, and the run is reported as a MISS with what it had stored.
The pure part (reading windows, counters and /proc text, the checks, the table) is tested by
tests/unit/test_busy_node.py.

Run (root, for eBPF): .venv/bin/python -m bench.busy_node [--seconds 60 --rate 97]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zerotrace_collector.probes.profile import DEFAULT_RATE_HZ

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "bench" / "workloads" / "known_profile.py"
# The machine's interpreter, started normally, as a profiled program would be (the venv's may
# be another build); the one behind the venv where there is none.
PYTHON = (
    "/usr/bin/python3" if Path("/usr/bin/python3").exists() else os.path.realpath(sys.executable)
)
DEFAULT_BUDGET_CORES = 0.5  # zerotrace run's own default (--cpu-budget)
DRAIN_S = 180.0  # past --seconds, before zerotrace is stopped and the run called a MISS
TERM_GRACE_S = 30.0
TARGET_KEPT = 0.95
TARGET_PYTHON = 0.95
TARGET_OFF_CPU = 0.10
WAIT_FRAME = "py:wait_for_backend "
MODES = ("quiet", "busy")


@dataclass
class Truth:
    """What the workload says it did (its JSON)."""

    pid: int
    cpu_s: float
    slept_s: float
    wall_s: float


@dataclass
class Seen:
    """What the stored profile windows hold for the workload's pid."""

    on_cpu: int = 0
    python: int = 0  # ON_CPU samples with a py: frame
    wait_ns: int = 0  # OFF_CPU weight of stacks through wait_for_backend
    dropped: int = 0
    windows: int = 0
    without_python: Counter[str] = field(default_factory=Counter)


@dataclass
class Cost:
    """zerotrace's own CPU while it observed (after its start-up: the bcc compile, attaching),
    held against its budget; start_cpu_s: what the start-up took (None: not told apart)."""

    cpu_s: float
    wall_s: float
    budget_cores: float
    start_cpu_s: float | None = None

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s else float("inf")


@dataclass
class Run:
    mode: str
    neighbours: int
    truth: Truth | None = None
    seen: Seen | None = None
    counters: dict[str, int] | None = None  # None: zerotrace said nothing (killed)
    cost: Cost | None = None
    exit_code: int | None = None
    killed_after_s: float | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Check:
    name: str
    figure: str
    target: str = ""
    ok: bool | None = None  # None: a figure without a target


# -- pure ------------------------------------------------------------------------------------


def seen_in(windows: Iterable[Mapping[str, Any]], pid: int) -> Seen:
    """Fold profile window documents (stacks as a map or as [{stack, weight}]) for one pid."""
    seen = Seen()
    for window in windows:
        if int(window.get("pid", 0)) != pid:
            continue
        seen.windows += 1
        seen.dropped += int(window.get("dropped", 0))
        stacks = window.get("stacks") or {}
        items = (
            stacks.items()
            if isinstance(stacks, Mapping)
            else ((s["stack"], s["weight"]) for s in stacks)
        )
        for stack, weight in items:
            frames = str(stack).split(";")
            if window["profile_type"] == "ON_CPU":
                seen.on_cpu += int(weight)
                if any(f.startswith("py:") for f in frames):
                    seen.python += int(weight)
                else:
                    seen.without_python[";".join(frames[-3:])] += int(weight)
            elif window["profile_type"] == "OFF_CPU" and any(
                f.startswith(WAIT_FRAME) for f in frames
            ):
                seen.wait_ns += int(weight)
    return seen


def flatten(obj: Any, prefix: str = "") -> dict[str, int]:
    """Integer leaves of nested counters as dotted names ({"profile": {"lost": 1}} and
    {"profile.lost": 1} give the same)."""
    if isinstance(obj, Mapping):
        out: dict[str, int] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    if isinstance(obj, int) and not isinstance(obj, bool):
        return {prefix.rstrip("."): obj}
    return {}


def counted(summary_lines: Sequence[str]) -> dict[str, int] | None:
    """The counters in `zerotrace run`'s printed summary, for a zerotrace without
    --summary-json: a line per feed ("  profile: lost 0, shed 0, ...") or, from older ones,
    one line of the non-zero ones ("  counted: profile.lost 3, ..."). Lines of other shapes
    (processes, profiles, its own cost) are skipped. None without a summary."""
    if not any(line.startswith("summary:") for line in summary_lines):
        return None
    out: dict[str, int] = {}
    for line in summary_lines[1:]:
        feed, colon, rest = line.strip().partition(": ")
        items = [item.strip().rpartition(" ") for item in rest.split(",")]
        if not colon or " " in feed or not all(n and v.isdigit() for n, _, v in items):
            continue
        for name, _, value in items:
            out[name if feed == "counted" else f"{feed}.{name}"] = int(value)
    return out


def losses(counters: Mapping[str, int]) -> tuple[int, int]:
    """(lost, shed): counters whose last name part has the word lost / shed in it."""
    lost = shed = 0
    for name, value in counters.items():
        words = set(name.rsplit(".", 1)[-1].split("_"))
        lost += value if "lost" in words else 0
        shed += value if "shed" in words else 0
    return lost, shed


def stat_cpu_s(stat: str, ticks_per_s: int) -> float:
    """utime + stime of a /proc/PID/stat line, in seconds (fields 14 and 15; the name in
    parentheses may hold spaces, so fields are counted after the last ')')."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_s


def checks(run: Run, rate_hz: int) -> list[Check]:
    """The figures of one run, each with its target and verdict where it has one."""
    truth, seen, cost = run.truth, run.seen, run.cost
    out = [
        Check(
            "zerotrace finished",
            "yes" if run.killed_after_s is None else f"killed at {run.killed_after_s:.0f} s",
            f"in --seconds + {DRAIN_S:.0f} s",
            run.killed_after_s is None,
        )
    ]
    expected = truth.cpu_s * rate_hz if truth else None
    out.append(Check("workload CPU", f"{truth.cpu_s:.2f} s" if truth else "-"))
    out.append(Check("samples expected", f"{expected:,.0f}" if expected is not None else "-"))
    if expected and seen:
        share = seen.on_cpu / expected
        out.append(
            Check("samples kept", f"{seen.on_cpu:,} {share:.1%}", ">= 95 %", share >= TARGET_KEPT)
        )
    else:
        out.append(Check("samples kept", str(seen.on_cpu) if seen else "-", ">= 95 %", False))
    if seen and seen.on_cpu:
        share = seen.python / seen.on_cpu
        fig = f"{seen.python:,} {share:.1%}"
        out.append(Check("with Python frames", fig, ">= 95 %", share >= TARGET_PYTHON))
    else:
        out.append(Check("with Python frames", "-", ">= 95 %", False))
    if truth and seen and truth.slept_s:
        off = (seen.wait_ns / 1e9 - truth.slept_s) / truth.slept_s
        fig = f"{seen.wait_ns / 1e9:.2f}/{truth.slept_s:.2f} s {off:+.1%}"
        out.append(Check("off-CPU wait/slept", fig, "within 10 %", abs(off) <= TARGET_OFF_CPU))
    else:
        out.append(Check("off-CPU wait/slept", "-", "within 10 %", False))
    lost, shed = losses(run.counters) if run.counters is not None else (None, None)
    out.append(Check("lost", "?" if lost is None else str(lost), "0", lost == 0))
    out.append(Check("shed", "?" if shed is None else str(shed)))
    out.append(Check("dropped in windows", str(seen.dropped) if seen else "-"))
    if cost:
        fig = f"{cost.cpu_s:.1f}/{cost.wall_s:.0f} s {cost.cores:.2f} c"
        target = f"<= {cost.budget_cores:g} cores"
        out.append(Check("zerotrace CPU", fig, target, cost.cores <= cost.budget_cores))
        start = "?" if cost.start_cpu_s is None else f"{cost.start_cpu_s:.1f} s"
        out.append(Check("  and starting", start))
    else:
        out.append(Check("zerotrace CPU", "-", "within budget", False))
    return out


def render(runs: Sequence[Run], rate_hz: int) -> list[str]:
    """The runs side by side: a row per figure, a column per run, PASS or MISS in each cell
    that has a target; then one verdict line per run."""
    columns = [checks(run, rate_hz) for run in runs]
    heads = [f"{run.mode} ({run.neighbours} neighbours)" for run in runs]
    cells = [
        [c.figure + ("" if c.ok is None else "  PASS" if c.ok else "  MISS") for c in column]
        for column in columns
    ]
    width = max(24, *(len(x) for column in cells for x in column), *(len(h) for h in heads))
    lines = [f"{'':22}" + "".join(f"{h:>{width + 2}}" for h in heads) + "  target"]
    for row, check in enumerate(columns[0]):
        lines.append(
            f"{check.name:22}"
            + "".join(f"{column[row]:>{width + 2}}" for column in cells)
            + (f"  {check.target}" if check.target else "")
        )
    for run, column in zip(runs, columns, strict=True):
        scored = [c for c in column if c.ok is not None]
        missed = [c.name for c in scored if not c.ok]
        verdict = "PASS" if not missed else "MISS (" + ", ".join(missed) + ")"
        lines.append(f"{run.mode}: {len(scored) - len(missed)} of {len(scored)} targets: {verdict}")
    return lines


# -- shell -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_flags() -> str:
    """`zerotrace run --help`, to use the options this checkout has."""
    return subprocess.run(
        [sys.executable, "-m", "zerotrace_cli", "run", "--help"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


@contextmanager
def neighbours(count: int) -> Iterator[None]:
    procs = [subprocess.Popen([PYTHON, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def own_cpu_s(pid: int) -> float | None:
    """A process's own CPU time so far, every thread (its children's are not in it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return stat_cpu_s(f.read(), os.sysconf("SC_CLK_TCK"))
    except OSError:
        return None


@dataclass
class Watched:
    """What the bench saw of zerotrace: its own CPU last read before it exited, and its CPU
    and time (seconds after start) at its `web page` line, the end of its start-up."""

    cpu_s: float | None = None
    ready: tuple[float, float] | None = None
    stopped_at: float | None = None  # when it was told to stop, seconds after start


def wait_for(proc: subprocess.Popen[str], started: float, deadline: float, seen: Watched) -> None:
    """Until it exits, reading its CPU time from /proc every 0.2 s (wait4's rusage would hold
    the workload's too, when zerotrace reaped it); past the deadline SIGTERM, then SIGKILL."""
    for sig, until in ((None, deadline), (signal.SIGTERM, deadline + TERM_GRACE_S)):
        if sig is not None:
            seen.stopped_at = time.monotonic() - started
            proc.send_signal(sig)
        while time.monotonic() < until:
            seen.cpu_s = own_cpu_s(proc.pid) or seen.cpu_s  # read first: a zombie still has it
            if proc.poll() is not None:
                return
            time.sleep(0.2)
    proc.kill()
    proc.wait()


def observe(mode: str, count: int, args: argparse.Namespace, help_text: str, tmp: Path) -> Run:
    run = Run(mode, count)
    truth_file, store = tmp / f"{mode}-truth.json", tmp / f"{mode}.duckdb"
    summary_file = tmp / f"{mode}-summary.json"
    command = [sys.executable, "-m", "zerotrace_cli", "run", "--profile", "--quiet", "--no-files",
               "--sample-hz", str(args.rate), "--store", str(store),
               "--http-port", str(free_port()), "--grpc-port", str(free_port())]  # fmt: skip
    if "--cpu-budget" in help_text:
        command += ["--cpu-budget", str(args.cpu_budget)]
    if "--summary-json" in help_text:
        command += ["--summary-json", str(summary_file)]
    command += [
        "--",
        PYTHON,
        str(WORKLOAD),
        "--seconds",
        str(args.seconds),
        "--out",
        str(truth_file),
    ]
    watched, err, out = Watched(), list[str](), list[str]()

    def read_stderr(proc: subprocess.Popen[str], started: float) -> None:
        for line in proc.stderr or ():
            err.append(line)
            cpu = own_cpu_s(proc.pid)
            if "web page" in line and watched.ready is None and cpu is not None:
                watched.ready = (time.monotonic() - started, cpu)

    with neighbours(count):
        started = time.monotonic()
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        readers = [
            threading.Thread(target=read_stderr, args=(proc, started), daemon=True),
            threading.Thread(target=lambda: out.extend(proc.stdout or ()), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            wait_for(proc, started, started + args.seconds + DRAIN_S, watched)
        except BaseException:  # Ctrl-C: leave nothing running
            proc.kill()
            raise
        wall_s = time.monotonic() - started
    for reader in readers:
        reader.join(timeout=5)
    run.exit_code, run.killed_after_s = proc.returncode, watched.stopped_at
    run.notes += [line.strip() for line in err if "budget" in line.lower()]
    if proc.returncode != 0 and run.killed_after_s is None:
        run.notes.append(f"zerotrace exited {proc.returncode}: " + "".join(err)[-600:].strip())
    if truth_file.exists():
        t = json.loads(truth_file.read_text())
        run.truth = Truth(int(t["pid"]), float(t["cpu_s"]), float(t["slept_s"]), float(t["wall_s"]))
    else:
        run.notes.append("the workload wrote no truth (it did not finish)")
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
    run.counters = flatten(summary["counters"]) if summary else counted([x.rstrip() for x in out])
    run.cost = cost_of(summary, watched.cpu_s, wall_s, watched.ready, args.cpu_budget)
    if run.truth is not None:
        run.seen = stored(store, run.truth.pid, run.notes)
    return run


def cost_of(
    summary: Mapping[str, Any] | None,
    cpu_s: float | None,
    wall_s: float,
    ready: tuple[float, float] | None,
    budget_cores: float,
) -> Cost | None:
    """zerotrace's own CPU: its --summary-json's "self" where it wrote one; else *cpu_s* (its
    own, read from /proc) over *wall_s*, the start-up left out where *ready* tells it:
    (seconds after start, its CPU then) at its `web page` line. The budget is the one
    zerotrace says it held, else ours."""
    if summary and isinstance(summary.get("self"), Mapping):
        own = summary["self"]
        cores = float((summary.get("budget") or {}).get("cores") or budget_cores)
        start = own.get("start_cpu_s")
        return Cost(float(own["cpu_s"]), float(own["wall_s"]), cores, start)
    if cpu_s is None:
        return None
    if ready is None:
        return Cost(cpu_s, wall_s, budget_cores)
    return Cost(cpu_s - ready[1], wall_s - ready[0], budget_cores, ready[1])


def stored(store_file: Path, pid: int, notes: list[str]) -> Seen | None:
    from zerotrace import names
    from zerotrace.store import Query
    from zerotrace.store_duckdb import DuckDBStore

    try:
        store = DuckDBStore(str(store_file))
    except Exception as exc:  # a killed writer may leave it unreadable: say so, go on
        notes.append(f"store unreadable: {exc}")
        return None
    try:
        docs = store.search(names.INDEX_PROFILES, Query(equals={"pid": pid}, limit=10_000))
    finally:
        store.close()
    return seen_in(docs, pid)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="the workload's run time")
    parser.add_argument("--rate", type=int, default=DEFAULT_RATE_HZ, help="samples/s per CPU")
    parser.add_argument("--cpu-budget", type=float, default=DEFAULT_BUDGET_CORES)
    parser.add_argument("--neighbours", type=int, default=os.cpu_count() or 1, help="busy run")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rate <= 0 or args.neighbours < 1:
        parser.error("--seconds, --rate and --neighbours must be positive")
    if os.geteuid() != 0:
        raise SystemExit("bench.busy_node needs root (eBPF): run it with sudo")
    help_text = run_flags()
    runs = []
    print(f"{WORKLOAD.name} under {PYTHON}, {args.seconds:g} s a run, {args.rate} Hz")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            count = args.neighbours if mode == "busy" else 0
            with open("/proc/loadavg") as f:
                load = f.read().split()[0]
            print(f"{mode}: {count} CPU-bound neighbours, load average {load} ...", flush=True)
            runs.append(observe(mode, count, args, help_text, Path(tmp)))
    print()
    for line in render(runs, args.rate):
        print(line)
    for run in runs:
        for note in run.notes:
            print(f"{run.mode}: {note}")
        if run.seen and run.seen.without_python:
            top = "; ".join(f"{n} x {s}" for s, n in run.seen.without_python.most_common(3))
            print(f"{run.mode}: most samples without Python frames (last frames): {top}")


if __name__ == "__main__":
    main()
