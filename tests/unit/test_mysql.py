"""mysql.py: MySQL spans of one connection, driven through the ProtocolParser contract
(protocol_span.py): the login, every command kind, the compressed protocol, packets over
16 MiB, pipelining, any split of the bytes, joining after the login, close(), and hostile
input. Wire bytes come from test_mysql_wire.py's builders."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_mysql_wire import (
    CLIENT_BASE,
    COMPRESS,
    CURSOR_EXISTS,
    DEPRECATE_EOF,
    DOC_GREETING,
    DOC_LOGIN,
    MORE_RESULTS,
    QUERY_ATTRIBUTES,
    SECRET,
    SERVER_ALL,
    SSL,
    ZSTD,
    binary_row,
    column_def,
    compressed,
    eof,
    err,
    execute,
    greeting,
    lenenc_int,
    login,
    ok,
    ok_eof,
    packet,
    packets,
    prepare_ok,
    resultset,
    ssl_request,
    text_row,
)
from zerotrace import names
from zerotrace_correlator import mysql_wire as wire
from zerotrace_correlator.mysql import (
    CUT_QUERY_TEXTS,
    MALFORMED_PACKETS,
    MAX_PENDING_COMMANDS,
    MAX_QUERY_TEXT_BYTES,
    PENDING_OVERFLOWS,
    SKIPPED_RESPONSE_BYTES,
    UNKNOWN_STATEMENTS,
    UNMATCHED_RESPONSES,
    MySqlParser,
    recognise,
)
from zerotrace_correlator.mysql_statements import EVICTED_STATEMENTS, MAX_STATEMENTS
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtocolParser, ProtoSpan, Side

pytestmark = pytest.mark.unit

Step = tuple[Side, bytes]
# What a parser may hold between feeds, whatever it is fed: per direction a compressed and a
# plain header and one packet's head; the first request bytes held while sniffing.
BUFFER_BOUND = 2 * (wire.MAX_HEAD_BYTES + wire.COMPRESSED_HEADER_BYTES + wire.HEADER_BYTES) + 12
QUERY, PREPARE, INIT_DB, PING, QUIT = b"\x03", b"\x16", b"\x02", b"\x0e", b"\x01"


def ask(*payloads: bytes, compress: bool = False) -> Step:
    stream = packets(*payloads)
    return REQUEST, compressed(stream) if compress else stream


def answer(*payloads: bytes, seq: int = 1, compress: bool = False) -> Step:
    stream = packets(*payloads, seq=seq)
    return RESPONSE, compressed(stream, seq=1) if compress else stream


def connect(
    caps: int = CLIENT_BASE, server: int = SERVER_ALL, version: str = "8.0.36"
) -> list[Step]:
    return [
        (RESPONSE, packet(greeting(version, server))),
        (REQUEST, packet(login(caps=caps), seq=1)),
        (RESPONSE, packet(ok(), seq=2)),
    ]


def run(
    steps: list[Step], parser: MySqlParser | None = None, cuts: Sequence[int] = ()
) -> list[ProtoSpan]:
    """Step i is fed at (10 i, 10 i + 5), cut at `cuts` (offsets into each step, all pieces
    at the step's times): the spans must not depend on where the cuts fall."""
    parser = parser if parser is not None else MySqlParser()
    spans: list[ProtoSpan] = []
    for i, (side, data) in enumerate(steps):
        bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
        for a, b in pairwise(bounds):
            spans += parser.feed(side, data[a:b], 10 * i, 10 * i + 5)
            assert parser.buffered_bytes() <= BUFFER_BOUND
    return spans


def brief(spans: list[ProtoSpan]) -> list[tuple[str, str, dict[str, object]]]:
    return [(s.name, s.status, dict(s.attributes)) for s in spans]


def session(compress: bool = False, deprecate: bool = False) -> list[Step]:
    """A login, then one of most kinds of command, on a plain or compressed connection."""
    caps = CLIENT_BASE | (COMPRESS if compress else 0) | (DEPRECATE_EOF if deprecate else 0)
    z = compress
    param_def = [column_def("?")] + ([] if deprecate else [eof()])
    column_defs = [column_def("id"), column_def("name")] + ([] if deprecate else [eof()])
    return [
        *connect(caps),
        ask(QUERY + b"SELECT id, name FROM users WHERE id > 10 AND name = 'ann'", compress=z),
        (RESPONSE, compressed(resultset(["id", "name"], [text_row(b"11", b"ann")] * 3,
                                        deprecate), seq=1) if z
         else resultset(["id", "name"], [text_row(b"11", b"ann")] * 3, deprecate)),
        ask(QUERY + b"INSERT INTO orders (item) VALUES ('tea'), ('cake')", compress=z),
        answer(ok(affected=2), compress=z),
        ask(PREPARE + b"SELECT id, name FROM users WHERE id = ?", compress=z),
        answer(prepare_ok(1, columns=2, params=1), *param_def, *column_defs, compress=z),
        ask(execute(1, 42), compress=z),
        (RESPONSE, compressed(resultset(["id", "name"], [binary_row(42, 7)], deprecate), seq=1) if z
         else resultset(["id", "name"], [binary_row(42, 7)], deprecate)),
        ask(b"\x19" + (1).to_bytes(4, "little"), compress=z),  # COM_STMT_CLOSE: no answer
        ask(QUERY + b"SELECT * FROM missing", compress=z),
        answer(err(1146, "42S02", "Table 'shop.missing' doesn't exist"), compress=z),
        ask(INIT_DB + b"billing", compress=z),
        answer(ok(), compress=z),
        ask(PING, compress=z),
        answer(ok(), compress=z),
        ask(QUIT, compress=z),
    ]  # fmt: skip


def expected_session() -> list[tuple[str, str, dict[str, object]]]:
    base = {
        names.ATTR_DB_SYSTEM_NAME: "mysql", names.ATTR_DB_NAMESPACE: "shop",
        names.ATTR_USER_NAME: "app",
    }  # fmt: skip
    select = "SELECT id, name FROM users WHERE id = ?"
    return [
        ("CONNECT", "ok", {**base, names.ATTR_DB_OPERATION_NAME: "CONNECT"}),
        ("SELECT users", "ok", {
            **base, names.ATTR_DB_OPERATION_NAME: "SELECT", names.ATTR_DB_COLLECTION_NAME: "users",
            names.ATTR_DB_QUERY_TEXT: "SELECT id, name FROM users WHERE id > ? AND name = ?",
            names.ATTR_DB_RESPONSE_RETURNED_ROWS: 3,
        }),
        ("INSERT orders", "ok", {
            **base, names.ATTR_DB_OPERATION_NAME: "INSERT",
            names.ATTR_DB_COLLECTION_NAME: "orders",
            names.ATTR_DB_QUERY_TEXT: "INSERT INTO orders (item) VALUES (?), (?)",
            names.ATTR_DB_AFFECTED_ROWS: 2,
        }),
        ("COM_STMT_PREPARE", "ok", {
            **base, names.ATTR_DB_OPERATION_NAME: "COM_STMT_PREPARE",
            names.ATTR_DB_QUERY_TEXT: select,
        }),
        ("SELECT users", "ok", {
            **base, names.ATTR_DB_OPERATION_NAME: "SELECT", names.ATTR_DB_COLLECTION_NAME: "users",
            names.ATTR_DB_QUERY_TEXT: select, names.ATTR_DB_RESPONSE_RETURNED_ROWS: 1,
        }),
        ("COM_STMT_CLOSE", "ok", {
            **base, names.ATTR_DB_OPERATION_NAME: "COM_STMT_CLOSE",
            names.ATTR_DB_QUERY_TEXT: select,
        }),
        ("SELECT missing", "error", {
            **base, names.ATTR_DB_OPERATION_NAME: "SELECT",
            names.ATTR_DB_COLLECTION_NAME: "missing",
            names.ATTR_DB_QUERY_TEXT: "SELECT * FROM missing",
            names.ATTR_DB_RESPONSE_STATUS_CODE: "1146", names.ATTR_MYSQL_SQLSTATE: "42S02",
            names.ATTR_ERROR_MESSAGE: "Table ? doesn't exist",
        }),
        ("COM_INIT_DB", "ok", {
            **base, names.ATTR_DB_OPERATION_NAME: "COM_INIT_DB", names.ATTR_DB_NAMESPACE: "billing",
        }),
        ("COM_PING", "ok", {
            **base, names.ATTR_DB_OPERATION_NAME: "COM_PING", names.ATTR_DB_NAMESPACE: "billing",
        }),
        ("COM_QUIT", "ok", {
            **base, names.ATTR_DB_OPERATION_NAME: "COM_QUIT", names.ATTR_DB_NAMESPACE: "billing",
        }),
    ]  # fmt: skip


# -- the contract and the login -------------------------------------------------------------


def test_the_parser_keeps_the_protocol_parser_contract() -> None:
    parser: ProtocolParser = MySqlParser()
    assert parser.protocol == names.PROTOCOL_MYSQL == "mysql"
    assert parser.error == "" and parser.counters == {} and parser.close(0) == []


@pytest.mark.parametrize("deprecate", [False, True])
def test_every_kind_of_command_is_one_span_with_its_attributes(deprecate: bool) -> None:
    parser = MySqlParser()
    spans = run(session(deprecate=deprecate), parser)
    assert brief(spans) == expected_session()
    assert parser.error == "" and parser.counters == {} and parser.pending_commands() == 0
    assert parser.statements() == 0  # closed
    assert not any("SECRET" in str(v) for s in spans for v in s.attributes.values())


def test_a_span_runs_from_its_request_s_first_byte_to_its_response_s_last() -> None:
    steps = session()
    spans = run(steps)
    login_span, select = spans[0], spans[1]
    assert (login_span.start_ns, login_span.end_ns) == (10, 25)  # steps 1 and 2
    assert (select.start_ns, select.end_ns) == (30, 45)
    assert select.request_bytes == len(steps[3][1]) and select.response_bytes == len(steps[4][1])
    assert login_span.request_bytes == len(steps[1][1])
    quit_span = spans[-1]
    assert (quit_span.start_ns, quit_span.end_ns, quit_span.response_bytes) == (180, 185, 0)


def test_a_request_split_over_feeds_starts_at_its_first_piece() -> None:
    parser = MySqlParser()
    run(connect(), parser)
    query = packet(QUERY + b"SELECT 1")
    assert parser.feed(REQUEST, query[:3], 100, 101) == []
    assert parser.feed(REQUEST, query[3:], 200, 201) == []
    (span,) = parser.feed(RESPONSE, packet(ok(), seq=1), 300, 301)
    assert (span.start_ns, span.end_ns) == (100, 301)


def test_keep_text_keeps_the_literals_of_queries_and_errors() -> None:
    steps = [
        *connect(),
        ask(QUERY + b"SELECT * FROM users WHERE email = 'ann@example.com'"),
        answer(err(1064, "42000", "near 'ann@example.com'")),
    ]
    (_, masked) = run(steps)
    assert masked.attributes[names.ATTR_DB_QUERY_TEXT] == "SELECT * FROM users WHERE email = ?"
    assert masked.attributes[names.ATTR_ERROR_MESSAGE] == "near ?"
    (_, kept) = run(steps, MySqlParser(keep_text=True))
    assert kept.attributes[names.ATTR_DB_QUERY_TEXT] == steps[3][1][5:].decode()
    assert kept.attributes[names.ATTR_ERROR_MESSAGE] == "near 'ann@example.com'"
    assert (kept.status, kept.error_type) == ("error", "1064")


def test_a_mariadb_server_is_named_so() -> None:
    (span,) = run(connect(version="5.5.5-10.11.6-MariaDB-0+deb12u1"))
    assert span.attributes[names.ATTR_DB_SYSTEM_NAME] == names.DB_SYSTEM_MARIADB == "mariadb"


def test_a_denied_login_is_an_error_span_and_the_auth_data_is_never_kept() -> None:
    steps = [
        (RESPONSE, packet(greeting())),
        (REQUEST, packet(login(), seq=1)),
        answer(b"\xfecaching_sha2_password\0" + bytes(20) + b"\0", seq=2),  # auth switch
        (REQUEST, packet(SECRET, seq=3)),
        answer(b"\x01\x04", seq=4),  # full authentication: the password comes
        (REQUEST, packet(b"hunter2-the-password\0", seq=5)),
        answer(err(1045, "28000", "Access denied for user 'app'@'10.1.2.3'"), seq=6),
    ]
    (span,) = run(steps)
    assert (span.name, span.status, span.error_type) == ("CONNECT", "error", "1045")
    assert span.attributes[names.ATTR_DB_RESPONSE_STATUS_CODE] == "1045"
    assert span.attributes[names.ATTR_MYSQL_SQLSTATE] == "28000"
    assert span.attributes[names.ATTR_ERROR_MESSAGE] == "Access denied for user ?@?"
    assert span.request_bytes == sum(len(d) for side, d in steps if side == REQUEST)
    assert (span.start_ns, span.end_ns) == (10, 65)
    assert not any("hunter2" in str(v) or "SECRET" in str(v) for v in span.attributes.values())


def test_a_server_refusing_before_its_greeting_is_an_error_span() -> None:
    (span,) = run([(RESPONSE, packet(b"\xff\x10\x04Too many connections"))])
    assert (span.name, span.status, span.error_type) == ("CONNECT", "error", "1040")
    assert names.ATTR_MYSQL_SQLSTATE not in span.attributes


def test_tls_after_an_ssl_request_stops_the_parser_with_a_reason() -> None:
    hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40)
    for cuts in ([], list(range(60))):
        parser = MySqlParser()
        steps = [(RESPONSE, packet(greeting())), (REQUEST, packet(ssl_request(), seq=1) + hello)]
        assert run(steps, parser, cuts) == []
        assert parser.error.startswith("TLS after the SSLRequest")


