"""PostgreSQL spans from wire bytes built here by hand, per the protocol's message formats
(https://www.postgresql.org/docs/current/protocol-message-formats.html)."""

from __future__ import annotations

import struct
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerotrace import names
from zerotrace_correlator import postgres, postgres_statements
from zerotrace_correlator.postgres import PostgresParser, recognise
from zerotrace_correlator.postgres_wire import KEEP, MAX_SQL_BYTES, MAX_STARTUP_BYTES
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtoSpan

pytestmark = pytest.mark.unit

# The most a parser holds for messages in progress: a header on each side and the largest
# prefix a message kind keeps (postgres_wire.KEEP, the startup packet).
HELD_BOUND = 2 * 5 + max(MAX_STARTUP_BYTES, *KEEP[True].values(), *KEEP[False].values())


# -- the wire, by hand --------------------------------------------------------------------


def msg(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def cs(text: str) -> bytes:
    return text.encode() + b"\0"


def startup(version: int = 196608, **params: str) -> bytes:
    body = struct.pack("!i", version) + b"".join(cs(k) + cs(v) for k, v in params.items())
    body += b"\0"
    return struct.pack("!i", len(body) + 4) + body


SSL_REQUEST = struct.pack("!ii", 8, 80877103)
GSSENC_REQUEST = struct.pack("!ii", 8, 80877104)
CANCEL_REQUEST = struct.pack("!iiii", 16, 80877102, 4242, 99)
TLS_CLIENT_HELLO = b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(32)
SYNC, FLUSH, TERMINATE = msg(b"S"), msg(b"H"), msg(b"X")


def query(sql: str) -> bytes:
    return msg(b"Q", cs(sql))


def parse(name: str, sql: str, oids: tuple[int, ...] = ()) -> bytes:
    types = struct.pack("!h", len(oids)) + b"".join(struct.pack("!i", o) for o in oids)
    return msg(b"P", cs(name) + cs(sql) + types)


def bind(portal: str, statement: str, *params: bytes | None) -> bytes:
    values = b"".join(
        struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p for p in params
    )
    body = cs(portal) + cs(statement) + struct.pack("!h", 0)
    return msg(b"B", body + struct.pack("!h", len(params)) + values + struct.pack("!h", 0))


def describe(what: bytes, name: str) -> bytes:
    return msg(b"D", what + cs(name))


def execute(portal: str = "", max_rows: int = 0) -> bytes:
    return msg(b"E", cs(portal) + struct.pack("!i", max_rows))


def close_(what: bytes, name: str) -> bytes:
    return msg(b"C", what + cs(name))


def password(text: str) -> bytes:
    return msg(b"p", cs(text))


def sasl_initial(payload: bytes) -> bytes:
    return msg(b"p", cs("SCRAM-SHA-256") + struct.pack("!i", len(payload)) + payload)


def function_call(oid: int, arg: bytes) -> bytes:
    args = struct.pack("!hh", 0, 1) + struct.pack("!i", len(arg)) + arg
    return msg(b"F", struct.pack("!i", oid) + args + struct.pack("!h", 0))


def auth(code: int, extra: bytes = b"") -> bytes:
    return msg(b"R", struct.pack("!i", code) + extra)


AUTH_OK = auth(0)
BACKEND_KEY = msg(b"K", struct.pack("!ii", 4242, 99))
PARSE_COMPLETE, BIND_COMPLETE, CLOSE_COMPLETE = msg(b"1"), msg(b"2"), msg(b"3")
NO_DATA, EMPTY_QUERY, PORTAL_SUSPENDED = msg(b"n"), msg(b"I"), msg(b"s")
COPY_DONE = msg(b"c")


def ready(status: bytes = b"I") -> bytes:
    return msg(b"Z", status)


def parameter_status(name: str, value: str) -> bytes:
    return msg(b"S", cs(name) + cs(value))


def notice(text: str) -> bytes:
    return msg(b"N", b"SWARNING\0VWARNING\0C01000\0M" + cs(text) + b"\0")


def notification(channel: str, payload: str) -> bytes:
    return msg(b"A", struct.pack("!i", 4242) + cs(channel) + cs(payload))


def row_description(*columns: str) -> bytes:
    fields = b"".join(cs(c) + struct.pack("!ihihih", 0, 0, 25, -1, -1, 0) for c in columns)
    return msg(b"T", struct.pack("!h", len(columns)) + fields)


def parameter_description(*oids: int) -> bytes:
    return msg(b"t", struct.pack("!h", len(oids)) + b"".join(struct.pack("!i", o) for o in oids))


def data_row(*values: bytes) -> bytes:
    cells = b"".join(struct.pack("!i", len(v)) + v for v in values)
    return msg(b"D", struct.pack("!h", len(values)) + cells)


def complete(tag: str) -> bytes:
    return msg(b"C", cs(tag))


def error(code: str, message: str, severity: str = "ERROR") -> bytes:
    fields = b"S" + cs(severity) + b"V" + cs(severity) + b"C" + cs(code) + b"M" + cs(message)
    return msg(b"E", fields + b"D" + cs("Key (email)=(a@b.c) already exists.") + b"\0")


def copy_response(kind: bytes, columns: int) -> bytes:
    return msg(kind, b"\0" + struct.pack("!h", columns) + b"\0\0" * columns)


def copy_data(data: bytes) -> bytes:
    return msg(b"d", data)


LOGIN = startup(user="app", database="shop", application_name="api")
LOGIN_OK = AUTH_OK + parameter_status("server_version", "16.3") + BACKEND_KEY + ready()


def logged_in(keep_text: bool = False) -> PostgresParser:
    parser = PostgresParser(keep_text=keep_text)
    assert parser.feed(REQUEST, LOGIN, 1, 2) == []
    assert parser.feed(RESPONSE, LOGIN_OK, 3, 4) == []
    return parser


def exchange(parser: PostgresParser, request: bytes, response: bytes, t: int) -> list[ProtoSpan]:
    return parser.feed(REQUEST, request, t, t + 1) + parser.feed(RESPONSE, response, t + 5, t + 6)


def one(spans: list[ProtoSpan]) -> ProtoSpan:
    assert len(spans) == 1, spans
    return spans[0]


def clean(parser: PostgresParser) -> None:
    assert parser.error == ""
    assert dict(parser.counters) == {}
    assert parser.buffered_bytes() == 0


# -- startup, authentication, encryption --------------------------------------------------


def test_startup_and_cleartext_password_give_no_span_and_keep_no_password() -> None:
    parser = PostgresParser()
    assert parser.feed(REQUEST, LOGIN, 1, 2) == []
    assert parser.feed(RESPONSE, auth(3), 3, 4) == []  # AuthenticationCleartextPassword
    hold = []
    for i, byte in enumerate(password("hunter2")):  # byte by byte: held is a header at most
        assert parser.feed(REQUEST, bytes([byte]), 5 + i, 5 + i) == []
        hold.append(parser.buffered_bytes())
    assert max(hold) <= 5
    assert parser.feed(RESPONSE, LOGIN_OK, 30, 31) == []
    assert (parser.user, parser.database) == ("app", "shop")
    span = one(exchange(parser, query("SELECT 1"), row_description("x") + data_row(b"1")
                        + complete("SELECT 1") + ready(), 40))  # fmt: skip
    assert span.attributes[names.ATTR_DB_NAMESPACE] == "shop"
    assert span.attributes[names.ATTR_NETWORK_PROTOCOL_VERSION] == "3.0"
    assert "hunter2" not in repr(span)
    clean(parser)


def test_sasl_exchange_is_stepped_over() -> None:
    parser = PostgresParser()
    parser.feed(REQUEST, startup(user="svc"), 1, 2)
    parser.feed(RESPONSE, auth(10, cs("SCRAM-SHA-256") + b"\0"), 3, 4)  # AuthenticationSASL
    parser.feed(REQUEST, sasl_initial(b"n,,n=,r=clientnonce"), 5, 6)
    parser.feed(RESPONSE, auth(11, b"r=clientnonceserver,s=c2FsdA==,i=4096"), 7, 8)
    parser.feed(REQUEST, msg(b"p", b"c=biws,r=clientnonceserver,p=proofproof"), 9, 10)
    parser.feed(RESPONSE, auth(12, b"v=signature") + LOGIN_OK, 11, 12)
    assert parser.database == "svc"  # the server's default: the user's name
    span = one(exchange(parser, query("SELECT now()"), data_row(b"x") + complete("SELECT 1")
                        + ready(), 20))  # fmt: skip
    assert span.name == "SELECT"
    assert span.response_bytes == len(data_row(b"x") + complete("SELECT 1") + ready())
    clean(parser)


def test_protocol_negotiation_and_protocol_3_2() -> None:
    parser = PostgresParser()
    parser.feed(REQUEST, startup(version=3 << 16 | 2, user="u", _pq_x="1"), 1, 2)
    parser.feed(RESPONSE, msg(b"v", struct.pack("!ii", 196610, 1) + cs("_pq_x")) + LOGIN_OK, 3, 4)
    span = one(exchange(parser, query("BEGIN"), complete("BEGIN") + ready(b"T"), 10))
    assert span.attributes[names.ATTR_NETWORK_PROTOCOL_VERSION] == "3.2"
    clean(parser)


def test_failed_login_is_an_error_span() -> None:
    parser = PostgresParser()
    parser.feed(REQUEST, LOGIN, 1, 2)
    parser.feed(RESPONSE, auth(5, b"salt"), 3, 4)
    parser.feed(REQUEST, password("md5abc"), 5, 6)
    span = one(parser.feed(RESPONSE, error("28P01", "password failed", "FATAL"), 7, 8))
    assert (span.status, span.error_type, span.name) == ("error", "28P01", "shop")
    assert (span.start_ns, span.end_ns) == (1, 8)
    assert span.attributes[names.ATTR_DB_RESPONSE_STATUS_CODE] == "28P01"
    assert span.attributes[names.ATTR_ERROR_MESSAGE] == "FATAL: password failed"
    assert "md5abc" not in repr(span)


@pytest.mark.parametrize("request_, refused", [(SSL_REQUEST, b"N"), (GSSENC_REQUEST, b"N")])
def test_encryption_refused_then_plain_startup(request_: bytes, refused: bytes) -> None:
    parser = PostgresParser()
    parser.feed(REQUEST, request_, 1, 2)
    parser.feed(RESPONSE, refused, 3, 4)
    parser.feed(REQUEST, LOGIN, 5, 6)
    parser.feed(RESPONSE, LOGIN_OK, 7, 8)
    assert one(exchange(parser, query("SELECT 1"), complete("SELECT 0") + ready(), 10))
    assert not parser.encrypted
    clean(parser)


@pytest.mark.parametrize("request_, accepted", [(SSL_REQUEST, b"S"), (GSSENC_REQUEST, b"G")])
def test_encryption_accepted_counts_the_rest(request_: bytes, accepted: bytes) -> None:
    parser = PostgresParser()
    parser.feed(REQUEST, request_, 1, 2)
    assert parser.feed(RESPONSE, accepted + b"\x16\x03\x03\x00\x10", 3, 4) == []
    assert parser.feed(REQUEST, TLS_CLIENT_HELLO, 5, 6) == []
    assert parser.encrypted and parser.error == ""
    assert parser.counters[postgres.ENCRYPTED_BYTES] == 5 + len(TLS_CLIENT_HELLO)
    assert parser.close(9) == []


def test_tls_accepted_then_plaintext_from_the_tls_probes_is_read_on() -> None:
    # The SSLRequest and its 'S' come through the syscalls; then the TLS uprobes hand over
    # the same connection's plaintext, starting with the StartupMessage (seen with pg8000).
    parser = PostgresParser()
    parser.feed(REQUEST, SSL_REQUEST, 1, 2)
    parser.feed(RESPONSE, b"S", 3, 4)
    parser.feed(REQUEST, LOGIN, 5, 6)
    parser.feed(RESPONSE, LOGIN_OK, 7, 8)
    span = one(exchange(parser, query("SELECT 1"), complete("SELECT 1") + ready(), 10))
    assert span.attributes[names.ATTR_DB_NAMESPACE] == "shop"
    assert not parser.encrypted
    clean(parser)


def test_a_server_hello_after_ssl_accepted_means_encrypted() -> None:
    parser = PostgresParser()
    parser.feed(REQUEST, SSL_REQUEST, 1, 2)
    parser.feed(RESPONSE, b"S", 3, 4)
    assert parser.feed(RESPONSE, b"\x16\x03\x03\x00\x10" + bytes(16), 5, 6) == []
    assert parser.encrypted and parser.error == ""
    assert parser.counters[postgres.ENCRYPTED_BYTES] == 21


def test_a_client_hello_after_ssl_request_means_encrypted_whatever_the_feed_order() -> None:
    parser = PostgresParser()
    parser.feed(REQUEST, SSL_REQUEST + TLS_CLIENT_HELLO, 1, 2)
    assert parser.encrypted and parser.error == ""


def test_cancel_request_gives_nothing() -> None:
    parser = PostgresParser()
    assert parser.feed(REQUEST, CANCEL_REQUEST, 1, 2) == []
    assert parser.close(3) == []
    assert parser.error == ""


# -- simple query -------------------------------------------------------------------------


def test_simple_query_rows_and_attributes() -> None:
    parser = logged_in()
    response = (
        row_description("id", "name") + data_row(b"1", b"ann") + data_row(b"2", b"bob")
        + complete("SELECT 2") + ready()
    )  # fmt: skip
    span = one(
        exchange(parser, query("SELECT id, name FROM users WHERE org = 'acme'"), response, 10)
    )
    assert span == ProtoSpan(
        protocol=names.PROTOCOL_POSTGRESQL,
        name="SELECT users",
        start_ns=10,
        end_ns=16,
        status="ok",
        attributes={
            names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_POSTGRESQL,
            names.ATTR_DB_NAMESPACE: "shop",
            names.ATTR_NETWORK_PROTOCOL_VERSION: "3.0",
            names.ATTR_DB_OPERATION_NAME: "SELECT",
            names.ATTR_DB_COLLECTION_NAME: "users",
            names.ATTR_DB_QUERY_TEXT: "SELECT id, name FROM users WHERE org = ?",
            names.ATTR_DB_RESPONSE_RETURNED_ROWS: 2,
        },
        request_bytes=len(query("SELECT id, name FROM users WHERE org = 'acme'")),
        response_bytes=len(response),
    )
    clean(parser)


def test_keep_text_keeps_literals() -> None:
    parser = logged_in(keep_text=True)
    sql = "UPDATE accounts SET balance = 10 WHERE owner = 'ann'"
    span = one(exchange(parser, query(sql), complete("UPDATE 1") + ready(), 10))
    assert span.attributes[names.ATTR_DB_QUERY_TEXT] == sql
    assert span.attributes[names.ATTR_DB_AFFECTED_ROWS] == 1
    assert names.ATTR_DB_RESPONSE_RETURNED_ROWS not in span.attributes


def test_several_statements_in_one_query_are_one_batch_span() -> None:
    parser = logged_in()
    sql = "BEGIN; INSERT INTO t VALUES (1); INSERT INTO t VALUES (2); COMMIT"
    response = (
        complete("BEGIN") + complete("INSERT 0 1") + complete("INSERT 0 1") + complete("COMMIT")
        + ready()
    )  # fmt: skip
    span = one(exchange(parser, query(sql), response, 10))
    assert span.name == "BATCH"
    assert span.attributes[names.ATTR_DB_OPERATION_BATCH_SIZE] == 4
    assert span.attributes[names.ATTR_DB_AFFECTED_ROWS] == 2
    same = one(exchange(parser, query("DELETE FROM t; DELETE FROM t"),
                        complete("DELETE 3") + complete("DELETE 0") + ready(), 20))  # fmt: skip
    assert same.name == "BATCH DELETE t"
    assert same.attributes[names.ATTR_DB_OPERATION_NAME] == "BATCH DELETE"
    assert same.attributes[names.ATTR_DB_AFFECTED_ROWS] == 3


def test_simple_query_error_gives_sqlstate() -> None:
    parser = logged_in()
    response = error("42P01", 'relation "nope" does not exist') + ready()
    span = one(exchange(parser, query("SELECT * FROM nope"), response, 10))
    assert (span.status, span.error_type, span.name) == ("error", "42P01", "SELECT nope")
    assert span.attributes[names.ATTR_DB_RESPONSE_STATUS_CODE] == "42P01"
    assert span.attributes[names.ATTR_ERROR_MESSAGE] == "ERROR: relation ? does not exist"
    assert "a@b.c" not in repr(span)  # the DETAIL field, where row values go, is not kept
    clean(parser)


def test_an_error_message_loses_the_values_it_quotes_unless_kept() -> None:
    # PostgreSQL 15, seen here: the value a client sent, in the message itself.
    message = 'invalid input syntax for type integer: "ann "the" secret"'
    for keep_text, shown in ((False, "ERROR: invalid input syntax for type integer: ?"),
                             (True, f"ERROR: {message}")):  # fmt: skip
        parser = logged_in(keep_text)
        response = error("22P02", message) + ready()
        span = one(exchange(parser, query("SELECT 'x'::integer"), response, 10))
        assert span.attributes[names.ATTR_ERROR_MESSAGE] == shown


def test_error_without_a_code_is_other() -> None:
    parser = logged_in()
    response = msg(b"E", b"SERROR\0Mno code\0\0") + ready()
    span = one(exchange(parser, query("SELECT 1"), response, 10))
    assert (span.status, span.error_type) == ("error", "_OTHER")
    assert names.ATTR_DB_RESPONSE_STATUS_CODE not in span.attributes


def test_empty_query_notices_notifications_and_parameter_status_are_ignored() -> None:
    parser = logged_in()
    span = one(exchange(parser, query(""), EMPTY_QUERY + ready(), 10))
    assert (span.name, span.status) == ("shop", "ok")
    response = (
        notice("note") + row_description("n") + notification("ch", "hi") + data_row(b"1")
        + parameter_status("TimeZone", "UTC") + complete("SELECT 1") + notice("again") + ready()
    )  # fmt: skip
    span = one(exchange(parser, query("SELECT 1"), response, 20))
    assert span.attributes[names.ATTR_DB_RESPONSE_RETURNED_ROWS] == 1
    assert parser.feed(RESPONSE, notification("ch", "later"), 30, 31) == []
    clean(parser)


def test_pipelined_queries_in_one_read_each_answered_in_order() -> None:
    parser = logged_in()
    requests = query("SELECT 1") + query("SELECT * FROM a") + query("SELECT * FROM b")
    answers = [data_row(b"1") + complete("SELECT 1") + ready(), error("42P01", "x") + ready(),
               data_row(b"1") + data_row(b"2") + complete("SELECT 2") + ready()]  # fmt: skip
    assert parser.feed(REQUEST, requests, 10, 11) == []
    spans = parser.feed(RESPONSE, b"".join(answers), 20, 21)
    assert [(s.name, s.status) for s in spans] == [
        ("SELECT", "ok"), ("SELECT a", "error"), ("SELECT b", "ok"),
    ]  # fmt: skip
    assert [s.response_bytes for s in spans] == [len(a) for a in answers]
    clean(parser)


def test_copy_in_counts_data_without_keeping_it() -> None:
    parser = logged_in()
    assert parser.feed(REQUEST, query("COPY items (a, b) FROM STDIN"), 10, 11) == []
    assert parser.feed(RESPONSE, copy_response(b"G", 2), 12, 13) == []
    rows = copy_data(b"1\tsecret-one\n") + copy_data(b"2\tsecret-two\n") + COPY_DONE
    for i in range(0, len(rows), 3):
        assert parser.feed(REQUEST, rows[i : i + 3], 14, 15) == []
        assert parser.buffered_bytes() <= 5
    span = one(parser.feed(RESPONSE, complete("COPY 2") + ready(), 16, 17))
    assert span.name == "COPY items"
    assert span.attributes[names.ATTR_DB_AFFECTED_ROWS] == 2
    assert span.request_bytes == len(query("COPY items (a, b) FROM STDIN")) + len(rows)
    assert "secret" not in repr(span)
    clean(parser)


def test_copy_fail_gives_the_error() -> None:
    parser = logged_in()
    parser.feed(REQUEST, query("COPY items FROM STDIN"), 10, 11)
    parser.feed(RESPONSE, copy_response(b"G", 1), 12, 13)
    parser.feed(REQUEST, copy_data(b"x\n") + msg(b"f", cs("client gave up")), 14, 15)
    span = one(parser.feed(RESPONSE, error("57014", "COPY from stdin failed") + ready(), 16, 17))
    assert (span.status, span.error_type) == ("error", "57014")


def test_copy_out_returns_rows() -> None:
    parser = logged_in()
    response = (
        copy_response(b"H", 1) + copy_data(b"a\n") + copy_data(b"b\n") + copy_data(b"c\n")
        + COPY_DONE + complete("COPY 3") + ready()
    )  # fmt: skip
    span = one(exchange(parser, query("COPY items TO STDOUT"), response, 10))
    assert span.attributes[names.ATTR_DB_RESPONSE_RETURNED_ROWS] == 3
    assert names.ATTR_DB_AFFECTED_ROWS not in span.attributes
    clean(parser)


def test_function_call_gives_no_span_and_keeps_pairing() -> None:
    parser = logged_in()
    answer = msg(b"V", struct.pack("!i", 1) + b"t") + ready()
    assert exchange(parser, function_call(1598, b"x"), answer, 10) == []
    assert one(exchange(parser, query("SELECT 1"), complete("SELECT 0") + ready(), 20))
    clean(parser)


# -- extended query -----------------------------------------------------------------------


def test_extended_query_unnamed_statement() -> None:
    parser = logged_in()
    sql = "SELECT name FROM users WHERE id = $1"
    request = parse("", sql, (23,)) + bind("", "", b"7") + describe(b"P", "") + execute() + SYNC
    response = (
        PARSE_COMPLETE + BIND_COMPLETE + row_description("name") + data_row(b"ann")
        + complete("SELECT 1") + ready()
    )  # fmt: skip
    span = one(exchange(parser, request, response, 10))
    assert (span.name, span.start_ns, span.end_ns) == ("SELECT users", 10, 16)
    assert span.attributes[names.ATTR_DB_QUERY_TEXT] == sql  # $1 is a parameter, not a literal
    assert span.attributes[names.ATTR_DB_RESPONSE_RETURNED_ROWS] == 1
    assert span.request_bytes == len(request) - len(SYNC)
    assert span.response_bytes == len(response) - len(ready())
    clean(parser)


def test_named_statement_prepared_earlier_gives_its_sql() -> None:
    parser = logged_in()
    prepare = parse("s1", "INSERT INTO orders (id) VALUES ($1)") + describe(b"S", "s1") + SYNC
    described = PARSE_COMPLETE + parameter_description(23) + NO_DATA + ready()
    assert exchange(parser, prepare, described, 10) == []
    for i, t in enumerate((100, 200)):
        request = bind("", "s1", str(i).encode()) + execute() + SYNC
        answer = BIND_COMPLETE + complete("INSERT 0 1") + ready()
        span = one(exchange(parser, request, answer, t))
        assert (span.name, span.start_ns) == ("INSERT orders", t)  # the Bind, not the Parse
        assert span.attributes[names.ATTR_DB_AFFECTED_ROWS] == 1
    close = close_(b"S", "s1") + SYNC
    assert exchange(parser, close, CLOSE_COMPLETE + ready(), 300) == []
    assert parser.held_requests()[1] == 0
    clean(parser)
    # Closed: a Bind of it now is a statement never seen; the span takes the tag's command.
    span = one(exchange(parser, bind("", "s1") + execute() + SYNC,
                        BIND_COMPLETE + complete("INSERT 0 1") + ready(), 400))  # fmt: skip
    assert span.name == "INSERT"
    assert names.ATTR_DB_QUERY_TEXT not in span.attributes
    assert parser.counters[postgres_statements.UNKNOWN_STATEMENTS] == 1


def test_named_portal_fetched_in_pieces() -> None:
    parser = logged_in()
    request = (
        parse("", "SELECT * FROM events") + bind("c1", "") + execute("c1", 2) + FLUSH
    )  # fmt: skip
    response = PARSE_COMPLETE + BIND_COMPLETE + data_row(b"1") + data_row(b"2") + PORTAL_SUSPENDED
    first = one(exchange(parser, request, response, 10))
    assert first.attributes[names.ATTR_DB_RESPONSE_RETURNED_ROWS] == 2
    rest = execute("c1", 2) + close_(b"P", "c1") + SYNC
    answer = data_row(b"3") + complete("SELECT 1") + CLOSE_COMPLETE + ready()
    second = one(exchange(parser, rest, answer, 20))
    assert (second.name, second.start_ns) == ("SELECT events", 20)
    clean(parser)


def test_pipelined_executes_with_one_sync() -> None:
    parser = logged_in()
    prepare = parse("ins", "INSERT INTO t (a) VALUES ($1)")
    batch = prepare + b"".join(bind("", "ins", bytes([i])) + execute() for i in range(3)) + SYNC
    answers = PARSE_COMPLETE + (BIND_COMPLETE + complete("INSERT 0 1")) * 3 + ready()
    spans = exchange(parser, batch, answers, 10)
    assert [s.name for s in spans] == ["INSERT t"] * 3
    assert [s.attributes[names.ATTR_DB_AFFECTED_ROWS] for s in spans] == [1, 1, 1]
    clean(parser)


def test_error_in_a_batch_goes_to_its_execute_and_the_rest_up_to_sync_is_skipped() -> None:
    parser = logged_in()
    batch = (
        parse("", "SELECT 1") + bind("", "") + execute()
        + parse("bad", "SELEC oops") + bind("", "bad") + execute()
        + parse("", "SELECT 2") + bind("", "") + execute() + SYNC
    )  # fmt: skip
    answers = PARSE_COMPLETE + BIND_COMPLETE + complete("SELECT 1")
    answers += error("42601", 'syntax error at or near "SELEC"') + ready()
    spans = exchange(parser, batch, answers, 10)
    assert [(s.name, s.status, s.error_type) for s in spans] == [
        ("SELECT", "ok", ""), ("SELEC", "error", "42601"),
    ]  # fmt: skip
    assert parser.counters[postgres.SKIPPED_AFTER_ERROR] == 1
    # The Parses the server skipped or failed created nothing: "bad" is unknown after.
    assert parser.held_requests()[:2] == (0, 0)
    span = one(exchange(parser, bind("", "bad") + execute() + SYNC,
                        error("26000", "no such statement") + ready(), 20))  # fmt: skip
    assert (span.name, span.error_type) == ("shop", "26000")  # the database: no SQL
    assert parser.counters[postgres_statements.UNKNOWN_STATEMENTS] == 1


def test_failed_prepare_without_execute_is_an_error_span() -> None:
    parser = logged_in()
    request = parse("p", "SELECT * FROM missing") + describe(b"S", "p") + SYNC
    span = one(exchange(parser, request, error("42P01", "no table") + ready(), 10))
    assert (span.name, span.status, span.start_ns) == ("SELECT missing", "error", 10)
    assert parser.held_requests()[1] == 0


def test_requests_after_an_error_are_skipped_until_their_sync_arrives() -> None:
    parser = logged_in()
    parser.feed(REQUEST, bind("", "gone") + execute(), 10, 11)
    span = one(parser.feed(RESPONSE, error("26000", "no such statement"), 12, 13))
    assert span.error_type == "26000"
    assert parser.feed(REQUEST, bind("", "gone") + execute() + SYNC, 14, 15) == []
    assert parser.counters[postgres.SKIPPED_AFTER_ERROR] == 1
    assert parser.feed(RESPONSE, ready(b"I"), 16, 17) == []
    assert one(exchange(parser, query("SELECT 1"), complete("SELECT 0") + ready(), 20))
    assert parser.held_requests()[0] == 0


def test_an_error_at_sync_has_no_span_to_go_to() -> None:
    parser = logged_in()
    batch = parse("", "INSERT INTO t VALUES (1)") + bind("", "") + execute() + SYNC
    answers = PARSE_COMPLETE + BIND_COMPLETE + complete("INSERT 0 1")
    answers += error("23503", "deferred constraint") + ready()
    assert one(exchange(parser, batch, answers, 10)).status == "ok"
    assert parser.held_requests()[0] == 0 and parser.error == ""


# -- joining, losing bytes, closing -------------------------------------------------------


def test_joined_mid_connection() -> None:
    parser = PostgresParser()
    assert parser.feed(RESPONSE, data_row(b"late") + complete("SELECT 1") + ready(), 1, 2) == []
    assert parser.counters[postgres.UNMATCHED_RESPONSES] == 3
    span = one(exchange(parser, query("SELECT * FROM t"), complete("SELECT 0") + ready(), 10))
    assert span.name == "SELECT t"
    assert names.ATTR_DB_NAMESPACE not in span.attributes  # the startup was not seen
    span = one(exchange(parser, bind("", "old") + execute() + SYNC,
                        BIND_COMPLETE + complete("UPDATE 4") + ready(), 20))  # fmt: skip
    assert span.name == "UPDATE"  # prepared before we joined: the tag's command
    assert span.attributes[names.ATTR_DB_AFFECTED_ROWS] == 4


def test_a_ready_that_passes_an_unanswered_execute_ends_it_incomplete() -> None:
    parser = logged_in()
    parser.feed(REQUEST, parse("", "SELECT 1") + bind("", "") + execute() + SYNC, 10, 11)
    spans = parser.feed(RESPONSE, PARSE_COMPLETE + ready(), 12, 13)  # bytes were lost
    assert [(s.name, s.status) for s in spans] == [("SELECT", "incomplete")]
    assert parser.counters[postgres.UNANSWERED_REQUESTS] == 2
    assert parser.held_requests()[0] == 0


def test_unexpected_answers_are_counted() -> None:
    parser = logged_in()
    parser.feed(REQUEST, parse("", "SELECT 1"), 10, 11)
    assert parser.feed(RESPONSE, BIND_COMPLETE, 12, 13) == []
    assert parser.counters[postgres.UNEXPECTED_RESPONSES] == 1
    assert parser.error == ""


def test_close_gives_every_waiting_query_as_incomplete() -> None:
    parser = logged_in()
    parser.feed(REQUEST, query("SELECT pg_sleep(10)"), 10, 11)
    parser.feed(REQUEST, parse("", "SELECT * FROM t") + bind("", "") + execute() + SYNC, 12, 13)
    parser.feed(RESPONSE, row_description("x") + data_row(b"1"), 14, 15)
    spans = parser.close(99)
    assert [(s.name, s.status, s.start_ns, s.end_ns) for s in spans] == [
        ("SELECT", "incomplete", 10, 99), ("SELECT t", "incomplete", 12, 99),
    ]  # fmt: skip
    assert parser.feed(REQUEST, query("SELECT 1"), 100, 101) == []
    assert parser.close(102) == []


def test_close_after_an_error_still_gives_what_waited() -> None:
    parser = logged_in()
    parser.feed(REQUEST, query("SELECT 1"), 10, 11)
    parser.feed(RESPONSE, b"\xff\x00\x00\x00\x04", 12, 13)
    assert parser.error == "unknown server message type 0xff"
    assert parser.feed(RESPONSE, ready(), 14, 15) == []
    assert [s.status for s in parser.close(20)] == ["incomplete"]


# -- hostile input and limits -------------------------------------------------------------


@pytest.mark.parametrize(
    "side, data, reason",
    [
        (
            REQUEST,
            struct.pack("!ii", 100_000, 196608),
            "startup message length 100000 out of range",
        ),
        (REQUEST, struct.pack("!ii", 4, 196608), "startup message length 4 out of range"),
        (REQUEST, startup(version=2 << 16, user="u"), "unsupported protocol version 2.0"),
        (REQUEST, b"GET / HTTP/1.1\r\n", "unknown client message type 0x47"),
        (RESPONSE, b"Z\x00\x00\x00\x06II", "message 'Z' length 6 out of range"),
        (RESPONSE, b"D\x40\x00\x00\x00", "message 'D' length 1073741824 out of range"),
        (RESPONSE, b"D\xff\xff\xff\xff", "message 'D' length 4294967295 out of range"),
        (RESPONSE, b"D\x00\x00\x00\x03", "message 'D' length 3 out of range"),
    ],
)
def test_garbage_ends_the_parse_with_a_reason(side: str, data: bytes, reason: str) -> None:
    parser = PostgresParser() if data[:1] == b"\0" else logged_in()
    assert parser.feed(side, data, 5, 6) == []  # type: ignore[arg-type]
    assert parser.error == reason
    assert parser.buffered_bytes() == 0


def test_ssl_answer_that_is_neither_yes_nor_no() -> None:
    parser = PostgresParser()
    parser.feed(REQUEST, SSL_REQUEST, 1, 2)
    parser.feed(RESPONSE, b"X", 3, 4)
    assert parser.error == "answer b'X' to an encryption request"


def test_huge_declared_row_is_stepped_over_without_holding_it() -> None:
    parser = logged_in()
    parser.feed(REQUEST, query("SELECT blob FROM files"), 10, 11)
    declared = 0x3FFF_FFFF
    parser.feed(RESPONSE, b"D" + struct.pack("!i", declared), 12, 13)
    chunk = bytes(1 << 20)
    for _ in range(8):
        parser.feed(RESPONSE, chunk, 14, 15)
        assert parser.buffered_bytes() == 0
    assert parser.error == ""
    assert [s.status for s in parser.close(20)] == ["incomplete"]


def test_long_sql_is_cut_and_masked_and_held_within_bounds() -> None:
    parser = logged_in()
    sql = "INSERT INTO big VALUES " + ", ".join(f"({i}, 'name-{i}')" for i in range(20_000))
    wire = query(sql)
    held = 0
    for i in range(0, len(wire), 4096):
        parser.feed(REQUEST, wire[i : i + 4096], 10, 11)
        held = max(held, parser.buffered_bytes())
    assert held <= HELD_BOUND
    span = one(parser.feed(RESPONSE, complete("INSERT 0 20000") + ready(), 12, 13))
    assert span.name == "INSERT big"
    text = str(span.attributes[names.ATTR_DB_QUERY_TEXT])
    assert len(text) <= MAX_SQL_BYTES and "name-" not in text
    assert parser.counters[postgres.CUT_SQL] == 1


def test_pending_requests_are_capped_and_pairing_survives() -> None:
    parser = logged_in()
    sent = postgres.MAX_PENDING + 10
    parser.feed(REQUEST, query("SELECT 1") * sent, 10, 11)
    assert parser.held_requests()[0] == postgres.MAX_PENDING + 1  # plus one placeholder
    assert parser.counters[postgres.DROPPED_REQUESTS] == 10
    spans = parser.feed(RESPONSE, (complete("SELECT 0") + ready()) * sent, 12, 13)
    assert len(spans) == postgres.MAX_PENDING
    assert parser.held_requests()[0] == 0
    assert one(exchange(parser, query("SELECT * FROM t"), complete("SELECT 0") + ready(), 20))


def test_a_batch_past_the_cap_is_dropped_whole_up_to_its_sync() -> None:
    parser = logged_in()
    batch = b"".join(bind("", "") + execute() for _ in range(postgres.MAX_PENDING)) + SYNC
    parser.feed(REQUEST, parse("", "SELECT 1") + batch, 10, 11)
    answers = PARSE_COMPLETE + (BIND_COMPLETE + complete("SELECT 1")) * postgres.MAX_PENDING
    spans = parser.feed(RESPONSE, answers + ready(), 12, 13)
    assert len(spans) == (postgres.MAX_PENDING - 1) // 2
    assert parser.held_requests()[0] == 0
    assert postgres.UNEXPECTED_RESPONSES not in parser.counters
    assert one(exchange(parser, query("SELECT * FROM t"), complete("SELECT 0") + ready(), 20))


def test_prepared_statements_are_capped_by_number_and_text() -> None:
    parser = logged_in()
    many = b"".join(
        parse(f"s{i}", "SELECT 1") for i in range(postgres_statements.MAX_STATEMENTS + 5)
    )
    parser.feed(REQUEST, many, 10, 11)
    assert parser.held_requests()[1] == postgres_statements.MAX_STATEMENTS
    assert parser.counters[postgres_statements.EVICTED_STATEMENTS] == 5
    big = "SELECT " + "x" * (MAX_SQL_BYTES - 10)
    parser.feed(REQUEST, b"".join(parse(f"b{i}", big) for i in range(100)), 12, 13)
    assert parser.held_requests()[2] <= postgres_statements.MAX_STATEMENT_CHARS
    portals = b"".join(bind(f"c{i}", "s600") for i in range(postgres_statements.MAX_PORTALS + 3))
    parser.feed(REQUEST, portals, 14, 15)
    assert parser.held_requests()[3] == postgres_statements.MAX_PORTALS
    assert parser.counters[postgres_statements.EVICTED_PORTALS] == 3


# -- any split, any garbage ---------------------------------------------------------------

CONVERSATION = [
    (SSL_REQUEST, b"N"),
    (LOGIN, auth(10, cs("SCRAM-SHA-256") + b"\0")),
    (sasl_initial(b"n,,n=,r=abc"), auth(11, b"r=abcdef,s=c2FsdA==,i=4096")),
    (msg(b"p", b"c=biws,r=abcdef,p=proof"), auth(12, b"v=sig") + LOGIN_OK),
    (query("SELECT * FROM users WHERE name = 'ann'"),
     row_description("id") + data_row(b"1") + notice("n") + complete("SELECT 1") + ready()),
    (query("BEGIN; UPDATE t SET a = 1; COMMIT"),
     complete("BEGIN") + complete("UPDATE 2") + complete("COMMIT") + ready()),
    (parse("s", "SELECT * FROM t WHERE id = $1") + describe(b"S", "s") + SYNC,
     PARSE_COMPLETE + parameter_description(23) + row_description("a") + ready()),
    (bind("", "s", b"1") + execute() + bind("", "s", None) + execute() + SYNC,
     BIND_COMPLETE + data_row(b"x") + complete("SELECT 1") + BIND_COMPLETE + complete("SELECT 0")
     + ready()),
    (parse("", "SELEC") + bind("", "") + execute() + SYNC, error("42601", "syntax") + ready()),
    (query("COPY t FROM STDIN"), copy_response(b"G", 1)),
    (copy_data(b"1\n") + copy_data(b"2\n") + COPY_DONE, complete("COPY 2") + ready()),
    (query("SELECT * FROM nope"), error("42P01", "missing") + ready()),
    (query("SELECT 1"), b""),
]  # fmt: skip


def run(parser: PostgresParser, pieces: list[tuple[list[bytes], list[bytes]]]) -> list[ProtoSpan]:
    spans: list[ProtoSpan] = []
    for i, (requests, responses) in enumerate(pieces):
        for piece in requests:
            spans += parser.feed(REQUEST, piece, 100 * i, 100 * i + 1)
        for piece in responses:
            spans += parser.feed(RESPONSE, piece, 100 * i + 50, 100 * i + 51)
    return spans + parser.close(10_000)


def whole() -> list[ProtoSpan]:
    parser = PostgresParser()
    spans = run(parser, [([rq], [rs]) for rq, rs in CONVERSATION])
    clean(parser)
    return spans


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in pairwise(points)]


