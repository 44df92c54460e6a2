"""The HTTP load of bench/collector_throughput.py: a keep-alive HTTP/1.1 server and what drives it.

- the server (uvloop, one process) answers each request head with a tiny response in one
  write (one event each), and a ``GET /stream?events=N&gap_ms=G`` with an SSE stream: a
  chunked head, a chunk per event G ms apart, the last chunk;
- the steady load: two generator processes, one keeping --connections keep-alive connections
  of small GETs at --rate requests/s in all (0: as fast as they go), one running --streams SSE
  streams back to back, both for --seconds;
- the burst: ``ab -k -n N -c 8`` (apache2-utils).

The bench starts the server with :func:`served`, then calls :func:`steady` or :func:`burst`,
each of which returns the requests made and answered and the pids that made them (so the bench
can tell the load's records from other processes'). Unlike the package's other workloads,
these processes run under the bench's own interpreter (the venv): they need uvloop.

Run by hand (the bench does the same):

    .venv/bin/python -m bench.workloads.http_load server     # prints its port
    .venv/bin/python -m bench.workloads.http_load small --port P --seconds 10 \\
        --connections 32 --rate 2000                          # prints {"requests": N}
    .venv/bin/python -m bench.workloads.http_load sse --port P --seconds 10 \\
        --streams 4 --events 200 --gap-ms 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

INSTALL_AB = "ab (apache2-utils) is missing for the burst: apt-get install -y apache2-utils"

# -- pure: the wire bytes ----------------------------------------------------------------------

REQUEST = b"GET /small HTTP/1.1\r\nHost: bench\r\n\r\n"
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
    b"Connection: keep-alive\r\n\r\nok\n"
)  # "keep-alive" spelled out: ab -k (HTTP/1.0) keeps a connection only when it sees it
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
SSE_END = b"0\r\n\r\n"


def sse_event(i: int) -> bytes:
    event = b'data: {"i": %d}\n\n' % i
    return b"%x\r\n%s\r\n" % (len(event), event)


def split_requests(buf: bytes) -> tuple[list[bytes], bytes]:
    """Complete request heads in buf (GETs: no bodies) and the bytes after them."""
    heads = []
    while (end := buf.find(b"\r\n\r\n")) >= 0:
        heads.append(buf[:end])
        buf = buf[end + 4 :]
    return heads, buf


def stream_params(head: bytes) -> tuple[int, float] | None:
    """(events, gap in seconds) of a GET /stream?events=N&gap_ms=G; None for any other."""
    target = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
    if not target.startswith(b"/stream"):
        return None
    query = dict(re.findall(rb"(\w+)=([\d.]+)", target))
    return int(query.get(b"events", b"100")), float(query.get(b"gap_ms", b"1")) / 1000


def take_response(buf: bytes) -> tuple[bool, bytes]:
    """One whole Content-Length response off the front of buf, if there is one."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False, buf
    length = re.search(rb"(?i)content-length:\s*(\d+)", buf[:end])
    size = end + 4 + (int(length.group(1)) if length else 0)
    return (True, buf[size:]) if len(buf) >= size else (False, buf)


def parse_ab(text: str) -> dict[str, int]:
    """ab's counts: complete, failed, keepalive (requests), non_2xx."""
    wanted = {
        "complete": r"Complete requests:\s+(\d+)",
        "failed": r"Failed requests:\s+(\d+)",
        "keepalive": r"Keep-Alive requests:\s+(\d+)",
        "non_2xx": r"Non-2xx responses:\s+(\d+)",
    }
    out = {}
    for key, pattern in wanted.items():
        found = re.search(pattern, text)
        out[key] = int(found.group(1)) if found else 0
    return out


# -- the server and the generators, each its own process -----------------------------------------


def _loop() -> asyncio.AbstractEventLoop:
    import uvloop  # libuv's loop: the server and clients spend less of the 2 cores than asyncio's

    return uvloop.new_event_loop()


class _ServerConn(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.transport, self.buf = transport, b""
        self.streams: set[asyncio.Task[None]] = set()

    def data_received(self, data: bytes) -> None:
        heads, self.buf = split_requests(self.buf + data)
        for head in heads:
            stream = stream_params(head)
            if stream is None:
                self.transport.write(RESPONSE)  # one write per response: one event each
            else:
                task = asyncio.ensure_future(self._stream(*stream))
                self.streams.add(task)  # held: the loop keeps only a weak reference
                task.add_done_callback(self.streams.discard)

    async def _stream(self, events: int, gap_s: float) -> None:
        self.transport.write(SSE_HEAD)
        for i in range(events):
            await asyncio.sleep(gap_s)
            self.transport.write(sse_event(i))
        self.transport.write(SSE_END)


def serve() -> None:
    """Prints its port, then serves until SIGTERM."""
    loop = _loop()
    server = loop.run_until_complete(loop.create_server(_ServerConn, "127.0.0.1", 0, backlog=512))
    print(server.sockets[0].getsockname()[1], flush=True)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.run_forever()


class _ClientConn(asyncio.Protocol):
    """One keep-alive connection: a request, its answer, the next (paced when interval > 0)."""

    def __init__(self, deadline: float, interval: float, done: asyncio.Future[int]) -> None:
        self.deadline, self.interval, self.done = deadline, interval, done
        self.buf, self.answered, self.next_at = b"", 0, time.monotonic()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(REQUEST)

    def data_received(self, data: bytes) -> None:
        got, self.buf = take_response(self.buf + data)
        if not got:
            return
        self.answered += 1
        now = time.monotonic()
        if now >= self.deadline:
            self.transport.close()
            self.done.set_result(self.answered)
        elif self.interval:
            self.next_at = max(now, self.next_at + self.interval)
            asyncio.get_running_loop().call_later(self.next_at - now, self.transport.write, REQUEST)
        else:
            self.transport.write(REQUEST)


async def _small_requests(port: int, connections: int, rate: float, deadline: float) -> int:
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[int]] = []
    interval = connections / rate if rate else 0.0
    for _ in range(connections):
        done: asyncio.Future[int] = loop.create_future()
        futures.append(done)
        await loop.create_connection(
            functools.partial(_ClientConn, deadline, interval, done), "127.0.0.1", port
        )
    return sum(await asyncio.gather(*futures))