def test_the_plaintext_of_a_tls_connection_is_read_from_the_login_on() -> None:
    # From the TLS uprobes: the login's sequence id is 2, the SSLRequest having been 1.
    tail = [(REQUEST, packet(login(caps=CLIENT_BASE | SSL), seq=2)), answer(ok(), seq=3),
            ask(PING), answer(ok())]  # fmt: skip
    for head in ([], [(RESPONSE, packet(greeting())), (REQUEST, packet(ssl_request(), seq=1))]):
        parser = MySqlParser()
        assert [s.name for s in run(head + tail, parser)] == ["CONNECT", "COM_PING"]
        assert parser.error == ""


def test_the_documentation_s_login_reads() -> None:
    (span,) = run([(RESPONSE, DOC_GREETING), (REQUEST, DOC_LOGIN), answer(ok(), seq=2)])
    assert span.attributes[names.ATTR_USER_NAME] == "pam"
    assert span.attributes[names.ATTR_DB_NAMESPACE] == "test"


# -- commands -------------------------------------------------------------------------------


def test_multi_statements_are_one_batch_span_reading_every_result() -> None:
    steps = [
        *connect(),
        ask(QUERY + b"INSERT INTO t VALUES (1); SELECT a FROM t"),
        answer(ok(affected=1, status=MORE_RESULTS), lenenc_int(1), column_def("a"), eof(),
               text_row(b"1"), eof()),
        ask(PING),
        answer(ok()),
    ]  # fmt: skip
    (_, batch, ping) = run(steps)
    assert batch.name == "BATCH t"
    assert batch.attributes[names.ATTR_DB_OPERATION_NAME] == "BATCH"
    assert batch.attributes[names.ATTR_DB_OPERATION_BATCH_SIZE] == 2
    assert batch.attributes[names.ATTR_DB_RESPONSE_RETURNED_ROWS] == 1
    assert batch.attributes[names.ATTR_DB_AFFECTED_ROWS] == 1
    assert ping.name == "COM_PING"


