"""Clients that record the truth: for every request, when it was sent and when each token
arrived, as seen by the client itself. For the LLM accuracy tests and benchmarks.

Every request runs in one of `concurrency` worker processes, one request at a time each, so a
client timestamp is taken right after its own recv returns (threads would wait for the GIL
there, and the client's truth would lag its syscalls by milliseconds).

"Arrived" means: the client's socket read that delivered the token's bytes returned. The
workers wrap their sockets' send and recv methods to note those times, because the SDK parses
and validates every chunk before handing it over, and on a busy 2-core machine that takes
milliseconds the network did not. The workers also run at a higher priority than the
observed server and zerotrace, and let the garbage collector run between requests only.

Kinds: openai-chat-stream, openai-chat-stream-usage, openai-completions-stream, openai-chat
(non-stream), openai-responses-stream, raw-chat-stream (a plain socket client, no SDK).
The model name carries the request number, so a test can join zerotrace's records to these.

Run: python -m tests.harness.llm_load --url http://127.0.0.1:8000 --requests 200 --out t.json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import gzip
import json
import multiprocessing
import os
import socket
import ssl
import struct
import time
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlparse

KINDS = (
    "openai-chat-stream",
    "openai-chat-stream-usage",
    "openai-completions-stream",
    "openai-chat",
    "openai-responses-stream",
    "raw-chat-stream",
)


@dataclass
class Truth:
    """One request as its client saw it. Times are CLOCK_MONOTONIC ns, the clock of the
    kernel timestamps zerotrace takes (a wall-clock step between two stamps would otherwise
    show as an error): only differences mean anything."""

    number: int
    kind: str
    model: str
    stream: bool
    sent_ns: int = 0
    # When the send call that carried the first byte returned. Normally microseconds after
    # sent_ns; when the client was descheduled in between, the truth itself is only known to
    # lie in [sent_ns, sent_done_ns], and the accuracy check says so.
    sent_done_ns: int = 0
    token_ns: list[int] = field(default_factory=list)  # arrival of each content event
    # For each token: how much earlier than token_ns it may have reached the client's socket
    # (the truth's own uncertainty on a busy machine): the time the read that brought it spent
    # running or waiting for a CPU (/proc/thread-self/schedstat), or, when the read found the
    # data already waiting, the time since the previous read returned; at least as long as
    # the kernel says the bytes had waited in the socket, when that is more than a tick.
    token_wait_ns: list[int] = field(default_factory=list)
    done_ns: int = 0
    output_tokens: int = 0
    error: str = ""


@dataclass(frozen=True)
class Spec:
    number: int
    kind: str
    tokens: int
    first_ms: float
    token_ms: float


_client: Any = None
_sent_ns = 0
_url = ""
_cafile: str | None = None


_send_pending = False
_last_read_ns = 0
_last_read_wait_ns = 0


# A read that returns faster than this found its data already waiting in the socket.
_READ_DID_NOT_BLOCK_NS = 100_000


def _arrival_slack(called_ns: int, returned_ns: int, busy_ns: int, previous_ns: int) -> int:
    """How much earlier than `returned_ns` the bytes may have reached the socket. A read that
    blocked was woken by them: only the time this thread then spent waiting for a CPU or
    running (decrypting, copying, a page fault that compacts memory) separates the two; the
    read's `busy_ns` counts both. A read that found them waiting cannot tell when they came,
    only that it was after the previous read."""
    if returned_ns - called_ns >= _READ_DID_NOT_BLOCK_NS or not previous_ns:
        return busy_ns
    return max(busy_ns, returned_ns - previous_ns)


def _tick_ns() -> int:
    """One kernel tick, from the kernel's config where it publishes it (CONFIG_HZ=250 on these
    machines: 4 ms); otherwise 10 ms, the coarsest, so that a coarse count never passes for
    a stall."""
    with contextlib.suppress(OSError, ValueError), gzip.open("/proc/config.gz", "rt") as config:
        for line in config:
            if line.startswith("CONFIG_HZ="):
                return 1_000_000_000 // int(line.split("=", 1)[1])
    return 10_000_000


_TICK_NS = _tick_ns()
_TCP_INFO_LAST_DATA_RECV = 52  # offset of tcpi_last_data_recv (ms) in struct tcp_info


def _held_by_kernel_ns(sock: Any) -> int:
    """How long the newest bytes had been in the socket when a read returned, by the kernel's
    own count (TCP_INFO's last data received, in whole ticks): 0 unless surely more than a
    tick, otherwise an upper bound. It covers what the thread's counters cannot: a stall
    while it slept on a lock or while the hypervisor ran another guest."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        (last_ms,) = struct.unpack_from("I", info, _TCP_INFO_LAST_DATA_RECV)
    except (OSError, struct.error):
        return 0
    held = last_ms * 1_000_000
    return held + _TICK_NS if held >= 2 * _TICK_NS else 0


# The kernel's receive time of the newest bytes a read returned (SO_TIMESTAMPNS, CLOCK_REALTIME
# ns), asked of plain TCP sockets with every read. It bounds what the thread's counters miss
# after the data came: this VM's hypervisor runs other guests now and then (steal time, which
# CONFIG_PARAVIRT_TIME_ACCOUNTING keeps out of a thread's run and wait times), and one such
# stall of a few ms between the read's wake-up and the client's stamp once put a measured TTFT
# outside a window the client had drawn too narrow.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("qq")
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size)