def test_the_conversation_gives_the_spans_it_should() -> None:
    spans = whole()
    assert [(s.name, s.status, s.error_type) for s in spans] == [
        ("SELECT users", "ok", ""),
        ("BATCH", "ok", ""),
        ("SELECT t", "ok", ""),
        ("SELECT t", "ok", ""),
        ("SELEC", "error", "42601"),
        ("COPY t", "ok", ""),
        ("SELECT nope", "error", "42P01"),
        ("SELECT", "incomplete", ""),
    ]


def test_byte_by_byte_gives_the_same_spans() -> None:
    parser = PostgresParser()
    pieces = [
        ([rq[i : i + 1] for i in range(len(rq))], [rs[i : i + 1] for i in range(len(rs))])
        for rq, rs in CONVERSATION
    ]
    assert run(parser, pieces) == whole()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=12), st.data())
def test_any_split_gives_the_same_spans(cuts: list[int], data: st.DataObject) -> None:
    pieces = []
    for rq, rs in CONVERSATION:
        response_cuts = data.draw(st.lists(st.integers(0, 10_000), max_size=6))
        pieces.append((split(rq, cuts), split(rs, response_cuts)))
    parser = PostgresParser()
    assert run(parser, pieces) == whole()
    assert parser.buffered_bytes() == 0