def test_an_execute_of_a_statement_prepared_before_we_joined_is_counted() -> None:
    parser = MySqlParser()
    run([*connect(), ask(execute(77)), answer(ok())], parser)
    assert parser.counters == {UNKNOWN_STATEMENTS: 1}


def test_mariadb_s_pipelined_execute_runs_the_statement_just_prepared() -> None:
    steps = [
        *connect(),
        (REQUEST, packets(PREPARE + b"DELETE FROM carts WHERE id = ?")
         + packet(execute(0xFFFFFFFF, 5))),
        answer(prepare_ok(9, columns=0, params=1), column_def("?"), eof()),
        answer(ok(affected=1)),
    ]  # fmt: skip
    (_, prepared, executed) = run(steps)
    assert executed.name == "DELETE carts"
    assert executed.attributes[names.ATTR_DB_QUERY_TEXT] == "DELETE FROM carts WHERE id = ?"
    assert prepared.attributes[names.ATTR_DB_QUERY_TEXT] == "DELETE FROM carts WHERE id = ?"


def test_a_cursor_s_rows_come_by_fetch() -> None:
    steps = [
        *connect(),
        ask(PREPARE + b"SELECT n FROM big"),
        answer(prepare_ok(3, columns=1, params=0), column_def("n"), eof()),
        ask(execute(3)),
        answer(lenenc_int(1), column_def("n"), eof(status=CURSOR_EXISTS | 2)),
        ask(b"\x1c" + (3).to_bytes(4, "little") + (2).to_bytes(4, "little")),
        answer(binary_row(1), binary_row(2), eof(status=CURSOR_EXISTS | 2)),
    ]
    spans = run(steps)
    assert [(s.name, s.attributes.get(names.ATTR_DB_RESPONSE_RETURNED_ROWS)) for s in spans] == [
        ("CONNECT", None), ("COM_STMT_PREPARE", None), ("SELECT big", 0), ("COM_STMT_FETCH", 2)
    ]  # fmt: skip


