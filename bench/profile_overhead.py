"""What the CPU profiler costs, beside py-spy at the same rate, on a busy Python program.

The workload is tests/harness/profiled_app.py --busy (one worker thread burning CPU in Python
and a little in libc through ctypes, no sleeps) under the machine's python3.11, started
normally. Each mode gets a fresh instance of it for the same number of seconds:

- zerotrace: this process runs ProfileProbe + ProfileFeed (97 Hz, off-CPU on, Python frames
  on, native and kernel symbolization) on the program's pid, turning every sample into its
  raw.stack record (Avro encoding and Kafka are not included). Its cost is this process's CPU
  time (getrusage) over the sampling window, plus the time the kernel spent running the BPF
  programs (run_time_ns from BPF_ENABLE_STATS, held only for the window): that time is spent
  in the sampled program's interrupts and would otherwise go unseen. Start-up is left out:
  the bcc compile, and a warm-up of --warmup seconds of real sampling in which the symbolizer
  reads /proc/kallsyms and the ELF files the first stacks hit (a second or so, once).
- py-spy: ``py-spy record --rate 97 --nonblocking --format raw``, its CPU time from wait4's
  rusage. To leave its start-up out too, it runs twice, for --warmup seconds and for
  --warmup + --seconds, and the difference is its cost for --seconds of sampling.

Figures: samples/s each took, CPU as % of one core, and that per 100 samples/s (the target
for zerotrace is at most 1%), then zerotrace / py-spy.

Run (root, for eBPF and ptrace): .venv/bin/python -m bench.profile_overhead [--seconds 10
    --warmup 2]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from zerotrace_collector.probes.profile import DEFAULT_RATE_HZ, ProfileProbe
from zerotrace_collector.profile_feed import ProfileFeed
from zerotrace_collector.symbols.symbolizer import Symbolizer

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "tests" / "harness" / "profiled_app.py"
PYTHON = "/usr/bin/python3.11"
PY_SPY = REPO / ".venv" / "bin" / "py-spy"
TARGET_PCT_PER_100HZ = 1.0
_SYS_BPF = 321  # x86-64
_BPF_ENABLE_STATS = 32
_BPF_STATS_RUN_TIME = 0


@dataclass
class Cost:
    samples: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.samples / self.seconds

    @property
    def core_pct(self) -> float:
        return 100 * self.cpu_s / self.seconds

    @property
    def pct_per_100hz(self) -> float:
        return self.core_pct / (self.rate / 100) if self.samples else float("inf")


@contextmanager
def busy_app(seconds: float) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [PYTHON, str(APP), "--busy", "--seconds", str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as app:
        assert app.stdin and app.stdout
        json.loads(app.stdout.readline())
        try:
            yield app
        finally:
            app.kill()


@contextmanager
def bpf_run_stats() -> Iterator[None]:
    """Kernel accounting of BPF run time, on while the returned fd is open (then off again)."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(_BPF_STATS_RUN_TIME.to_bytes(4, "little") + bytes(124))
    fd = libc.syscall(_SYS_BPF, _BPF_ENABLE_STATS, attr, ctypes.sizeof(attr))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "BPF_ENABLE_STATS")
    try:
        yield
    finally:
        os.close(fd)


