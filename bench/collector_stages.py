"""The collector's cost per socket event, stage by stage: ring -> decode -> record -> encode ->
produce, as batches (what it does) and one record per event (what it did), in one run.

No kernel here: the events are the socket probe's own binary records (bpf/socket.c's
zt_sock_data_hdr + payload) laid out in a ring image as the kernel lays them out (8-byte
headers, 8-byte alignment, the data area twice), so every stage runs the collector's real
code on them:

- ring: probes/ring_reader.walk over the image, a poll's worth at a time;
- decode: probes/socket_decode.decode_socket_event on each record;
- record: feeds.SocketFeed.poll (SocketBatch per connection and poll) over a probe that hands
  it the decoded samples; baseline: socket_records.socket_data_record per event;
- redact (part of record): what masking credentials and content costs inside SocketFeed.poll,
  measured as the same poll with and without the redactor, in the same run;
- encode: AvroCodec.encode of each record;
- produce: the collector's producer (SpoolingProducer over KafkaProducer) to the real Kafka
  with acknowledgements, flushed at the end (timed), or the in-memory bus with --no-kafka.

The workload: --connections keep-alive connections, each a small HTTP/1.1 request written
and a response read in turn, interleaved in time as many connections in flight are. Figures
are CPU time of this process per event (so per core; a busy neighbour changes them little),
and events/s per core for the whole chain. Start Kafka first (`zerotrace infra up --only
kafka`).

With --llm the calls are an OpenAI chat request with a bearer key (written) and a streamed
token's SSE chunk (read), so the redactor has credentials and content to mask in every call;
without it, plain GETs and JSON answers (nothing to mask: the cost of looking). With --h2 the
same exchange over HTTP/2 (HEADERS with HPACK, Huffman-coded, and DATA frames: the first
call of a connection with the preface and SETTINGS, later requests from the dynamic table).

Run: .venv/bin/python -m bench.collector_stages [--events 200000 --per-poll 2000] [--llm|--h2]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from zerotrace import names
from zerotrace.bus import Producer
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_collector.feeds import RawRecord, SocketFeed
from zerotrace_collector.probes.event_layout import Direction, SockOp, Source
from zerotrace_collector.probes.ring_reader import walk
from zerotrace_collector.probes.socket_decode import (
    DATA_HEADER,
    SocketDataSample,
    decode_socket_event,
)
from zerotrace_collector.proc_net import Endpoints
from zerotrace_collector.socket_records import socket_data_record

EVENTS_PER_CORE_TARGET = 100_000
NODE = "bench-node"
OFFSET_NS = 1_700_000_000_000_000_000
ENDS = Endpoints("127.0.0.1", 8000, "127.0.0.1", 41000)
REQUEST = b"GET /api/items/42 HTTP/1.1\r\nHost: bench\r\nConnection: keep-alive\r\n\r\n"
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n"
RESPONSE += b'{"item": 42}\r\n\r\n'
LLM_BODY = (
    b'{"model":"llama-3.1-8b-instruct","stream":true,"messages":[{"role":"user",'
    b'"content":"Summarise the quarterly report in three bullet points."}]}'
)
LLM_REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
    b"Authorization: Bearer sk-proj-0123456789abcdefghijklmnop\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(LLM_BODY)
) + LLM_BODY
LLM_RESPONSE = (
    b'5f\r\ndata: {"object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":" bullet"},"finish_reason":null}]}\n\n\r\n'
)


class _NoRedaction:
    """The redactor's interface doing nothing: the baseline of the redact row."""

    def redact(self, _conn: Any, _stream: Any, data: bytes, _complete: bool = True) -> bytes:
        return data

    def forget(self, _conn: Any) -> None:
        pass

    def counters(self) -> dict[str, int]:
        return {}


# -- the input: the probe's records, and a ring image holding them --------------------------------


def h2_payload(turn: int, blocks: tuple[bytes, bytes, bytes]) -> bytes:
    """The --h2 call of a connection's *turn*: a chat request written (HEADERS and DATA) or an
    SSE chunk read (in a DATA frame); each side's first call opens the connection. *blocks*:
    a request's header block, the same one later (from the dynamic table), a response's."""
    stream = turn // 2 * 2 + 1
    if turn % 2 == 0:
        block = blocks[turn > 0]
        frames = _frame(len(block), 1, 0x4, stream) + block
        frames += _frame(len(LLM_BODY), 0, 0x1, stream) + LLM_BODY
        return (_H2_PREFACE if turn == 0 else b"") + frames
    chunk = LLM_RESPONSE[4:-2]  # the SSE event, without the chunked framing
    frames = _frame(len(chunk), 0, 0, stream) + chunk
    if turn == 1:
        frames = _frame(0, 4, 0, 0) + _frame(len(blocks[2]), 1, 0x4, stream) + blocks[2] + frames
    return frames