def test_use_and_init_db_change_the_namespace_only_when_they_succeed() -> None:
    steps = [
        *connect(),
        ask(QUERY + b"use `audit`"), answer(ok()),
        ask(INIT_DB + b"nope"), answer(err(1049, "42000", "Unknown database 'nope'")),
        ask(PING), answer(ok()),
    ]  # fmt: skip
    namespaces = [s.attributes[names.ATTR_DB_NAMESPACE] for s in run(steps)]
    assert namespaces == ["shop", "audit", "audit", "audit"]


def test_change_user_changes_the_user_and_schema_and_forgets_statements() -> None:
    change = b"\x11bob\0" + b"\x14" + SECRET[:20] + b"billing\0" + b"\x21\x00"
    parser = MySqlParser()
    steps = [
        *connect(),
        ask(PREPARE + b"SELECT 1"), answer(prepare_ok(1, 1, 0), column_def("1"), eof()),
        ask(change), answer(b"\xfemysql_native_password\0" + bytes(21), seq=1),
        (REQUEST, packet(SECRET[:20], seq=2)), answer(ok(), seq=3),
        ask(PING), answer(ok()),
    ]  # fmt: skip
    spans = run(steps, parser)
    assert spans[2].name == "COM_CHANGE_USER" and spans[2].status == "ok"
    assert spans[3].attributes[names.ATTR_USER_NAME] == "bob"
    assert spans[3].attributes[names.ATTR_DB_NAMESPACE] == "billing"
    assert parser.statements() == 0


