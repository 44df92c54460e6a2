"""Spans per second per core through trace assembly (zerotrace_correlator/trace_step.py).

Synthetic but realistic input: requests to a threaded gateway, each with three calls made by
the thread serving it (Redis, PostgreSQL, an upstream HTTP server) and the upstream's own
server span, every exchange seen at both ends (client and server spans with the request's
TCP sequence number), 16 requests in flight on 16 threads, spans in the order they end, as
the correlator writes them. Both stages run over Avro messages as the shells feed them:
the exchange stage (decode, join across processes, pass on by process) and the process stage
(decode, same thread). Measures this process's CPU time, so the figure is per core. Also
checks the links: every call linked to its request, every server span to its client span.

Run: .venv/bin/python -m bench.trace_assembly [--requests 20000]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_correlator.pipeline import span_key
from zerotrace_correlator.trace_step import ExchangeTraceStep, ProcessTraceStep

MS = 1_000_000
THREADS = 16


def _span(
    span_id: str,
    kind: str,
    pid: int,
    tid: int,
    start: int,
    end: int,
    conn: tuple[int, int],
    seq: int,
) -> dict[str, Any]:
    client_port, server_port = conn
    return {
        "span_id": span_id,
        "trace_id": span_id * 2,
        "parent_span_id": None,
        "node_id": "node-1",
        "pid": pid,
        "tid": tid,
        "process_name": "python3",
        "container_id": None,
        "service": f"svc-{pid}",
        "kind": kind,
        "name": "GET /x",
        "start_ns": start,
        "end_ns": end,
        "status": "OK",
        "attributes": {
            names.ATTR_CLIENT_ADDRESS: "10.0.0.1",
            names.ATTR_CLIENT_PORT: str(client_port),
            names.ATTR_SERVER_ADDRESS: "10.0.0.2",
            names.ATTR_SERVER_PORT: str(server_port),
            names.ATTR_TCP_REQUEST_SEQ: str(seq),
            names.ATTR_HTTP_METHOD: "GET",
            names.ATTR_URL_PATH: "/x",
        },
        "source_event_ids": [],
    }


def topology(requests: int) -> list[dict[str, Any]]:
    """Spans of `requests` requests, ordered by end time (as the correlator emits them)."""
    spans = []
    for i in range(requests):
        thread = i % THREADS
        t0 = (i // THREADS) * 10 * MS + thread * 1000
        conn_in = (30000 + thread, 8000)
        sid = f"{i:08x}"
        spans.append(
            _span(f"a{sid}0000000", "http.client", 1, 100 + thread, t0, t0 + 9 * MS, conn_in, i)
        )
        spans.append(
            _span(
                f"b{sid}0000000", "http.server", 2, 200 + thread, t0 + 100, t0 + 8 * MS, conn_in, i
            )
        )
        for k, (port, start, end) in enumerate(((6379, 1, 2), (5432, 2, 4), (9000, 4, 7))):
            conn = (40000 + thread * 4 + k, port)
            kind = "http.client" if port == 9000 else ("redis.client", "postgresql.client")[k]
            spans.append(
                _span(
                    f"c{sid}{k:07x}",
                    kind,
                    2,
                    200 + thread,
                    t0 + start * MS,
                    t0 + end * MS,
                    conn,
                    i * 10 + k,
                )
            )
        up = (40000 + thread * 4 + 2, 9000)
        spans.append(
            _span(
                f"d{sid}0000000",
                "http.server",
                3,
                300 + thread,
                t0 + 4 * MS + 100,
                t0 + 7 * MS - 100,
                up,
                i * 10 + 2,
            )
        )
    return sorted(spans, key=lambda s: (s["end_ns"], s["span_id"]))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--requests", type=int, default=20_000)
    args = p.parse_args()
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    spans = topology(args.requests)
    messages = [
        Message(
            names.DERIVED_SPAN.name,
            0,
            n,
            span_key(s),
            codec.encode(names.DERIVED_SPAN.record, s),
            0,
        )
        for n, s in enumerate(spans)
    ]
    exchange, process = ExchangeTraceStep(codec), ProcessTraceStep(codec)
    started = time.process_time()
    passed: list[Message] = []
    links = 0
    for m in messages:
        for out in exchange.process(m):
            if out.topic == names.DERIVED_SPAN_BY_PROCESS.name:
                passed.append(Message(out.topic, 0, len(passed), out.key, out.value, 0))
            else:
                links += 1
        if m.offset % 5000 == 0:
            exchange.tick(0)
    exchange_s = time.process_time() - started
    started = time.process_time()
    for m in passed:
        links += sum(1 for out in process.process(m) if out.topic == names.DERIVED_TRACE.name)
        if m.offset % 5000 == 0:
            process.tick(0)
    process_s = time.process_time() - started
    n = len(spans)
    expected = args.requests * 5  # 3 calls + 2 server spans joined to their client span
    print(f"{n:,} spans of {args.requests:,} requests, {links:,} links (expected {expected:,})")
    per_span = exchange_s * 1e6 / n
    print(f"exchange stage: {n / exchange_s:,.0f} spans/s per core ({per_span:.1f} µs each)")
    print(
        f"process stage:  {n / process_s:,.0f} spans/s per core ({process_s * 1e6 / n:.1f} µs each)"
    )
    both = exchange_s + process_s
    print(f"both stages:    {n / both:,.0f} spans/s per core")
    print("links: " + ("PASS" if links == expected else f"MISS ({links} of {expected})"))


if __name__ == "__main__":
    main()
