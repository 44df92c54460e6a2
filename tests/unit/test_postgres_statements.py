from __future__ import annotations

from collections import Counter

import pytest

from zerotrace_correlator import postgres_statements as ps
from zerotrace_correlator.postgres_statements import Sql, Statements, describe

pytestmark = pytest.mark.unit


def statements() -> tuple[Statements, Counter[str]]:
    counts: Counter[str] = Counter()

    def count(name: str, n: int) -> None:
        counts[name] += n

    return Statements(count), counts


def test_describe_one_statement_masked_or_kept() -> None:
    sql = "SELECT * FROM users WHERE name = 'ann'"
    assert describe(sql, keep_text=False) == Sql(
        "SELECT", "users", "SELECT * FROM users WHERE name = ?", 0
    )
    assert describe(sql, keep_text=True).text == sql
    assert describe("", keep_text=False) == Sql("", "", "", 0)


@pytest.mark.parametrize(
    "sql, operation, collection, size",
    [
        ("INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)", "BATCH INSERT", "t", 2),
        ("INSERT INTO t VALUES (1); INSERT INTO u VALUES (2)", "BATCH INSERT", "", 2),
        ("BEGIN; UPDATE t SET a = 1; COMMIT", "BATCH", "", 3),
        ("SELECT 1;", "SELECT", "", 0),  # one statement and an empty one: not a batch
    ],
)
def test_describe_several_statements_as_a_batch(
    sql: str, operation: str, collection: str, size: int
) -> None:
    described = describe(sql, keep_text=False)
    assert (described.operation, described.collection, described.batch_size) == (
        operation,
        collection,
        size,
    )


@pytest.mark.parametrize(
    "message, shown",
    [
        ('relation "nope" does not exist', "relation ? does not exist"),
        ("syntax error at or near \"'ann'\"", "syntax error at or near ?"),
        (
            'invalid input syntax for type integer: "a "b" c"',
            "invalid input syntax for type integer: ?",
        ),
        ('value "12345678901 is out of ran', "value ?"),  # cut short: to the end
        ("division by zero", "division by zero"),
    ],
)
def test_an_error_message_loses_what_it_quotes(message: str, shown: str) -> None:
    assert ps.mask_message(message) == shown


def test_parse_bind_execute_close() -> None:
    table, counts = statements()
    sql = describe("SELECT * FROM t WHERE id = $1", keep_text=False)
    table.parse("s1", sql)
    assert table.bind("", "s1") is sql
    assert table.portal("") is sql
    assert table.described(b"S", "s1") is sql and table.described(b"P", "") is sql
    table.close(b"S", "s1")
    table.close(b"P", "")
    assert table.held() == (0, 0, 0)
    assert table.bind("", "s1") is None
    assert counts == {ps.UNKNOWN_STATEMENTS: 1}


def test_a_failed_parse_is_forgotten_but_not_a_later_one_of_the_same_name() -> None:
    table, _ = statements()
    first, second = describe("SELEC", False), describe("SELECT 2", False)
    table.parse("", first)
    table.parse("", second)
    table.parse_failed("", first)  # the server's answer to the first came late
    assert table.described(b"S", "") is second
    table.parse_failed("", second)
    assert table.held() == (0, 0, 0)


def test_statements_are_capped_by_number_oldest_first() -> None:
    table, counts = statements()
    for i in range(ps.MAX_STATEMENTS + 3):
        table.parse(f"s{i}", describe("SELECT 1", False))
    assert table.held()[0] == ps.MAX_STATEMENTS
    assert counts[ps.EVICTED_STATEMENTS] == 3
    assert table.described(b"S", "s0") is None
    assert table.described(b"S", f"s{ps.MAX_STATEMENTS + 2}") is not None


def test_statements_are_capped_by_text() -> None:
    table, counts = statements()
    big = describe("SELECT " + "x" * 100_000, False)
    for i in range(30):
        table.parse(f"b{i}", big)
        assert table.held()[1] <= ps.MAX_STATEMENT_CHARS
    assert counts[ps.EVICTED_STATEMENTS] == 30 - ps.MAX_STATEMENT_CHARS // len(big.text)
    huge = describe("SELECT " + "y" * (ps.MAX_STATEMENT_CHARS + 1), True)
    table.parse("huge", huge)  # one statement over the budget alone is still kept
    assert table.held()[:2] == (1, len(huge.text))


def test_portals_are_capped() -> None:
    table, counts = statements()
    table.parse("s", describe("SELECT 1", False))
    for i in range(ps.MAX_PORTALS + 2):
        table.bind(f"c{i}", "s")
    assert table.held()[2] == ps.MAX_PORTALS
    assert counts == {ps.EVICTED_PORTALS: 2}
    assert table.portal("c0") is None