def test_local_infile_data_belongs_to_its_query_and_is_never_kept() -> None:
    steps = [
        *connect(),
        ask(QUERY + b"LOAD DATA LOCAL INFILE '/tmp/x.csv' INTO TABLE t"),
        answer(b"\xfb/tmp/x.csv"),
        (REQUEST, packets(b"ann,secret-row\n", b"bob,other-row\n", b"", seq=2)),
        answer(ok(affected=2), seq=5),
    ]
    (_, load) = run(steps)
    assert load.status == "ok" and load.attributes[names.ATTR_DB_AFFECTED_ROWS] == 2
    assert load.request_bytes == len(steps[3][1]) + len(steps[5][1])
    assert not any("secret-row" in str(v) for v in load.attributes.values())


@pytest.mark.parametrize(
    ("request_payload", "response_payload", "name"),
    [
        (b"\x09", b"Uptime: 1  Threads: 1  Questions: 2", "COM_STATISTICS"),
        (b"\x1b\x01\x00", eof(), "COM_SET_OPTION"),
        (b"\x1f", ok(), "COM_RESET_CONNECTION"),
        (b"\x0c" + (7).to_bytes(4, "little"), ok(), "COM_PROCESS_KILL"),
        (b"\x1a" + (1).to_bytes(4, "little"), ok(), "COM_STMT_RESET"),
        (b"\x04users\0", column_def("id"), "COM_FIELD_LIST"),
    ],
)
def test_other_commands_are_named_after_themselves(
    request_payload: bytes, response_payload: bytes, name: str
) -> None:
    extra = [eof()] if name == "COM_FIELD_LIST" else []
    steps = [*connect(), ask(request_payload), answer(response_payload, *extra)]
    parser = MySqlParser()
    (_, span) = run(steps, parser)
    assert (span.name, span.status) == (name, "ok") and parser.pending_commands() == 0


def test_a_replication_stream_stops_the_parser() -> None:
    parser = MySqlParser()
    run([*connect(), ask(b"\x12" + bytes(10) + b"binlog.000001")], parser)
    assert parser.error == "COM_BINLOG_DUMP: a replication or clone stream follows, not commands"


# -- compression and long packets -----------------------------------------------------------


def test_the_compressed_protocol_gives_the_spans_of_the_plain_one() -> None:
    parser = MySqlParser()
    assert run(session(compress=True), parser) == run(session())
    assert parser.error == "" and parser.counters == {}


def test_zstd_compression_is_reported_not_decoded() -> None:
    parser = MySqlParser()
    run(connect(caps=CLIENT_BASE | ZSTD, server=SERVER_ALL | ZSTD), parser)
    assert parser.error == "zstd-compressed protocol: not decoded"


def test_a_compressed_packet_that_inflates_too_far_stops_the_parser() -> None:
    bomb = zlib.compress(packet(QUERY + bytes(4_000_000)))
    parser = MySqlParser()
    header = len(bomb).to_bytes(3, "little") + b"\0" + (100).to_bytes(3, "little")
    steps = [*connect(CLIENT_BASE | COMPRESS), (REQUEST, header + bomb)]
    run(steps, parser)
    assert parser.error == "compressed packet inflates past its declared 100 bytes"


