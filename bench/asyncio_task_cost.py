"""What the asyncio task keys cost the observed program (bpf/python_stack.h: "Asyncio task
keys", "Tasks made by tasks").

A CPython program (the machine's python3.11, this file run with --workload) times, in one
asyncio loop, three things a gateway does all the time, --count of each per round:

- ``send``: a task 20 coroutines deep sends 64 bytes on a TCP connection (a sink thread of
  this process drains it): the socket probe walks the frames at each send;
- ``task``: a task makes a child task (asyncio.create_task) and awaits it: one context copy,
  which the probe's uretprobe on PyContext_CopyCurrent records;
- ``call_soon``: a task schedules a callback and waits for it: one context copy too.

Each round runs the program twice, once unobserved and once under the socket probe following
it (task keys on, as under ``zerotrace run``), alternately, and the figures are the medians
over --rounds of ns per operation and the ratio observed / unobserved (the machine is shared
and noisy: compare within one run).

Run (root, for eBPF): .venv/bin/python -m bench.asyncio_task_cost [--count 20000 --rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = "/usr/bin/python3.11"
DEPTH = 20


async def _nested(depth: int, sock: socket.socket, payload: bytes) -> None:
    if depth:
        await _nested(depth - 1, sock, payload)
    else:
        sock.send(payload)


async def _child() -> int:
    return 1


async def _workload(port: int, count: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    sock = socket.create_connection(("127.0.0.1", port))
    payload = b"x" * 64
    out: dict[str, float] = {}
    start = time.perf_counter_ns()
    for _ in range(count):
        await _nested(DEPTH, sock, payload)
    out["send"] = (time.perf_counter_ns() - start) / count
    start = time.perf_counter_ns()
    for _ in range(count):
        await asyncio.create_task(_child())
    out["task"] = (time.perf_counter_ns() - start) / count
    start = time.perf_counter_ns()
    for _ in range(count):
        fut = loop.create_future()
        loop.call_soon(fut.set_result, None)
        await fut
    out["call_soon"] = (time.perf_counter_ns() - start) / count
    sock.close()
    return out


def workload_main(port: int, count: int) -> None:
    """Run in the observed program: wait for a line (the probe follows it by then), measure."""
    sys.stdin.readline()
    print(json.dumps(asyncio.run(_workload(port, count))), flush=True)


def _sink() -> int:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def drain() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=lambda c=conn: _drain(c), daemon=True).start()

    threading.Thread(target=drain, daemon=True).start()
    return int(server.getsockname()[1])


def _drain(conn: socket.socket) -> None:
    with conn:
        while conn.recv(65536):
            pass


def one_run(port: int, count: int, probe: object | None) -> dict[str, float]:
    child = subprocess.Popen(
        [PYTHON, __file__, "--workload", str(port), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    if probe is not None:
        probe.follow_pid(child.pid)  # type: ignore[attr-defined]
        time.sleep(0.3)  # the interpreter read and the uretprobe attached
    child.stdin.write("go\n")
    child.stdin.flush()
    done = threading.Event()

    def reader() -> None:  # keep reading the ring, as the collector does
        while not done.is_set():
            probe.poll(50)  # type: ignore[union-attr]

    reading = threading.Thread(target=reader, daemon=True)
    if probe is not None:
        reading.start()
    line = child.stdout.readline()
    child.wait(30)
    done.set()
    if probe is not None:
        reading.join()
    return dict(json.loads(line))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO / "services" / "collector"), str(REPO / "lib")]
    from zerotrace_collector.probes.socket import SocketProbe

    port = _sink()
    plain: list[dict[str, float]] = []
    observed: list[dict[str, float]] = []
    with SocketProbe(REPO / "bpf", tls=False, follow=True, seed_from_proc=False) as probe:
        for i in range(args.rounds):
            print(f"round {i + 1}/{args.rounds}", file=sys.stderr, flush=True)
            plain.append(one_run(port, args.count, None))
            observed.append(one_run(port, args.count, probe))
        notes = list(probe.notes)
    print(f"{'operation':<10} {'unobserved ns':>14} {'observed ns':>12} {'ratio':>6}")
    for op in ("send", "task", "call_soon"):
        a = statistics.median(r[op] for r in plain)
        b = statistics.median(r[op] for r in observed)
        print(f"{op:<10} {a:>14.0f} {b:>12.0f} {b / a:>6.2f}")
    for note in notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--workload":
        workload_main(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(main())
