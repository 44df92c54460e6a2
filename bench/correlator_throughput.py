"""Raw events per second per core through the correlator's pure logic.

Synthetic but realistic input: OpenAI-compatible streaming conversations as the socket probe
records them from a client (one request write, then one read per SSE chunk of a chunked
response), many connections interleaved. Measures CPU time of this process (so the figure is
per core and a busy neighbour does not change it much): each stage per event (Avro decode
of the SocketBatch records the collector publishes, the HTTP/SSE/LLM correlation, Avro
encode of the derived records), then the whole step (CorrelatorStep.process) over batches
and over one SocketData record per event, as captures publish them.

Run: .venv/bin/python -m bench.correlator_throughput [--streams 400 --tokens 64]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.socket_batch import socket_batch_of
from zerotrace_correlator.http_llm_step import HttpLlmCorrelator
from zerotrace_correlator.pipeline import CorrelatorStep
from zerotrace_correlator.socket_call import calls_of_batch


def sse_chunk(i: int) -> bytes:
    data = json.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}],
        }
    )
    event = f"data: {data}\n\n".encode()
    return f"{len(event):x}\r\n".encode() + event + b"\r\n"


def conversation(conn: int, tokens: int, t0: int) -> Iterator[dict[str, Any]]:
    body = json.dumps(
        {
            "model": "m",
            "stream": True,
            "max_tokens": tokens,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    pieces = [("EGRESS", request), ("INGRESS", head)]
    pieces += [("INGRESS", sse_chunk(i)) for i in range(tokens)]
    pieces += [("INGRESS", b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")]
    for n, (direction, data) in enumerate(pieces):
        ts = t0 + n * 5_000_000
        yield {
            "event_id": f"e{conn}-{n}",
            "node_id": "bench",
            "pid": 100 + conn % 16,
            "tid": 100 + conn % 16,
            "process_name": "client",
            "container_id": None,
            "conn_id": f"bench/{conn}",
            "fd": 7,
            "direction": direction,
            "source": "SYSCALL",
            "start_ns": ts,
            "end_ns": ts + 20_000,
            "bytes": len(data),
            "payload": data,
            "payload_truncated": False,
            "tcp_seq": None,
            "local_addr": "127.0.0.1",
            "local_port": 40000 + conn,
            "remote_addr": "127.0.0.1",
            "remote_port": 8000,
        }


def workload(streams: int, tokens: int) -> list[dict[str, Any]]:
    """Conversations interleaved record by record, as many connections in flight would be."""
    iters = [
        conversation(c, tokens, 1_700_000_000_000_000_000 + c * 1_000_000) for c in range(streams)
    ]
    out: list[dict[str, Any]] = []
    while iters:
        alive = []
        for it in iters:
            record = next(it, None)
            if record is not None:
                out.append(record)
                alive.append(it)
        iters = alive
    return out


def batched(records: list[dict[str, Any]], per_poll: int) -> list[dict[str, Any]]:
    """SocketBatch records as the collector publishes them: the records of each *per_poll*
    window (one poll of its ring) grouped by connection, in order."""
    out = []
    for at in range(0, len(records), per_poll):
        by_conn: dict[str, list[dict[str, Any]]] = {}
        for record in records[at : at + per_poll]:
            by_conn.setdefault(record["conn_id"], []).append(record)
        out += [socket_batch_of(calls) for calls in by_conn.values()]
    return out


def cpu_rate(events: int, seconds: float) -> float:
    return events / seconds if seconds > 0 else float("inf")


def timed(work: Callable[[], object]) -> float:
    start = time.process_time()
    work()
    return time.process_time() - start


def whole_step(codec: AvroCodec, values: list[tuple[str, dict[str, Any]]]) -> float:
    """CPU seconds of CorrelatorStep over the records, encoded first (not timed)."""
    messages = [
        Message(names.RAW_SOCKET.name, 0, i, None, codec.encode(record, datum), 0)
        for i, (record, datum) in enumerate(values)
    ]
    step = CorrelatorStep(codec)

    def run() -> None:
        for message in messages:
            step.process(message)
        step.flush()

    return timed(run)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=400)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument(
        "--per-poll", type=int, default=2000, help="raw events per collector poll (default 2000)"
    )
    args = parser.parse_args()
    records = workload(args.streams, args.tokens)
    n = len(records)
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    singles = [(names.RAW_SOCKET.record, r) for r in records]
    batches = [(names.SOCKET_BATCH_RECORD, b) for b in batched(records, args.per_poll)]
    values = [codec.encode(record, datum) for record, datum in batches]

    correlator = HttpLlmCorrelator()
    derived: list[tuple[str, dict[str, Any]]] = []
    decoded: list[tuple[str, list[Any]]] = []

    def decode() -> None:
        for value in values:
            datum = codec.decode(value)[1]
            decoded.append((datum["conn_id"], calls_of_batch(datum)))

    def correlate() -> None:
        for conn_id, calls in decoded:
            derived.extend(correlator.feed_calls(conn_id, calls))
        derived.extend(correlator.flush())

    stages = {"decode (Avro SocketBatch -> calls)": timed(decode)}
    stages["correlate (HttpLlmCorrelator)"] = timed(correlate)
    assert len(derived) >= args.streams, f"expected >= {args.streams} records, got {len(derived)}"
    stages["encode (Avro derived records)"] = timed(
        lambda: [codec.encode(record, datum) for record, datum in derived]
    )
    print(f"input: {n} raw socket events, {args.streams} streams of {args.tokens} tokens")
    print(f"  in {len(batches)} SocketBatch records ({n / len(batches):.1f} events each)")
    for stage, seconds in stages.items():
        print(f"stage {stage}: {seconds / n * 1e6:.2f} us/event")
    for name, step_s in (
        (
            "whole step, SocketBatch records (what the collector publishes)",
            whole_step(codec, batches),
        ),
        ("whole step, one SocketData record per event (captures)", whole_step(codec, singles)),
    ):
        print(f"{name}: {cpu_rate(n, step_s):,.0f} events/s per core")


if __name__ == "__main__":
    main()