def test_a_query_over_16_mib_is_one_span_with_its_text_cut() -> None:
    sql = b"INSERT INTO blobs VALUES ('" + b"x" * (wire.MAX_PAYLOAD + 100) + b"')"
    parser = MySqlParser(keep_text=True)
    steps = [*connect(), ask(QUERY + sql), answer(ok(affected=1))]
    (_, span) = run(steps, parser)
    assert span.request_bytes == len(steps[3][1]) == len(sql) + 1 + 8
    assert len(str(span.attributes[names.ATTR_DB_QUERY_TEXT])) == MAX_QUERY_TEXT_BYTES
    assert span.name == "INSERT blobs" and parser.counters == {CUT_QUERY_TEXTS: 1}


def test_a_row_over_16_mib_is_one_row() -> None:
    row = text_row(b"y" * (wire.MAX_PAYLOAD + 5))
    rows = resultset(["b"], [row, text_row(b"small")], deprecate_eof=True)
    steps = [*connect(DEPRECATE_EOF | CLIENT_BASE), ask(QUERY + b"SELECT b FROM blobs"),
             (RESPONSE, rows)]  # fmt: skip
    (_, span) = run(steps, cuts=[3, 100_000, 20_000_000])
    assert span.attributes[names.ATTR_DB_RESPONSE_RETURNED_ROWS] == 2


# -- pipelining and splits ------------------------------------------------------------------


def test_pipelined_commands_pair_with_their_responses_in_order() -> None:
    steps = [
        *connect(),
        (REQUEST, packet(QUERY + b"SELECT a FROM t") + packet(b"\x19" + bytes(4))
         + packet(PING) + packet(QUERY + b"UPDATE t SET a = 1")),
        (RESPONSE, resultset(["a"], [text_row(b"1"), text_row(b"2")]) + packet(ok(), seq=1)
         + packet(ok(affected=5), seq=1)),
    ]  # fmt: skip
    spans = run(steps)
    assert [s.name for s in spans] == [
        "CONNECT", "COM_STMT_CLOSE", "SELECT t", "COM_PING", "UPDATE t"
    ]  # fmt: skip
    assert spans[2].attributes[names.ATTR_DB_RESPONSE_RETURNED_ROWS] == 2
    assert spans[4].attributes[names.ATTR_DB_AFFECTED_ROWS] == 5


@pytest.mark.parametrize("compress", [False, True])
def test_a_session_fed_byte_by_byte_gives_the_same_spans(compress: bool) -> None:
    steps = session(compress=compress)
    assert run(steps, cuts=list(range(400))) == run(steps)


@settings(max_examples=120, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
    compress=st.booleans(),
    deprecate=st.booleans(),
)
def test_any_split_of_a_session_gives_the_same_spans(
    cuts: list[int], compress: bool, deprecate: bool
) -> None:
    steps = session(compress, deprecate)
    assert run(steps, cuts=cuts) == run(steps)


# -- joining after the login ----------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_a_connection_joined_after_its_login_is_read_from_its_next_command(
    compress: bool,
) -> None:
    late = session(compress=compress)[3:]  # from the first query on
    steps = [answer(text_row(b"tail of a row"), ok_eof(), compress=compress), *late]
    for cuts in ([], list(range(300))):
        parser = MySqlParser()
        spans = run(steps, parser, cuts)
        full = [(n, st, {k: v for k, v in a.items()
                         if k not in (names.ATTR_DB_NAMESPACE, names.ATTR_USER_NAME)})
                for n, st, a in expected_session()[1:]]  # fmt: skip
        got = [(n, st, {k: v for k, v in a.items() if k != names.ATTR_DB_NAMESPACE})
               for n, st, a in brief(spans)]  # fmt: skip
        assert got[:6] == full[:6] and [g[0] for g in got] == [f[0] for f in full]
        assert parser.error == ""
        # Its first response packet is framed (it might have been a greeting), the rest skipped.
        assert set(parser.counters) == {UNMATCHED_RESPONSES, SKIPPED_RESPONSE_BYTES}


def test_a_prepare_in_an_unknown_eof_mode_ends_where_the_packets_say() -> None:
    for deprecate in (False, True):
        tail = [] if deprecate else [eof()]
        steps = [
            ask(PREPARE + b"SELECT a FROM t"),
            answer(prepare_ok(2, columns=1, params=0), column_def("a"), *tail),
            ask(execute(2)),
            (RESPONSE, resultset(["a"], [binary_row(1)], deprecate)),
        ]
        parser = MySqlParser()
        spans = run(steps, parser)
        assert [(s.name, s.end_ns) for s in spans] == [("COM_STMT_PREPARE", 15), ("SELECT t", 35)]
        assert parser.error == "" and parser.counters == {}