def _kernel_arrival_ns(ancillary: list[tuple[int, int, bytes]]) -> int:
    """The receive time in a read's ancillary data, CLOCK_REALTIME ns; 0 when absent."""
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= 16:
            seconds, nanos = _TIMESPEC.unpack_from(payload)
            return int(seconds) * 1_000_000_000 + int(nanos)
    return 0


def _held_since_arrival_ns(arrival_realtime_ns: int, now_monotonic_ns: int) -> int:
    """How long before `now_monotonic_ns` the kernel received the newest bytes read."""
    if not arrival_realtime_ns:
        return 0
    offset = time.time_ns() - time.monotonic_ns()  # realtime - monotonic, read now
    return max(0, now_monotonic_ns - (arrival_realtime_ns - offset))


def _stamped_read(sock: socket.socket, into: Any, size: int, flags: int) -> tuple[Any, int]:
    """recv (into is None) or recv_into through recvmsg, with the kernel's receive time."""
    if into is None:
        data, ancillary, _flags, _addr = sock.recvmsg(size, _ANCILLARY, flags)
        return data, _kernel_arrival_ns(ancillary)
    view = memoryview(into)
    count, ancillary, _flags, _addr = sock.recvmsg_into(
        [view[: size or len(view)]], _ANCILLARY, flags
    )
    return count, _kernel_arrival_ns(ancillary)


_timestamped: weakref.WeakSet[socket.socket] = weakref.WeakSet()


def _read_args(args: tuple[Any, ...], into: bool) -> tuple[Any, int, int]:
    """(buffer or None, size, flags) of recv(bufsize[, flags]) or recv_into(buffer[, nbytes[,
    flags]])."""
    if into:
        buffer, size, flags = (*args, 0, 0)[:3]
        return buffer, int(size), int(flags)
    size, flags = (*args, 0)[:2]
    return None, int(size), int(flags)


def _busy_ns() -> int:
    """Time this thread has spent running or runnable (waiting for a CPU), since it started:
    the first two fields of /proc/thread-self/schedstat."""
    with open("/proc/thread-self/schedstat") as stat:
        on_cpu, runqueue, _ = stat.read().split(maxsplit=2)
    return int(on_cpu) + int(runqueue)


_sent_done_ns = 0


def _mark_sent(_request: Any) -> None:
    global _send_pending
    _send_pending = True  # the next socket write is this request's first byte


def _stamp_sockets() -> None:
    """Wrap socket send and recv (plain and TLS) to note when bytes left and came in.

    Reads are wrapped at the innermost Python layer only (SSLSocket.recv and recv_into call
    SSLSocket.read): an outer wrapper would stamp after the inner one's bookkeeping, which
    opens a /proc file, and the truth would lag the read by that much."""

    def sending(original: Any) -> Any:
        def send(self: Any, data: Any, *args: Any) -> Any:
            global _send_pending, _sent_ns, _sent_done_ns
            if not _send_pending:
                return original(self, data, *args)
            _sent_ns, _send_pending = time.monotonic_ns(), False
            try:
                return original(self, data, *args)
            finally:
                _sent_done_ns = time.monotonic_ns()

        return send

    def receiving(original: Any, into: bool = False) -> Any:
        def recv(self: Any, *args: Any) -> Any:
            global _last_read_ns, _last_read_wait_ns
            busy, called = _busy_ns(), time.monotonic_ns()
            arrival = 0
            if type(self) is socket.socket and self.type == socket.SOCK_STREAM:
                # A plain TCP socket (TLS reads happen inside OpenSSL): read with recvmsg
                # to learn when the kernel received the bytes.
                if self not in _timestamped:
                    self.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                    _timestamped.add(self)
                data, arrival = _stamped_read(self, *_read_args(args, into))
            else:
                data = original(self, *args)
            now = time.monotonic_ns()
            slack = _arrival_slack(called, now, _busy_ns() - busy, _last_read_ns)
            held = _held_by_kernel_ns(self) if data else 0
            received = _held_since_arrival_ns(arrival, now) if data else 0
            _last_read_wait_ns, _last_read_ns = max(slack, held, received), now
            return data

        return recv

    for cls in (socket.socket, ssl.SSLSocket):
        for name in ("send", "sendall"):
            setattr(cls, name, sending(getattr(cls, name)))
    for name in ("recv", "recv_into"):
        setattr(socket.socket, name, receiving(getattr(socket.socket, name), name == "recv_into"))
    ssl.SSLSocket.read = receiving(ssl.SSLSocket.read)  # type: ignore[method-assign]


