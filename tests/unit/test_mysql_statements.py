"""mysql_statements.py: SQL as MySQL spans show it, and the bounded registry of prepared
statements."""

from __future__ import annotations

import pytest

from zerotrace_correlator.mysql_statements import (
    EVICTED_STATEMENTS,
    MAX_STATEMENT_CHARS,
    MAX_STATEMENTS,
    Sql,
    Statements,
    describe,
    mask_message,
)

pytestmark = pytest.mark.unit


def test_a_statement_is_masked_named_and_its_table_found() -> None:
    sql = "SELECT `name` FROM users WHERE email = 'ann@example.com' AND id > 0x1F # note"
    assert describe(sql, keep_text=False) == Sql(
        "SELECT `name` FROM users WHERE email = ? AND id > ? # note", "SELECT", "users", 0
    )
    assert describe(sql, keep_text=True).text == sql


def test_mysql_strings_escape_with_backslashes_and_double_quotes_are_strings() -> None:
    got = describe(r"""INSERT INTO t VALUES ('it\'s', "double \"q\"", 1.5e3)""", keep_text=False)
    assert got.text == "INSERT INTO t VALUES (?, ?, ?)"


def test_several_statements_are_a_batch() -> None:
    assert describe("INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)", False) == Sql(
        "INSERT INTO t VALUES (?); INSERT INTO t VALUES (?)", "BATCH INSERT", "t", 2
    )
    mixed = describe("SET @a = 1; SELECT * FROM t", False)
    assert (mixed.operation, mixed.collection, mixed.batch_size) == ("BATCH", "", 2)


def test_use_names_the_schema_it_switches_to() -> None:
    assert describe("USE `billing`;", False).schema == "billing"
    assert describe("use shop", False).schema == "shop"
    assert describe("SELECT 1; USE shop", False).schema is None


def test_an_error_message_loses_its_quoted_values_not_its_apostrophes() -> None:
    assert mask_message("Duplicate entry 'ann@x.com' for key 'users.email'") == (
        "Duplicate entry ? for key ?"
    )
    assert mask_message("Table 'shop.x' doesn't exist") == "Table ? doesn't exist"


def test_a_syntax_error_quotes_sql_whose_literals_are_masked_as_sql() -> None:
    # MariaDB 10.11, seen here: the statement's rest is quoted as sent, its quotes unescaped.
    message = (
        "You have an error in your SQL syntax; check the manual that corresponds to your "
        "MariaDB server version for the right syntax to use near 'SELEC 'secret-typo'' at line 1"
    )
    masked = mask_message(message)
    assert masked.endswith("to use near 'SELEC ?' at line 1")
    assert "secret" not in masked
    cut = "... to use near 'WHERE a = 'it''s 2' AND b = \"x\"' at line 3"
    assert mask_message(cut) == "... to use near 'WHERE a = ? AND b = ?' at line 3"
    # Cut at 80 characters inside a literal: the rest of it is masked.
    assert mask_message("near 'x = 'ann@exa' at line 1") == "near 'x = ?' at line 1"


def test_statements_are_remembered_until_closed_or_cleared() -> None:
    counted: list[tuple[str, int]] = []
    statements = Statements(lambda name, n: counted.append((name, n)))
    one, two = describe("SELECT 1", False), describe("SELECT 2", False)
    statements.prepared(1, one)
    statements.prepared(2, two)
    assert statements.get(1) == one and len(statements) == 2
    statements.close(1)
    assert statements.get(1) is None and statements.chars() == len(two.text)
    statements.clear()
    assert len(statements) == 0 and statements.chars() == 0 and counted == []


def test_past_the_limits_the_oldest_statements_are_forgotten() -> None:
    counted: list[tuple[str, int]] = []
    statements = Statements(lambda name, n: counted.append((name, n)))
    for i in range(MAX_STATEMENTS + 2):
        statements.prepared(i, describe(f"SELECT {i}", True))
    assert len(statements) == MAX_STATEMENTS and statements.get(0) is None
    assert counted == [(EVICTED_STATEMENTS, 1)] * 2
    big = describe("SELECT '" + "x" * 4000 + "'", True)
    for i in range(1000, 1000 + MAX_STATEMENT_CHARS // 4000 + 5):
        statements.prepared(i, big)
    assert statements.chars() <= MAX_STATEMENT_CHARS