# -- close ----------------------------------------------------------------------------------


def test_close_gives_the_waiting_commands_as_incomplete() -> None:
    parser = MySqlParser()
    steps = [*connect(), ask(QUERY + b"SELECT a FROM t"), answer(lenenc_int(1), column_def("a"))]
    run(steps, parser)
    run([ask(PING)], parser)
    spans = parser.close(1000)
    assert [(s.name, s.status, s.end_ns) for s in spans] == [
        ("SELECT t", "incomplete", 1000), ("COM_PING", "incomplete", 1000)
    ]  # fmt: skip
    assert parser.pending_commands() == 0 and parser.feed(REQUEST, packet(PING), 1, 2) == []


def test_a_prepare_waiting_for_its_optional_eof_is_whole_at_close() -> None:
    parser = MySqlParser()
    run([ask(PREPARE + b"SELECT 1"), answer(prepare_ok(1, 1, 0), column_def("1"))], parser)
    (span,) = parser.close(99)
    assert (span.name, span.status, span.end_ns) == ("COM_STMT_PREPARE", "ok", 15)


# -- hostile input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "reason"),
    [
        ([ask(b"\x00sleep")], "not a MySQL command: byte 0x00"),
        ([*connect(), (REQUEST, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")], "not a MySQL packet"),
        ([*connect(), ask(PING + b"extra")], "not a MySQL command: byte 0x0e, 6 bytes"),
        ([*connect(), ask(QUERY + b"SELECT 1"), answer(b"\xfe" + (1 << 40).to_bytes(8, "little"))],
         "not a resultset's column count"),
        ([*connect(CLIENT_BASE | COMPRESS), (REQUEST, b"\x08\0\0\0\x05\0\0garbage!")],
         "corrupt compressed packet"),
    ],
)  # fmt: skip
def test_bytes_that_are_not_mysql_stop_the_parser_with_a_reason(
    steps: list[Step], reason: str
) -> None:
    parser = MySqlParser()
    run(steps, parser)
    assert parser.error.startswith(reason)
    assert parser.feed(REQUEST, packet(PING), 1, 2) == []  # terminal


def test_waiting_commands_past_the_limit_stop_the_parser() -> None:
    parser = MySqlParser()
    run([*connect(), (REQUEST, packet(PING) * (MAX_PENDING_COMMANDS + 1))], parser)
    assert parser.error == f"more than {MAX_PENDING_COMMANDS} commands wait for a response"
    assert parser.counters == {PENDING_OVERFLOWS: 1}
    assert len(parser.close(5)) == MAX_PENDING_COMMANDS  # an error does not hide them


def test_statements_past_the_limit_forget_the_oldest() -> None:
    parser = MySqlParser()
    run(connect(DEPRECATE_EOF | CLIENT_BASE), parser)
    for i in range(MAX_STATEMENTS + 3):
        run([ask(PREPARE + b"SELECT 1"), answer(prepare_ok(i, 0, 0))], parser)
    assert parser.statements() == MAX_STATEMENTS
    assert parser.counters == {EVICTED_STATEMENTS: 3}


def test_a_huge_declared_length_holds_only_a_head() -> None:
    parser = MySqlParser()
    run([*connect(), (REQUEST, b"\xff\xff\xff\x00\x03SELECT ")], parser)
    for _ in range(40):
        parser.feed(REQUEST, b"x" * 100_000, 1, 2)
        assert parser.buffered_bytes() <= BUFFER_BOUND


def test_an_endless_chain_of_results_is_one_span_and_holds_nothing() -> None:
    # MySQL nests nothing; the nearest thing is a chain of results (SERVER_MORE_RESULTS_EXISTS)
    # that a hostile server need never end. Each result is counted and let go.
    parser = MySqlParser()
    run([*connect(), ask(QUERY + b"CALL forever()")], parser)
    chain = packets(*[ok(affected=1, status=MORE_RESULTS)] * 20_000, seq=1)
    for pos in range(0, len(chain), 4096):
        assert parser.feed(RESPONSE, chain[pos : pos + 4096], 1, 2) == []
        assert parser.buffered_bytes() <= BUFFER_BOUND
    (span,) = parser.feed(RESPONSE, packet(ok(affected=1), seq=1), 3, 4)
    assert span.attributes[names.ATTR_DB_AFFECTED_ROWS] == 20_001


def test_query_attributes_that_do_not_read_leave_a_span_without_text() -> None:
    parser = MySqlParser()
    steps = [*connect(CLIENT_BASE | QUERY_ATTRIBUTES), ask(QUERY + b"\xfc\xff\xff\x01SELECT 1"),
             answer(ok())]  # fmt: skip
    (_, span) = run(steps, parser)
    assert span.name == "COM_QUERY" and names.ATTR_DB_QUERY_TEXT not in span.attributes
    assert parser.counters == {MALFORMED_PACKETS: 1}


def test_responses_nobody_asked_for_are_counted_not_framed() -> None:
    parser = MySqlParser()
    run([*connect(), answer(ok(), ok())], parser)
    assert parser.counters == {SKIPPED_RESPONSE_BYTES: len(packets(ok(), ok(), seq=1))}
    parser = MySqlParser()
    run([answer(ok())], parser)  # before any greeting: framed, found to be no greeting
    assert parser.counters == {UNMATCHED_RESPONSES: 1}


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.tuples(st.booleans(), st.binary(max_size=300)), max_size=12),
    logged_in=st.booleans(),
    compress=st.booleans(),
)
def test_random_bytes_never_raise_and_stay_bounded(
    pieces: list[tuple[bool, bytes]], logged_in: bool, compress: bool
) -> None:
    parser = MySqlParser()
    if logged_in:
        run(connect(CLIENT_BASE | (COMPRESS if compress else 0)), parser)
    for t, (is_request, data) in enumerate(pieces):
        parser.feed(REQUEST if is_request else RESPONSE, data, t, t)
        assert parser.buffered_bytes() <= BUFFER_BOUND
        assert parser.pending_commands() <= MAX_PENDING_COMMANDS
    parser.close(len(pieces))


