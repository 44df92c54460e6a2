"""An asyncio server whose writes the socket probe keys by task (for
tests/kernel/test_async_task_key.py).

Runs under any CPython 3.10 to 3.13, stdlib only. Prints one JSON line per step on stdout and
waits for a line on stdin before the next:

1. ``{"port": P, "plain_port": Q}``: listening (asyncio on P, a plain thread on Q), and
   ``--threads N`` idle threads started after the main one (past the walker's reach: it walks
   the newest 64 thread states first). The blocking accept on Q waits for a line: one entered
   before the probe follows the process would not be tracked.
2. Clients connect: two to P, each sending its name ("A\\n", "B\\n"), one to Q. Then
   ``{"A": {"fd": .., "key": ..}, "B": {..}, "C": {"fd": ..}}``: each asyncio connection's
   fd and the task key the probe should report for its handler task, the address of the
   handler coroutine's own frame as this interpreter knows it (3.11+: PyFrameObject.f_frame,
   the _PyInterpreterFrame inside the coroutine; 3.10: the PyFrameObject itself); "main":
   the key of the main task (``asyncio.run``'s).
3. On "go": the two handler tasks write A_WRITES and B_WRITES messages, taking turns (each
   write in a nested coroutine, then a yield to the loop), each message also to an upstream
   connection of its own that the task opened (``--upstream PORT``: a gateway's outgoing call,
   fd in step 2's line as "up"), by turns from the task itself, from a child task it awaits,
   and from a grandchild (a child's child, gathered); then each writes POOL_WRITES to its
   upstream from a worker thread (``asyncio.to_thread``). The main task schedules
   CALLBACK_WRITES writes to A's connection as call_soon callbacks, which the loop runs
   between task steps; the plain thread writes PLAIN_WRITES to its connection from inside a
   generator. ``{"done": true}`` when all are written; then it waits for "bye" (a second "go"
   runs step 3 again first).

``--tls CERT KEY``: every connection is TLS (asyncio's through a memory BIO, the thread's a
blocking ssl socket), so the writes are SSL writes.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from typing import Any

A_WRITES, B_WRITES, CALLBACK_WRITES, PLAIN_WRITES, POOL_WRITES = 7, 11, 3, 5, 2

LEGACY = sys.version_info < (3, 11)


def say(obj: object) -> None:
    print(json.dumps(obj), flush=True)


def frame_key() -> int:
    """The task key of the calling coroutine's task, when it is the task's root."""
    frame = sys._getframe(1)
    if LEGACY:
        return id(frame)
    return int(ctypes.c_uint64.from_address(id(frame) + 24).value)  # PyFrameObject.f_frame


async def write_one(writer: asyncio.StreamWriter, payload: bytes) -> None:
    writer.write(payload)  # asyncio sends at once on an idle socket: the syscall is here
    await writer.drain()


async def write_upstream(up: asyncio.StreamWriter, payload: bytes, i: int) -> None:
    """The i-th upstream write, by turns from the calling task, a child task, a grandchild."""
    if i % 3 == 0:
        await write_one(up, payload)
    elif i % 3 == 1:
        await asyncio.create_task(write_one(up, payload))
    else:

        async def child() -> None:
            await asyncio.create_task(write_one(up, payload))

        await asyncio.gather(child())


class Server:
    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.conns: dict[str, dict[str, Any]] = {}
        self.writers: dict[str, asyncio.StreamWriter] = {}
        self.ready = asyncio.Event()
        self.go = asyncio.Event()
        self.turn = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        key = frame_key()
        name = (await reader.readline()).decode().strip()
        sock = writer.get_extra_info("socket")
        _, up = await asyncio.open_connection("127.0.0.1", self.upstream)
        up_fd = up.get_extra_info("socket").fileno()
        self.conns[name] = {"fd": sock.fileno(), "key": key, "up": up_fd}
        self.writers[name] = writer
        if len(self.writers) == 2:
            self.ready.set()
        count = A_WRITES if name == "A" else B_WRITES
        while True:
            await self.go.wait()
            for i in range(count):
                await write_one(writer, f"{name}-task-{i:02d};".encode())
                await write_upstream(up, f"{name}-up-{i:02d};".encode(), i)
                await asyncio.sleep(0)  # the other task writes next
            for i in range(POOL_WRITES):  # the socket is idle: drained above
                await asyncio.to_thread(os.write, up_fd, f"{name}-pool-{i:02d};".encode())
            self.turn += 1
            while self.go.is_set():
                await asyncio.sleep(0.01)


def plain_writer(conn: socket.socket, go: threading.Event, done: threading.Event) -> None:
    def chunks() -> Iterator[None]:
        for i in range(PLAIN_WRITES):
            conn.send(f"C-plain-{i:02d};".encode())  # inside a plain generator's frame
            yield

    while True:
        go.wait()
        go.clear()
        for _ in chunks():
            pass
        done.set()


async def main(threads: int, tls: ssl.SSLContext | None, upstream: int) -> None:
    server = Server(upstream)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    plain = socket.socket()
    plain.bind(("127.0.0.1", 0))
    plain.listen()
    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(threads)]
    for t in idle:
        t.start()
    say({"port": listener.sockets[0].getsockname()[1], "plain_port": plain.getsockname()[1]})
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    conn, _ = await loop.run_in_executor(None, plain.accept)
    if tls is not None:
        conn = await loop.run_in_executor(None, lambda: tls.wrap_socket(conn, server_side=True))
    await server.ready.wait()
    server.conns["C"] = {"fd": conn.fileno()}
    server.conns["main"] = {"key": frame_key()}
    say(server.conns)
    plain_go, plain_done = threading.Event(), threading.Event()
    threading.Thread(target=plain_writer, args=(conn, plain_go, plain_done), daemon=True).start()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() != "go":
            break
        server.turn = 0
        plain_done.clear()
        plain_go.set()
        transport = server.writers["A"].transport
        for i in range(CALLBACK_WRITES):
            loop.call_soon(transport.write, f"A-callback-{i:02d};".encode())
        server.go.set()
        while server.turn < 2 or not plain_done.is_set():
            await asyncio.sleep(0.01)
        server.go.clear()
        say({"done": True})
    stop.set()
    listener.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--upstream", type=int, required=True)
    args = parser.parse_args()
    context = None
    if args.tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*args.tls)
    asyncio.run(main(args.threads, context, args.upstream))