def _init(url: str, cafile: str | None, ready: Any = None) -> None:
    global _client, _url, _cafile
    import httpx2
    from openai import OpenAI

    _url, _cafile = url, cafile
    _stamp_sockets()
    with contextlib.suppress(OSError):
        os.nice(-10)  # root only: the truth-recording clients go first on a busy machine
    verify: Any = ssl.create_default_context(cafile=cafile) if cafile else True
    http = httpx2.Client(verify=verify, event_hooks={"request": [_mark_sent]}, timeout=60)
    _client = OpenAI(base_url=f"{url}/v1", api_key="not-needed", http_client=http, max_retries=0)
    # The SDK imports its response types lazily, on first use, which takes seconds: warm every
    # kind up once so no measured request pays for it. Models named warmup-* are not measured.
    for kind in KINDS:
        warm = run_one(Spec(-1, kind, 2, 0, 0))
        if warm.error:
            raise RuntimeError(f"warm-up {kind} failed: {warm.error}")
    gc.collect()
    gc.freeze()  # the SDK's many long-lived objects: never scanned again by the collector
    if ready is not None:
        ready.wait()  # measured requests start when every worker has warmed up


def run_one(spec: Spec) -> Truth:
    model = f"model-{spec.kind}-{spec.number:03d}" if spec.number >= 0 else f"warmup-{spec.kind}"
    truth = Truth(spec.number, spec.kind, model, stream=spec.kind != "openai-chat")
    gc.disable()  # no collection pause between a read and its timestamp (it runs in between)
    # Spread the streams' phases: with identical pacing, 16 streams would get their tokens in
    # the same millisecond and the last client woken would stamp its truth late.
    if spec.number >= 0:
        time.sleep((spec.number * 7 % 16) * 0.0013)
    extra = {"zt_pace": {"first_ms": spec.first_ms, "token_ms": spec.token_ms}}
    try:
        if spec.kind == "raw-chat-stream":
            _raw_stream(spec, model, truth)
        elif spec.kind == "openai-chat":
            response = _client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=spec.tokens,
                extra_body=extra,
            )
            now = _last_read_ns
            truth.sent_ns, truth.token_ns, truth.done_ns = _sent_ns, [now], now
            truth.token_wait_ns = [_last_read_wait_ns]
            truth.sent_done_ns = _sent_done_ns
            truth.output_tokens = response.usage.completion_tokens
        elif spec.kind == "openai-completions-stream":
            stream = _client.completions.create(
                model=model, prompt="hi", stream=True, max_tokens=spec.tokens, extra_body=extra
            )
            for chunk in stream:
                now = _last_read_ns
                if chunk.choices and chunk.choices[0].text:
                    truth.token_ns.append(now)
                    truth.token_wait_ns.append(_last_read_wait_ns)
            truth.sent_ns, truth.done_ns = _sent_ns, time.monotonic_ns()
            truth.sent_done_ns = _sent_done_ns
            truth.output_tokens = len(truth.token_ns)
        elif spec.kind == "openai-responses-stream":
            stream = _client.responses.create(
                model=model,
                input="hi",
                stream=True,
                max_output_tokens=spec.tokens,
                extra_body=extra,
            )
            for event in stream:
                now = _last_read_ns
                if event.type == "response.output_text.delta" and event.delta:
                    truth.token_ns.append(now)
                    truth.token_wait_ns.append(_last_read_wait_ns)
            truth.sent_ns, truth.done_ns = _sent_ns, time.monotonic_ns()
            truth.sent_done_ns = _sent_done_ns
            truth.output_tokens = len(truth.token_ns)
        else:
            options = {"include_usage": True} if spec.kind.endswith("usage") else None
            stream = _client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                max_tokens=spec.tokens,
                stream_options=options,
                extra_body=extra,
            )
            for chunk in stream:
                now = _last_read_ns
                if chunk.choices and chunk.choices[0].delta.content:
                    truth.token_ns.append(now)
                    truth.token_wait_ns.append(_last_read_wait_ns)
                if chunk.usage is not None:
                    truth.output_tokens = chunk.usage.completion_tokens
            truth.sent_ns, truth.done_ns = _sent_ns, time.monotonic_ns()
            truth.sent_done_ns = _sent_done_ns
            truth.output_tokens = truth.output_tokens or len(truth.token_ns)
    except Exception as exc:  # recorded, so a test shows which request failed and why
        truth.error = _explain(exc)
    finally:
        gc.enable()
    return truth