# A type byte and any length (huge, negative as signed), real messages, and random bytes.
HEADERS = st.builds(
    lambda kind, length: kind + struct.pack("!I", length),
    st.binary(min_size=1, max_size=1),
    st.integers(0, 2**32 - 1),
)
MESSAGES = st.sampled_from([part for pair in CONVERSATION for part in pair])
PIECES = st.one_of(st.binary(max_size=64), MESSAGES, HEADERS)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([REQUEST, RESPONSE]), PIECES), max_size=30), st.booleans()
)
def test_garbage_never_raises_and_stays_bounded(
    feeds: list[tuple[str, bytes]], fresh: bool
) -> None:
    parser = PostgresParser() if fresh else logged_in()
    for t, (side, data) in enumerate(feeds):
        for span in parser.feed(side, data, t, t):  # type: ignore[arg-type]
            assert span.protocol == names.PROTOCOL_POSTGRESQL
        assert parser.buffered_bytes() <= HELD_BOUND
        waiting, statements, chars, portals = parser.held_requests()
        assert (
            waiting <= postgres.MAX_PENDING + 1 and statements <= postgres_statements.MAX_STATEMENTS
        )
        assert (
            chars <= postgres_statements.MAX_STATEMENT_CHARS
            and portals <= postgres_statements.MAX_PORTALS
        )
        assert "\n" not in parser.error
    parser.close(len(feeds))


