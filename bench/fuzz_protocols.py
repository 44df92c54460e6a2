"""Fuzz targets for the correlator's protocol parsers (protocol_span.py's contract: DNS, Redis,
PostgreSQL, MySQL, the Kafka wire protocol, HTTP/2 and gRPC), with their seed inputs. Registered in
bench.fuzz_targets.TARGETS beside the others.

An input is more of one connection: its first byte is a control byte (bit 0: the client's side,
REQUEST, else the server's), the rest is that side's bytes, cut in pieces at places the input
chooses. One parser lives the whole run, so its retained bytes are what the growth check
measures; a parser that stopped with a reason is closed (what waited must come out as
incomplete spans) and replaced, as a new connection, and so is one the control byte closes.

Bounds: what each parser's documented limits let it hold, in CPython's terms (a kept text of n
characters may take 4n bytes, plus its object header), worked out per protocol below.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.fuzz_base import MS, KiB, Target, check, pieces
from tests.unit import h2_wire
from tests.unit import test_dns_wire as dns_w
from tests.unit import test_http2 as h2_w
from tests.unit import test_kafka_wire as kafka_w
from tests.unit import test_mysql_wire as mysql_w
from tests.unit import test_postgres as pg_w
from zerotrace_correlator import (
    dns,
    http2,
    http2_frames,
    http2_hpack,
    kafka_wire,
    kafka_wire_messages,
    mysql,
    mysql_statements,
    mysql_wire,
    postgres,
    postgres_statements,
    postgres_wire,
    redis_resp,
    redis_resp_reader,
)
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtocolParser, ProtoSpan

OBJECT = 1 * KiB  # a kept request's own objects (its record, small fields), rounded up
CLIENT, SERVER = 1, 0  # the control byte's bit 0


class ProtocolTarget(Target):
    def __init__(self, name: str, make: Callable[[], ProtocolParser], bound: int) -> None:
        super().__init__()
        self.name = name
        self._make = make
        self._bound = bound
        self.parser = make()
        self._t = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self._t += MS
        side = REQUEST if data[0] & 1 else RESPONSE
        for piece in pieces(data[1:]):
            for span in self.parser.feed(side, piece, self._t, self._t):
                check(isinstance(span, ProtoSpan) and span.end_ns >= span.start_ns, "a span")
        stopped = bool(self.parser.error)
        if stopped:
            check("\n" not in self.parser.error, "a reason of more than one line")
            self.rejected += 1
        if stopped or data[0] % 61 == 0:
            for span in self.parser.close(self._t):
                check(span.status == "incomplete", "close() gave a finished span")
            self.parser = self._make()

    def state(self) -> object:
        return self.parser

    def bound(self) -> int:
        return self._bound


def _dns_bound() -> int:
    # Two TCP framings (length prefix and one message each) and the queries waiting, each
    # decoded: its message's names and up to MAX_ANSWERS_KEPT answers.
    framing = 2 * (2 + dns.MAX_MESSAGE_BYTES)
    return framing + dns.MAX_PENDING_QUERIES * (4 * dns.MAX_MESSAGE_BYTES + OBJECT)


def _redis_bound() -> int:
    per_command = 4 * redis_resp.MAX_QUERY_TEXT_CHARS + redis_resp_reader.KEEP_BYTES + OBJECT
    held = redis_resp.RedisParser(keep_text=True).max_buffered_bytes()
    return held + redis_resp.MAX_PENDING_COMMANDS * per_command


def _postgres_bound() -> int:
    per_request = 4 * postgres_wire.MAX_SQL_BYTES + OBJECT
    statements = 4 * postgres_statements.MAX_STATEMENT_CHARS
    statements += (postgres_statements.MAX_STATEMENTS + postgres_statements.MAX_PORTALS) * (
        postgres_wire.MAX_NAME_BYTES + OBJECT
    )
    held = postgres_wire.MAX_STARTUP_BYTES + postgres_wire.MAX_SQL_BYTES + 64 * KiB
    return held + postgres.MAX_PENDING * per_request + statements


def _mysql_bound() -> int:
    # Both packet readers' heads, a zlib decompressor's window and buffers, the commands
    # waiting with their texts, the prepared statements.
    readers = 2 * (mysql_wire.MAX_HEAD_BYTES + mysql_wire.INFLATE_CHUNK_BYTES) + 512 * KiB
    per_command = 4 * mysql.MAX_QUERY_TEXT_BYTES + OBJECT
    statements = 4 * mysql_statements.MAX_STATEMENT_CHARS
    statements += mysql_statements.MAX_STATEMENTS * OBJECT
    return readers + mysql.MAX_PENDING_COMMANDS * per_command + statements


def _kafka_bound() -> int:
    text = 4 * kafka_wire_messages.MAX_STRING_BYTES + OBJECT
    per_request = (
        kafka_wire_messages.MAX_TOPICS_KEPT + kafka_wire_messages.MAX_ERRORS_KEPT
    ) * text + OBJECT
    ids = kafka_wire_messages.MAX_TOPIC_IDS * 2 * text
    return kafka_wire.MAX_PENDING * per_request + ids + 8 * KiB


def _http2_bound() -> int:
    # Per side: a frame's kept payload, a header block waiting for CONTINUATIONs, a dynamic
    # table (entries of 32 RFC bytes take ~250 in CPython); the open streams, each with four
    # kept values (MAX_VALUE_BYTES, 4 bytes a character at worst) and its counters.
    side = http2_frames.MAX_HEADER_BLOCK_BYTES * 2 + 64 + 8 * http2_hpack.MAX_TABLE_BYTES
    per_stream = 4 * 4 * http2_hpack.MAX_VALUE_BYTES + OBJECT
    return 2 * side + http2.MAX_OPEN_STREAMS * per_stream


def _side(side: int, *messages: bytes) -> list[bytes]:
    return [bytes((side,)) + m for m in messages]


def dns_corpus() -> list[bytes]:
    ask = dns_w.tcp(dns_w.query(7, "api.example.com"), dns_w.query(8, "x.test", 28))
    answer = dns_w.tcp(dns_w.response(7, "api.example.com", answers=[dns_w.a_record("1.2.3.4")]))
    failed = dns_w.tcp(dns_w.response(8, "x.test", 28, rcode=3))
    return _side(CLIENT, ask) + _side(SERVER, answer, failed)


def redis_corpus() -> list[bytes]:
    return _side(
        CLIENT,
        b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
        b"*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\nPING\r\n",
        b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$1\r\nb\r\n",
    ) + _side(
        SERVER,
        b"$5\r\nalice\r\n+OK\r\n-WRONGTYPE no\r\n:42\r\n",
        b"%1\r\n+k\r\n*2\r\n:1\r\n_\r\n>3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nx\r\n",
        b"|1\r\n+ttl\r\n:3\r\n$?\r\n;3\r\nabc\r\n;0\r\n,1.5\r\n#t\r\n(123\r\n",
    )


def postgres_corpus() -> list[bytes]:
    client = [
        pg_w.startup(user="app", database="shop"),
        pg_w.query("SELECT * FROM users WHERE id = 42; UPDATE t SET a = 'x'"),
        pg_w.parse("s1", "SELECT $1::int")
        + pg_w.bind("", "s1", b"7")
        + pg_w.describe(b"P", "")
        + pg_w.execute()
        + pg_w.msg(b"S"),
    ]
    server = [
        pg_w.auth(0) + pg_w.ready(),
        pg_w.msg(b"T", b"\x00\x00")
        + pg_w.msg(b"D", b"\x00\x00")
        + pg_w.msg(b"C", b"SELECT 1\x00")
        + pg_w.ready(),
        pg_w.msg(b"E", b"SERROR\x00C42P01\x00Mno such table\x00\x00") + pg_w.ready(),
    ]
    return _side(CLIENT, *client) + _side(SERVER, *server)


def mysql_corpus() -> list[bytes]:
    query = mysql_w.packet(b"\x03SELECT name FROM users WHERE id = 1")
    result = mysql_w.packets(
        b"\x01",
        mysql_w.column_def("name"),
        mysql_w.eof(),
        mysql_w.text_row(b"alice"),
        mysql_w.eof(),
        seq=1,
    )
    missing = mysql_w.err(1146, "42S02", "Table 'x' doesn't exist")
    return _side(CLIENT, mysql_w.packet(mysql_w.login(), seq=1), query) + _side(
        SERVER,
        mysql_w.packet(mysql_w.greeting()),
        mysql_w.packet(mysql_w.ok(), seq=2),
        result,
        mysql_w.packet(missing, seq=1),
    )


def kafka_corpus() -> list[bytes]:
    out: list[bytes] = []
    for request, response in kafka_w.exchanges():
        out += _side(CLIENT, request)
        if response is not None:
            out += _side(SERVER, response)
    return out


def http2_corpus() -> list[bytes]:
    grpc, plain = h2_w.Wire(), h2_w.Wire()
    grpc.grpc_call(1, (12, 0), (30,), status=14)
    h2_w.plain_requests(plain)
    side = {REQUEST: CLIENT, RESPONSE: SERVER}
    calls = [bytes((side[s],)) + data for w in (grpc, plain) for s, data in w.calls]
    return calls + _side(CLIENT, h2_wire.client_wire(2)) + _side(SERVER, h2_wire.server_wire(2))


PROTOCOL_TARGETS: dict[str, Callable[[], Target]] = {
    "dns": lambda: ProtocolTarget("dns", lambda: dns.DnsParser("tcp"), _dns_bound()),
    "redis": lambda: ProtocolTarget("redis", redis_resp.RedisParser, _redis_bound()),
    "postgres": lambda: ProtocolTarget("postgres", postgres.PostgresParser, _postgres_bound()),
    "mysql": lambda: ProtocolTarget("mysql", mysql.MySqlParser, _mysql_bound()),
    "kafka_wire": lambda: ProtocolTarget("kafka_wire", kafka_wire.KafkaWireParser, _kafka_bound()),
    "http2": lambda: ProtocolTarget("http2", http2.Http2Parser, _http2_bound()),
}
PROTOCOL_CORPORA: dict[str, Callable[[], list[bytes]]] = {
    "dns": dns_corpus,
    "redis": redis_corpus,
    "postgres": postgres_corpus,
    "mysql": mysql_corpus,
    "kafka_wire": kafka_corpus,
    "http2": http2_corpus,
}