def bpf_run(probe: ProfileProbe) -> dict[str, tuple[int, int]]:
    """(run_time_ns, run_cnt) of each of the probe's loaded programs, from their fds' fdinfo."""
    out = {}
    for name, fn in probe._bpf.funcs.items():  # bcc keeps every loaded program here
        with open(f"/proc/self/fdinfo/{fn.fd}") as f:
            info = f.read()
        fields = [
            re.search(rf"^{k}:\s+(\d+)", info, re.MULTILINE) for k in ("run_time_ns", "run_cnt")
        ]
        out[name.decode()] = (
            int(fields[0].group(1)) if fields[0] else 0,
            int(fields[1].group(1)) if fields[1] else 0,
        )
    return out


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def zerotrace(seconds: float, warmup: float) -> Cost:
    with busy_app(seconds + warmup + 30) as app:
        probe = ProfileProbe(REPO / "bpf", pids={app.pid}, rate_hz=DEFAULT_RATE_HZ)
        feed = ProfileFeed(probe, "bench", 0, Symbolizer())
        feed.attach()  # compile: start-up, outside the window
        try:
            feed.python_process(app.pid)
            assert app.stdin
            app.stdin.write("go\n")
            app.stdin.flush()
            t0 = time.monotonic()
            while time.monotonic() - t0 < warmup:
                feed.poll(100)
            samples = 0
            with bpf_run_stats():
                bpf0, cpu0, t0 = bpf_run(probe), cpu_s(), time.monotonic()
                while time.monotonic() - t0 < seconds:
                    samples += sum(1 for r in feed.poll(100) if r.datum["profile_type"] == "ON_CPU")
                cpu1, t1, bpf1 = cpu_s(), time.monotonic(), bpf_run(probe)
            bpf_s = sum(bpf1[k][0] - bpf0[k][0] for k in bpf1) / 1e9
            print(f"  zerotrace: user space {cpu1 - cpu0:.3f} s CPU, BPF programs {bpf_s:.3f} s")
            for name in sorted(bpf1):
                ns, runs = bpf1[name][0] - bpf0[name][0], bpf1[name][1] - bpf0[name][1]
                if runs:
                    each = ns / runs / 1e3
                    print(f"    {name}: {ns / 1e6:.1f} ms in {runs} runs, {each:.2f} µs each")
            return Cost(samples, t1 - t0, cpu1 - cpu0 + bpf_s)
        finally:
            feed.close()


def py_spy_run(seconds: int) -> Cost:
    with busy_app(seconds + 30) as app, tempfile.TemporaryDirectory() as tmp:
        assert app.stdin
        app.stdin.write("go\n")
        app.stdin.flush()
        out = Path(tmp) / "raw.txt"
        t0 = time.monotonic()
        command = [str(PY_SPY), "record", "--rate", str(DEFAULT_RATE_HZ), "--nonblocking"]
        command += ["--format", "raw", "--duration", str(seconds), "--pid", str(app.pid)]
        spy = subprocess.Popen(
            [*command, "--output", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(spy.pid, 0)
        spy.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        if spy.returncode != 0:
            raise RuntimeError(f"py-spy exited with {spy.returncode}")
        # raw format: one folded stack per line, then its sample count.
        lines = out.read_text().splitlines()
        samples = sum(int(line.rsplit(" ", 1)[1]) for line in lines if line)
        return Cost(samples, wall, usage.ru_utime + usage.ru_stime)


def py_spy(seconds: float, warmup: float) -> Cost:
    short = py_spy_run(max(1, round(warmup)))
    long = py_spy_run(max(1, round(warmup)) + max(1, round(seconds)))
    print(f"  py-spy: {short.cpu_s:.3f} s CPU for the short run, {long.cpu_s:.3f} s for the long")
    return Cost(
        long.samples - short.samples, long.seconds - short.seconds, long.cpu_s - short.cpu_s
    )


def show(name: str, c: Cost) -> None:
    print(
        f"{name:10} {c.samples:6d} samples in {c.seconds:5.1f} s = {c.rate:6.1f}/s; "
        f"CPU {c.cpu_s:6.3f} s = {c.core_pct:5.2f}% of a core = "
        f"{c.pct_per_100hz:5.2f}% per 100 samples/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    args = parser.parse_args()
    print(f"busy {APP.name} under {PYTHON}, {DEFAULT_RATE_HZ} Hz, {args.seconds:.0f} s each")
    zt = zerotrace(args.seconds, args.warmup)
    spy = py_spy(args.seconds, args.warmup)
    show("zerotrace", zt)
    show("py-spy", spy)
    verdict = "PASS" if zt.pct_per_100hz <= TARGET_PCT_PER_100HZ else "MISS"
    print(
        f"zerotrace / py-spy CPU per sample: {zt.pct_per_100hz / spy.pct_per_100hz:.2f}; "
        f"target <= {TARGET_PCT_PER_100HZ}% per 100 samples/s: {verdict}"
    )


if __name__ == "__main__":
    main()
