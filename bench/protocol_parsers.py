"""Messages per second per core for each protocol parser of the correlator.

    .venv/bin/python -m bench.protocol_parsers [--exchanges 20000] [--rounds 3]

Each protocol gets one connection's worth of realistic traffic: its set-up (a login, a
preface, a startup message) once, then `--exchanges` request/response exchanges of the kind
an AI service makes (a Redis GET, a PostgreSQL extended-protocol query, a MySQL COM_QUERY with
its result set, a Kafka Produce/Fetch/Metadata mix, a DNS query, gRPC unary calls and plain
HTTP/2 requests), every message delivered as one socket call, as the socket probe sees them.
The wire bytes are built before the clock starts; what is timed is `feed` of both sides, i.e.
framing, decoding, pairing and the span with its attributes.

Printed per protocol: spans (exchanges) per second and wire MB/s of this thread's CPU time,
the best of `--rounds`, and the ratio to the HTTP/1.1 parser (http1.py: one GET and its
200 response per exchange), measured the same way in the same run, as the baseline: the
machines are shared and noisy, so ratios travel better than absolute figures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tests.unit import test_dns_wire as dns_w
from tests.unit import test_http2 as h2_w
from tests.unit import test_kafka_wire as kafka_w
from tests.unit import test_mysql_wire as mysql_w
from tests.unit import test_postgres as pg_w
from zerotrace_correlator import dns, http2, kafka_wire, mysql, postgres, redis_resp
from zerotrace_correlator.http1 import Http1Parser
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtocolParser, Side

Calls = list[tuple[Side, bytes]]


@dataclass(frozen=True)
class Workload:
    name: str
    make: Callable[[], ProtocolParser]
    setup: Calls
    exchanges: Callable[[int], Calls]  # n exchanges, built before timing


def _repeat(pairs: Sequence[tuple[bytes, bytes]], n: int) -> Calls:
    calls: Calls = []
    for i in range(n):
        request, response = pairs[i % len(pairs)]
        calls += [(REQUEST, request), (RESPONSE, response)]
    return calls


def _redis(n: int) -> Calls:
    get = b"*2\r\n$3\r\nGET\r\n$14\r\nsession:4f2a91\r\n"
    value = b"$48\r\n" + b"v" * 48 + b"\r\n"
    incr = b"*2\r\n$4\r\nINCR\r\n$17\r\nratelimit:user:42\r\n"
    return _repeat([(get, value), (incr, b":17\r\n")], n)


def _postgres(n: int) -> Calls:
    extended = (
        pg_w.parse("", "SELECT id, name FROM users WHERE id = $1")
        + pg_w.bind("", "", b"42")
        + pg_w.describe(b"P", "")
        + pg_w.execute()
        + pg_w.msg(b"S")
    )
    rows = (
        pg_w.msg(b"1")
        + pg_w.msg(b"2")
        + pg_w.msg(b"T", b"\x00\x00")
        + pg_w.msg(b"D", b"\x00\x00")
        + pg_w.msg(b"C", b"SELECT 1\x00")
        + pg_w.ready()
    )
    simple = pg_w.query("UPDATE quotas SET used = used + 1 WHERE tenant = 'acme'")
    done = pg_w.msg(b"C", b"UPDATE 1\x00") + pg_w.ready()
    return _repeat([(extended, rows), (simple, done)], n)


def _mysql(n: int) -> Calls:
    query = mysql_w.packet(b"\x03SELECT name FROM users WHERE id = 1")
    result = mysql_w.packets(
        b"\x01",
        mysql_w.column_def("name"),
        mysql_w.eof(),
        mysql_w.text_row(b"alice"),
        mysql_w.eof(),
        seq=1,
    )
    update = mysql_w.packet(b"\x03UPDATE quotas SET used = used + 1 WHERE tenant = 'acme'")
    return _repeat([(query, result), (update, mysql_w.packet(mysql_w.ok(1), seq=1))], n)


def _kafka(n: int) -> Calls:
    # ApiVersions, Metadata, Produce and Fetch that succeed (the test set's others fail).
    every = kafka_w.exchanges()
    return _repeat([(every[i][0], every[i][1] or b"") for i in (0, 1, 2, 4)], n)


def _dns(n: int) -> Calls:
    pairs = []
    for ident, host in enumerate(("api.openai.example", "redis.internal", "db.internal"), 1):
        query = dns_w.tcp(dns_w.query(ident, host))
        answer = dns_w.tcp(dns_w.response(ident, host, answers=[dns_w.a_record("10.0.0.7")]))
        pairs.append((query, answer))
    return _repeat(pairs, n)


def _http2(n: int) -> Calls:
    wire = h2_w.Wire(preface=False)
    get = [(":method", "GET"), (":scheme", "http"), (":path", "/v1/models"),
           (":authority", "gateway:8080")]  # fmt: skip
    for i in range(n):
        stream = 2 * i + 1
        if i % 2:
            wire.grpc_call(stream, (120,), (640,))
        else:
            wire.headers(REQUEST, stream, get, end=True)
            wire.headers(RESPONSE, stream, [(":status", "200"), ("content-type", "text/json")])
            wire.data(RESPONSE, stream, b'{"data": []}', end=True)
    return wire.calls


def _h2_setup() -> Calls:
    return h2_w.Wire().calls


WORKLOADS: tuple[Workload, ...] = (
    Workload("redis", redis_resp.RedisParser, [], _redis),
    Workload(
        "postgresql",
        postgres.PostgresParser,
        [
            (REQUEST, pg_w.startup(user="app", database="shop")),
            (RESPONSE, pg_w.auth(0) + pg_w.ready()),
        ],
        _postgres,
    ),
    Workload(
        "mysql",
        mysql.MySqlParser,
        [
            (RESPONSE, mysql_w.packet(mysql_w.greeting())),
            (REQUEST, mysql_w.packet(mysql_w.login(), seq=1)),
            (RESPONSE, mysql_w.packet(mysql_w.ok(), seq=2)),
        ],
        _mysql,
    ),
    Workload("kafka", kafka_wire.KafkaWireParser, [], _kafka),
    Workload("dns", lambda: dns.DnsParser("tcp"), [], _dns),
    Workload("http2+grpc", http2.Http2Parser, _h2_setup(), _http2),
)


def _time_parser(work: Workload, calls: Calls) -> tuple[float, int]:
    parser = work.make()
    t = 0
    for side, data in work.setup:
        t += 1000
        parser.feed(side, data, t, t)
    spans = 0
    started = time.thread_time()
    for side, data in calls:
        t += 1000
        spans += len(parser.feed(side, data, t, t))
    elapsed = time.thread_time() - started
    if parser.error:
        raise SystemExit(f"{work.name}: the parser stopped: {parser.error}")
    return elapsed, spans


def _http1_calls(n: int) -> list[tuple[bool, bytes]]:
    request = b"GET /v1/models HTTP/1.1\r\nHost: gateway:8080\r\nAccept: */*\r\n\r\n"
    body = b'{"data": []}'
    response = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    return [(True, request), (False, response % (len(body), body))] * n


def _time_http1(calls: list[tuple[bool, bytes]]) -> tuple[float, int]:
    requests, responses = Http1Parser(is_request=True), Http1Parser(is_request=False)
    t = 0
    started = time.thread_time()
    for is_request, data in calls:
        t += 1000
        if is_request:
            requests.feed(data, t)
            responses.expect_response_to("GET")
        else:
            responses.feed(data, t)
    return time.thread_time() - started, len(calls) // 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--exchanges", type=int, default=20_000, help="exchanges per protocol (20000)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best is kept (3)")
    args = parser.parse_args(argv)
    n = args.exchanges

    h1 = _http1_calls(n)
    h1_bytes = sum(len(d) for _, d in h1)
    best_h1 = min(_time_http1(h1)[0] for _ in range(args.rounds))
    h1_rate = n / best_h1
    print(f"{'parser':<12} {'spans/s/core':>13} {'MB/s/core':>10} {'vs HTTP/1.1':>12}")
    print(f"{'http1':<12} {h1_rate:>13,.0f} {h1_bytes / best_h1 / 1e6:>10.1f} {'1.00':>12}")
    for work in WORKLOADS:
        calls = work.exchanges(n)
        size = sum(len(d) for _, d in calls)
        runs = [_time_parser(work, calls) for _ in range(args.rounds)]
        elapsed = min(r[0] for r in runs)
        spans = runs[0][1]
        if spans < n - 1:  # the last exchange may wait for its close
            raise SystemExit(f"{work.name}: {spans} spans from {n} exchanges")
        rate = spans / elapsed
        print(
            f"{work.name:<12} {rate:>13,.0f} {size / elapsed / 1e6:>10.1f} {rate / h1_rate:>12.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