def _explain(exc: BaseException) -> str:
    """The error and what caused it: the SDK says only "Connection error." and keeps the
    transport's reason (reset, refused, closed before a response, TLS) in the chain."""
    parts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return " <- ".join(parts)


def _raw_stream(spec: Spec, model: str, truth: Truth) -> None:
    """HTTP/1.1 over a plain socket: chunked transfer decoding and SSE parsing by hand."""
    url = urlparse(_url)
    body = json.dumps(
        {
            "model": model,
            "stream": True,
            "max_tokens": spec.tokens,
            "messages": [{"role": "user", "content": "hi"}],
            "zt_pace": {"first_ms": spec.first_ms, "token_ms": spec.token_ms},
        }
    )
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    sock: Any = socket.create_connection((url.hostname, url.port or 80))
    # As HTTP clients do (urllib3, curl, aiohttp): without it, over TLS 1.3 the request waits
    # in this client's kernel (Nagle) until the server acknowledges the handshake's last
    # flight, which a busy server does only when it next reads or writes: the request is then
    # late by milliseconds that its client, not the server, added.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if url.scheme == "https":
        context = ssl.create_default_context(cafile=_cafile)
        sock = context.wrap_socket(sock, server_hostname=url.hostname)
    with sock:
        truth.sent_ns = time.monotonic_ns()
        sock.sendall(head.encode() + body.encode())
        truth.sent_done_ns = time.monotonic_ns()
        raw = b""
        while True:
            data = sock.recv(65536)  # the wrapped read stamps its return and slack
            if not data:
                break
            raw += data
            # Count complete SSE content events seen so far; stamp the new ones with the read.
            events = _sse_events(_dechunk(raw))
            content = [e for e in events if _has_content(e)]
            new = len(content) - len(truth.token_ns)
            truth.token_ns += [_last_read_ns] * new
            truth.token_wait_ns += [_last_read_wait_ns] * new
        truth.done_ns = time.monotonic_ns()
    truth.output_tokens = len(truth.token_ns)


def _dechunk(raw: bytes) -> bytes:
    _head, _, rest = raw.partition(b"\r\n\r\n")
    out = b""
    while rest:
        size_line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            break
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0 or len(rest) < size:
            out += rest[:size] if size else b""
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


def _sse_events(body: bytes) -> list[str]:
    events = body.replace(b"\r\n", b"\n").split(b"\n\n")[:-1]  # the last one may be partial
    return [
        line[5:].strip().decode()
        for e in events
        for line in e.split(b"\n")
        if line.startswith(b"data:")
    ]


def _has_content(data: str) -> bool:
    if data == "[DONE]":
        return False
    choices = json.loads(data).get("choices") or []
    return any((c.get("delta") or {}).get("content") for c in choices)


def plan(requests: int, tokens: int = 12, first_ms: float = 40, token_ms: float = 40) -> list[Spec]:
    """A deterministic mix of every kind, with tokens and pacing varying per request. The
    default pace (25 tokens/s a stream, 400/s at concurrency 16) keeps a 2-core machine that
    also runs the server, 16 SDK clients and zerotrace below saturation: past it, every
    process waits for a CPU and the timings measure the scheduler, not the traffic."""
    return [
        Spec(
            i, KINDS[i % len(KINDS)], tokens + i % 7, first_ms + (i % 5) * 3, token_ms + (i % 3) * 2
        )
        for i in range(requests)
    ]


def _import_sdk() -> None:
    """Import the SDK (and the lazily imported types) once, before forking, so the workers
    share them instead of each spending a second of CPU on imports while others measure."""
    import httpx2  # noqa: F401
    import openai  # noqa: F401
    from openai.types import completion, responses  # noqa: F401
    from openai.types.chat import chat_completion, chat_completion_chunk  # noqa: F401


def run_load(
    url: str, specs: list[Spec], concurrency: int, cafile: str | None = None
) -> list[Truth]:
    _import_sdk()
    context = multiprocessing.get_context("fork")
    ready = context.Barrier(concurrency)
    with context.Pool(concurrency, initializer=_init, initargs=(url, cafile, ready)) as pool:
        return sorted(pool.imap_unordered(run_one, specs), key=lambda t: t.number)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cafile")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--wait-for",
        help="start only once this file exists (so an observer can attach to this process first)",
    )
    args = parser.parse_args()
    while args.wait_for and not os.path.exists(args.wait_for):
        time.sleep(0.05)
    truths = run_load(args.url, plan(args.requests), args.concurrency, args.cafile)
    with open(args.out, "w") as out:
        json.dump([asdict(t) for t in truths], out)
    failed = [t for t in truths if t.error]
    print(
        f"{len(truths)} requests, {len(failed)} failed" + (f": {failed[0].error}" if failed else "")
    )


if __name__ == "__main__":
    main()