# -- recognise ----------------------------------------------------------------------------

KAFKA_API_VERSIONS = struct.pack("!ihhih", 20, 18, 3, 1, 6) + b"client" + b"\0" * 6
KAFKA_METADATA_V0 = struct.pack("!ihhih", 20, 3, 0, 1, 6) + b"client" + struct.pack("!i", 0)
MYSQL_HANDSHAKE_RESPONSE = bytes([0x51, 0, 0, 1]) + bytes.fromhex("8da6ff19") + b"\0" * 80


@pytest.mark.parametrize(
    "first",
    [
        LOGIN,
        startup(user="u")[:12],
        startup(user="u")[:8],
        SSL_REQUEST,
        GSSENC_REQUEST,
        CANCEL_REQUEST,
        query("SELECT 1"),
        parse("", "select * from t"),
        parse("stmt_1", " INSERT INTO t VALUES ($1)")[:24],
    ],
)
def test_recognise_first_messages(first: bytes) -> None:
    assert recognise(first)


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"GET / HTTP/1.1\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"\x16\x03\x01",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40),
        b"*1\r\n$4\r\nPING\r\n",
        b"PING\r\n",
        KAFKA_API_VERSIONS,
        KAFKA_METADATA_V0,
        MYSQL_HANDSHAKE_RESPONSE,
        b"\x00\x1d\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00",
        SSL_REQUEST[:7],
        struct.pack("!ii", 9, 80877103),
        msg(b"Q", b"\x01\x02binary\0"),
    ],
)
def test_recognise_turns_away_other_protocols(first: bytes) -> None:
    assert not recognise(first)


@given(st.binary(max_size=64))
def test_recognise_never_raises(data: bytes) -> None:
    assert recognise(data) in (True, False)
