"""A Python program with a known profile, for bench/busy_node.py: what it does is written down
by the program itself, so the profiler's figures have a truth to be held against.

For --seconds it loops (one thread, started normally):

- ``outer -> middle -> hot_loop``: pure Python arithmetic, about --hot-ms of CPU;
- ``call_native``: a ctypes call into libc (memcmp of two equal 16 MiB buffers, a few ms inside
  libc.so, entered through libffi), so the stack shows a native libc frame under a Python one;
- ``wait_for_backend``: ``time.sleep(--sleep-ms)``, timed around the call with
  ``time.monotonic_ns``. Off-CPU time seen by the profiler runs from switch-out to switch-in,
  which is what this measures too (on a busy machine both include the wait for a CPU after
  the sleep ends).

At the end it writes its truth as JSON to --out: ``pid``, ``cpu_s`` (user + system of the whole
process from os.times(), start-up included, as the profiler samples all of it), ``slept_s``,
``sleeps``, ``iterations`` and ``wall_s``.

Run: python3 bench/workloads/known_profile.py --seconds 60 --out truth.json
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import time

_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_BUF_A = ctypes.create_string_buffer(16 << 20)
_BUF_B = ctypes.create_string_buffer(16 << 20)


def hot_loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def middle(n: int) -> int:
    return hot_loop(n)


def outer(n: int) -> int:
    return middle(n)


def call_native() -> int:
    return int(_LIBC.memcmp(_BUF_A, _BUF_B, ctypes.c_size_t(len(_BUF_A))))


def wait_for_backend(seconds: float) -> int:
    start = time.monotonic_ns()
    time.sleep(seconds)
    return time.monotonic_ns() - start


def calibrate(hot_ms: float) -> int:
    """Iterations of hot_loop that take about hot_ms of CPU here (measured on 20,000)."""
    start = time.process_time()
    hot_loop(20_000)
    took = max(time.process_time() - start, 1e-4)
    return max(1_000, int(20_000 * hot_ms / 1000 / took))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--hot-ms", type=float, default=30.0)
    parser.add_argument("--sleep-ms", type=float, default=20.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    n = calibrate(args.hot_ms)
    started = time.monotonic()
    end = started + args.seconds
    slept_ns = sleeps = iterations = 0
    while time.monotonic() < end:
        outer(n)
        call_native()
        slept_ns += wait_for_backend(args.sleep_ms / 1000)
        sleeps += 1
        iterations += 1
    wall_s = time.monotonic() - started
    times = os.times()
    truth = {
        "pid": os.getpid(),
        "cpu_s": times.user + times.system,
        "slept_s": slept_ns / 1e9,
        "sleeps": sleeps,
        "iterations": iterations,
        "wall_s": wall_s,
    }
    with open(args.out, "w") as f:
        json.dump(truth, f)


if __name__ == "__main__":
    main()
