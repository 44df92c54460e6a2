"""A Python program with a known profile, for the CPU profiler's tests and bench.

Started normally (no interpreter flags). It prints one JSON line ``{"ready": pid}``, waits for a
line on stdin (so the profiler can get ready first), then for ``--seconds`` runs requests in a
worker thread: ``handle_request -> hot_loop`` (pure Python, about 70% of the CPU),
``encode_response`` (more Python), ``call_native`` (a ctypes call into libc) and
``wait_for_backend`` (``time.sleep``, which releases the GIL).
At the end it prints ``{"slept_ns": ..., "requests": ...}``: the time measured around each
sleep, summed, which the off-CPU time of ``wait_for_backend`` must match.

``--busy`` leaves out the sleeps (for the overhead bench).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import sys
import threading
import time

_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_BUF_A = ctypes.create_string_buffer(64 << 20)
_BUF_B = ctypes.create_string_buffer(64 << 20)
HOT_N = 1_000_000
ROWS = 12_000


def hot_loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def handle_request(n: int) -> int:
    return hot_loop(n)


def encode_response(rows: int) -> int:
    # Python work outside hot_loop, so hot_loop is about 70% of the CPU and not all of it.
    return len(json.dumps([{"id": i, "name": f"row{i}", "tags": [i, i + 1]} for i in range(rows)]))


def call_native() -> int:
    # memcmp of two equal 64 MiB buffers: a few ms inside libc, entered through ctypes/libffi.
    return int(_LIBC.memcmp(_BUF_A, _BUF_B, ctypes.c_size_t(len(_BUF_A))))


def wait_for_backend(seconds: float) -> int:
    start = time.monotonic_ns()
    time.sleep(seconds)
    return time.monotonic_ns() - start


def serve(seconds: float, sleep_s: float, busy: bool, result: dict[str, int]) -> None:
    end = time.monotonic() + seconds
    slept = requests = 0
    while time.monotonic() < end:
        handle_request(HOT_N)
        encode_response(ROWS)
        call_native()
        if not busy:
            slept += wait_for_backend(sleep_s)
        requests += 1
    result.update(slept_ns=slept, requests=requests)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--sleep-ms", type=float, default=20.0)
    parser.add_argument("--busy", action="store_true")
    args = parser.parse_args()
    print(json.dumps({"ready": threading.get_native_id()}), flush=True)
    sys.stdin.readline()
    result: dict[str, int] = {}
    worker = threading.Thread(
        target=serve, args=(args.seconds, args.sleep_ms / 1000, args.busy, result), name="worker"
    )
    worker.start()
    worker.join()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