def _frame(length: int, kind: int, flags: int, stream: int) -> bytes:
    return length.to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big")


def h2_blocks() -> tuple[bytes, bytes, bytes]:
    from hpack import Encoder, NeverIndexedHeaderTuple  # only --h2 needs it (a test dependency)

    request: list[tuple[str, str] | NeverIndexedHeaderTuple] = [
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/v1/chat/completions"),
        (":authority", "bench"),
        # Never indexed, as h2, curl and nghttp2 send it: its value is in every request.
        NeverIndexedHeaderTuple("authorization", "Bearer sk-proj-0123456789abcdefghijklmnop"),
        ("content-type", "application/json"),
    ]
    encoder = Encoder()
    response = [(":status", "200"), ("content-type", "text/event-stream")]
    # The second request's block is the first's fields from the dynamic table.
    return encoder.encode(request), encoder.encode(request), Encoder().encode(response)


_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(0, 4, 0, 0)


def probe_records(
    events: int, connections: int, llm: bool = False, h2: bool = False
) -> Iterator[bytes]:
    """zt_sock_data_hdr + payload, as socket.c writes them: a request written, a response
    read, on each connection in turn."""
    comm = b"server".ljust(16, b"\0")
    request, response = (LLM_REQUEST, LLM_RESPONSE) if llm else (REQUEST, RESPONSE)
    blocks = h2_blocks() if h2 else (b"", b"", b"")
    for i in range(events):
        conn, turn = i % connections, i // connections
        egress = turn % 2 == 0
        payload = request if egress else response
        if h2:
            payload = h2_payload(turn, blocks)
        start = 1_000_000 + i * 10_000
        yield (
            DATA_HEADER.pack(
                2,  # ZT_EVENT_SOCK_DATA
                4000,
                4000 + conn % 8,
                100 + conn,
                1,
                start,
                start + 3_000,
                len(payload),
                500 + conn,
                Direction.EGRESS if egress else Direction.INGRESS,
                Source.SYSCALL,
                SockOp.WRITE if egress else SockOp.READ,
                0,
                len(payload),
                comm,
                0,
                0,
                0,  # py_task
            )
            + payload
        )


def ring_image(records: Sequence[bytes]) -> tuple[memoryview, int, int]:
    """(data area mapped twice, mask, producer position) holding *records* from position 0."""
    body = bytearray()
    for record in records:
        body += len(record).to_bytes(4, "little") + bytes(4)
        body += record + bytes(-len(record) % 8)
    size = 1 << max(12, (len(body) - 1).bit_length())
    area = bytearray(size)
    area[: len(body)] = body
    return memoryview(bytes(area + area)), size - 1, len(body)


# -- stages ------------------------------------------------------------------------------------


class _Probe:
    """What SocketFeed asks of its probe: one poll's samples, and their endpoints."""

    def __init__(self) -> None:
        self.follow = False
        self.samples: list[SocketDataSample] = []

    def poll(self, _timeout_ms: int) -> list[SocketDataSample]:
        out, self.samples = self.samples, []
        return out

    def endpoints(self, _sample: Any) -> Endpoints:
        return ENDS


def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    result = work()
    return time.process_time() - start, result


def read_ring(image: memoryview, mask: int, producer: int, per_poll_bytes: int) -> list[bytes]:
    """Every record, a poll's budget at a time; each copied out as decoding would."""
    out: list[bytes] = []
    consumer = 0
    while consumer < producer:
        batch = walk(image, mask, consumer, producer, per_poll_bytes)
        out += [bytes(r) for r in batch.records]
        consumer = batch.consumer
    return out


def batched_records(
    samples: list[SocketDataSample], per_poll: int, redact: bool = True
) -> list[RawRecord]:
    probe = _Probe()
    feed = SocketFeed(probe, NODE, OFFSET_NS)  # type: ignore[arg-type]
    if not redact:
        feed.redactor = _NoRedaction()  # type: ignore[assignment]
    feed._containers = {4000: None}
    out: list[RawRecord] = []
    for at in range(0, len(samples), per_poll):
        probe.samples = samples[at : at + per_poll]
        out += feed.poll(0)
    return out


def single_records(samples: list[SocketDataSample]) -> list[RawRecord]:
    return [
        RawRecord(
            names.RAW_SOCKET.name,
            b"k",
            names.RAW_SOCKET.record,
            socket_data_record(s, NODE, OFFSET_NS, None, ENDS),
        )
        for s in samples
    ]


def produce(producer: Producer, records: list[RawRecord], values: list[bytes]) -> int:
    for raw, value in zip(records, values, strict=True):
        producer.produce(raw.topic, raw.key, value)
    return producer.flush(60)