async def _sse_streams(port: int, streams: int, events: int, gap_ms: float, deadline: float) -> int:
    request = b"GET /stream?events=%d&gap_ms=%g HTTP/1.1\r\nHost: bench\r\n\r\n" % (events, gap_ms)

    async def one() -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        made = 0
        while time.monotonic() < deadline:
            writer.write(request)
            body = b""
            while not body.endswith(b"\r\n" + SSE_END):  # no data chunk ends so
                more = await reader.read(65536)
                if not more:
                    raise ConnectionError("the server closed an SSE stream")
                body += more
            made += 1
        writer.close()
        return made

    return sum(await asyncio.gather(*(one() for _ in range(streams))))


def generate(args: argparse.Namespace) -> None:
    """Prints {"requests": N} once its share of the load is answered."""
    deadline = time.monotonic() + args.seconds
    loop = _loop()
    if args.role == "small":
        work = _small_requests(args.port, args.connections, args.rate, deadline)
    else:
        work = _sse_streams(args.port, args.streams, args.events, args.gap_ms, deadline)
    print(json.dumps({"requests": loop.run_until_complete(work)}), flush=True)


# -- the bench's side: start them, collect what they made ----------------------------------------

Load = tuple[int, set[int]]  # requests made and answered, the pids that made them


def _me(options: str) -> list[str]:
    return [sys.executable, "-m", "bench.workloads.http_load", *options.split()]


@contextlib.contextmanager
def served() -> Iterator[tuple[int, int]]:
    """The server in its own process: (its port, its pid) inside the block, SIGTERM after."""
    server = subprocess.Popen(_me("server"), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline()), server.pid
    finally:
        server.terminate()
        server.wait()


def steady(
    port: int,
    seconds: float,
    *,
    connections: int,
    rate: float,
    streams: int,
    events: int,
    gap_ms: float,
) -> Load:
    """Both generators at once, until each has had its last answer after *seconds*."""
    common = f"--port {port} --seconds {seconds}"
    small = f"small {common} --connections {connections} --rate {rate}"
    sse = f"sse {common} --streams {streams} --events {events} --gap-ms {gap_ms}"
    procs = [subprocess.Popen(_me(c), stdout=subprocess.PIPE) for c in (small, sse)]
    made = 0
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"a load generator failed (exit {proc.returncode})")
        made += json.loads(out.decode().strip().splitlines()[-1])["requests"]
    return made, {p.pid for p in procs}


def ensure_ab(run: Any = subprocess.run) -> bool:
    """True when `ab` is there for the burst: as root, Debian's apache2-utils is installed
    first when it is missing (a later machine starts bare)."""
    if shutil.which("ab") is not None:
        return True
    if os.geteuid() != 0:
        return False
    print("installing Debian's apache2-utils for the burst (ab) ...", flush=True)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "check": False}
    if run(["apt-get", "install", "-y", "-q", "apache2-utils"], **quiet).returncode != 0:
        run(["apt-get", "update", "-q"], **quiet)  # package lists missing or stale
        run(["apt-get", "install", "-y", "-q", "apache2-utils"], **quiet)
    return shutil.which("ab") is not None


def burst(port: int, requests: int) -> Load:
    """ab's keep-alive burst; its counts go to stderr when any request failed or was not
    kept alive."""
    cmd = ["ab", "-k", "-q", "-r", "-n", str(requests), "-c", "8", f"http://127.0.0.1:{port}/"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    counts = parse_ab(proc.communicate()[0])
    if counts["failed"] or counts["non_2xx"] or counts["keepalive"] < counts["complete"]:
        print(f"ab: {counts}", file=sys.stderr)
    return counts["complete"] - counts["failed"], {proc.pid}


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    roles = parser.add_subparsers(dest="role", required=True)
    roles.add_parser("server", help="serve on a free port, printed first, until SIGTERM")
    small = roles.add_parser("small", help="small GETs on keep-alive connections")
    sse = roles.add_parser("sse", help="SSE streams back to back")
    for role in (small, sse):
        role.add_argument("--port", type=int, required=True)
        role.add_argument("--seconds", type=float, required=True)
    small.add_argument("--connections", type=int, required=True)
    small.add_argument("--rate", type=float, required=True, help="requests/s in all (0: flat out)")
    sse.add_argument("--streams", type=int, required=True, help="streams at once")
    sse.add_argument("--events", type=int, required=True, help="events per stream")
    sse.add_argument("--gap-ms", type=float, required=True, help="between events")
    return parser


def main() -> None:
    args = arguments().parse_args()
    if args.role == "server":
        serve()
    else:
        generate(args)


if __name__ == "__main__":
    main()