@settings(max_examples=200, deadline=None)
@given(
    step=st.integers(min_value=0, max_value=40),
    at=st.integers(min_value=0, max_value=400),
    noise=st.binary(min_size=1, max_size=30),
    compress=st.booleans(),
)
def test_a_corrupted_session_never_raises(step: int, at: int, noise: bytes, compress: bool) -> None:
    steps = session(compress=compress)
    side, data = steps[step % len(steps)]
    corrupted = bytearray(data)
    at %= len(corrupted)
    corrupted[at : at + len(noise)] = noise
    steps[step % len(steps)] = (side, bytes(corrupted))
    parser = MySqlParser()
    spans = run(steps, parser)
    spans += parser.close(10_000)
    assert len(spans) <= 2 * len(expected_session())


# -- recognise ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first",
    [
        packet(greeting()),
        DOC_GREETING,
        packet(b"\xff\x10\x04Too many connections"),
        packet(b"\xff\x6a\x04#HY000Host '10.0.0.9' is not allowed to connect"),
        packet(login(), seq=1),
        DOC_LOGIN,
        packet(ssl_request(), seq=1),
        packet(login(caps=CLIENT_BASE | SSL), seq=2),  # the plaintext of a TLS connection
        packet(QUERY + b"SELECT 1"),
        packet(QUERY + b"\x00\x01SELECT 1"),  # with query attributes
        packet(PING),
        packet(PREPARE + b"SELECT ?"),
        compressed(packet(QUERY + b"SELECT 1")),
        compressed(packet(QUERY + b"SELECT " + b"1, " * 30 + b"1")),
    ],
)
def test_recognise_knows_every_kind_of_first_packet(first: bytes) -> None:
    assert recognise(first)


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"GET / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"\x16\x03\x01",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32) + b"\x20" + bytes(32),
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"*1\r\n$4\r\nPING\r\n",  # Redis RESP
        b"PING\r\n",  # Redis inline
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f",  # PostgreSQL SSLRequest
        b"\x00\x00\x00\x29\x00\x03\x00\x00user\x00app\x00database\x00app\x00\x00",
        b"\x00\x00\x00\x18\x00\x12\x00\x03\x00\x00\x00\x01\x00\x07client1\x00",  # Kafka
        b"\x00\x1d\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01",
        b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01",
        packet(b"\x00"),  # COM_SLEEP never crosses the wire
        packet(PING, seq=5),
    ],
)
def test_recognise_refuses_other_protocols(first: bytes) -> None:
    assert not recognise(first)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=1, exclude_categories=["Cs"]), max_size=200))
def test_recognise_never_takes_text(text: str) -> None:
    # A packet's sequence id is 0, 1 or 2, and a login's filler is zeros: text has no NUL.
    assert not recognise(text.encode())