def make_producer(kafka: str | None) -> tuple[Producer, str]:
    if kafka is None:
        broker = InMemoryBroker()
        broker.ensure_topics()
        return broker.producer(), "in-memory bus"
    from zerotrace.bus_kafka import KafkaBus, check_reachable

    check_reachable(kafka)  # one line if Kafka is away: start it, or pass --no-kafka
    bus = KafkaBus(kafka)
    bus.ensure_topics()
    return bus.producer(), f"Kafka at {kafka}, acks=all"


def chain(
    name: str,
    samples: list[SocketDataSample],
    to_records: Callable[[], list[RawRecord]],
    codec: AvroCodec,
    producer: Producer,
) -> dict[str, float]:
    """CPU seconds of record, encode and produce for one way of publishing *samples*."""
    record_s, records = timed(to_records)
    events = sum(r.events for r in records)
    assert events == len(samples), f"{name}: {events} events in the records, not {len(samples)}"
    encode_s, values = timed(lambda: [codec.encode(r.record, r.datum) for r in records])
    produce_s, pending = timed(lambda: produce(producer, records, values))
    assert pending == 0, f"{name}: {pending} messages not acknowledged"
    size = sum(len(v) for v in values)
    print(
        f"{name}: {len(records):,} Kafka messages ({len(samples) / len(records):.1f} events "
        f"each), {size / len(samples):.0f} bytes per event before compression"
    )
    return {"record": record_s, "encode": encode_s, "produce": produce_s}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000, help="socket events (200000)")
    parser.add_argument("--connections", type=int, default=64, help="connections (64)")
    parser.add_argument(
        "--per-poll", type=int, default=2000, help="events a collector poll takes (2000)"
    )
    parser.add_argument("--kafka", default="127.0.0.1:9092", help="bootstrap (127.0.0.1:9092)")
    parser.add_argument("--no-kafka", action="store_true", help="produce to the in-memory bus")
    parser.add_argument(
        "--llm", action="store_true", help="chat requests with a bearer key, SSE token chunks"
    )
    parser.add_argument("--h2", action="store_true", help="as --llm, over HTTP/2")
    args = parser.parse_args(argv)
    records = list(probe_records(args.events, args.connections, args.llm, args.h2))
    image, mask, producer_pos = ring_image(records)
    per_poll_bytes = sum(len(r) for r in records[: args.per_poll])
    n = len(records)
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    producer, where = make_producer(None if args.no_kafka else args.kafka)
    print(f"{n:,} socket events on {args.connections} connections, {args.per_poll} per poll")
    print(f"produce: {where}")

    ring_s, raw = timed(lambda: read_ring(image, mask, producer_pos, per_poll_bytes))
    assert len(raw) == n and raw[0] == records[0], "the ring walk lost records"
    decode_s, samples = timed(lambda: [decode_socket_event(r) for r in raw])
    common = {"ring": ring_s, "decode": decode_s}
    # The same polls without the redactor, twice each way, alternated: the least of each.
    with_s, without_s = [], []
    for _ in range(2):
        with_s.append(timed(lambda: batched_records(samples, args.per_poll))[0])
        without_s.append(timed(lambda: batched_records(samples, args.per_poll, False))[0])
    redact_s = max(min(with_s) - min(without_s), 0.0)
    ways = {
        "batches (SocketBatch)": chain(
            "batches", samples, lambda: batched_records(samples, args.per_poll), codec, producer
        ),
        "one record per event (SocketData)": chain(
            "singles", samples, lambda: single_records(samples), codec, producer
        ),
    }
    producer.close()
    stages = ["ring", "decode", "record", "encode", "produce"]
    print("stage   " + "".join(f"{way:>36}" for way in ways) + "   (us per event)")
    for stage in stages:
        cells = [common.get(stage, way.get(stage, 0.0)) / n * 1e6 for way in ways.values()]
        print(f"{stage:8}" + "".join(f"{cell:36.2f}" for cell in cells))
    print(
        f"redact (part of record, batches): {redact_s / n * 1e6:.2f} us per event "
        f"({'HTTP/2: ' if args.h2 else ''}"
        f"{'credentials and content in every call' if args.llm or args.h2 else 'nothing to mask'})"
    )
    totals = {name: sum({**common, **way}.values()) for name, way in ways.items()}
    for name, total in totals.items():
        rate = n / total if total > 0 else float("inf")
        verdict = "PASS" if rate >= EVENTS_PER_CORE_TARGET else "MISS"
        print(
            f"whole chain, {name}: {total / n * 1e6:.2f} us per event, {rate:,.0f} events/s "
            f"per core (target >= {EVENTS_PER_CORE_TARGET:,}): {verdict}"
        )
    [batches, singles] = totals.values()
    print(f"batches cost {batches / singles:.2f} x what one record per event costs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
