from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator.sql_sanitize import Dialect, Statement, sanitize, statements

pytestmark = pytest.mark.unit

PG, MY = Dialect.POSTGRESQL, Dialect.MYSQL


@pytest.mark.parametrize(
    "sql, masked",
    [
        ("SELECT * FROM t WHERE a = 'x' AND b = 'it''s'", "SELECT * FROM t WHERE a = ? AND b = ?"),
        ("SELECT E'a\\'b\\\\', e'\\n'", "SELECT ?, ?"),
        ("SELECT $$it's$$, $fn$ body $x$ still $fn$, $1", "SELECT ?, ?, $1"),
        ("SELECT x'1F', B'0101', N'n', U&'d\\0061'", "SELECT ?, ?, ?, ?"),
        (
            "SELECT 1, -2.5, .5, 5., 1e10, 2.5E-3, 0x1F, 0o17, 0b101, 1_000",
            "SELECT ?, -?, ?, ?, ?, ?, ?, ?, ?, ?",
        ),
        (
            "SELECT '123'::int, ARRAY[1, 2], t1.c2 FROM t1",
            "SELECT ?::int, ARRAY[?, ?], t1.c2 FROM t1",
        ),
        ('SELECT "col 1", "it\'s" FROM "My Table"', 'SELECT "col 1", "it\'s" FROM "My Table"'),
        (
            "SELECT a$b$c, $2 FROM t WHERE x IS TRUE AND y IS NOT NULL",
            "SELECT a$b$c, $2 FROM t WHERE x IS TRUE AND y IS NOT NULL",
        ),
        (
            "SELECT 1 -- a 'comment' 2\n, /* c 'x' /* nested 'y' */ 'z' */ 3",
            "SELECT ? -- a 'comment' 2\n, /* c 'x' /* nested 'y' */ 'z' */ ?",
        ),
        ("INSERT INTO t VALUES ('unterminated", "INSERT INTO t VALUES (?"),
        ("SELECT $tag$ never closed", "SELECT ?"),
        ("SELECT '' , ''''", "SELECT ? , ?"),
    ],
)
def test_postgresql_literals_are_masked(sql: str, masked: str) -> None:
    assert sanitize(sql) == masked


@pytest.mark.parametrize(
    "sql, masked",
    [
        (
            "SELECT * FROM `db`.`t` WHERE a = 'x\\'y' AND b = \"s\"",
            "SELECT * FROM `db`.`t` WHERE a = ? AND b = ?",
        ),
        ("SELECT 'a''b', \"c\"\"d\", X'1F', b'01', 0x1F, 0b1, 1.5e3", "SELECT ?, ?, ?, ?, ?, ?, ?"),
        ("SELECT 1 # 'note'\n, 2 -- 'x'\n, 3--4", "SELECT ? # 'note'\n, ? -- 'x'\n, ?--?"),
        ("SELECT _utf8mb4'x', ? FROM `we``ird`", "SELECT _utf8mb4?, ? FROM `we``ird`"),
        (
            "SELECT /*+ MAX_EXECUTION_TIME(1000) */ `a$b` FROM t",
            "SELECT /*+ MAX_EXECUTION_TIME(1000) */ `a$b` FROM t",
        ),
        ("SELECT $$x$$", "SELECT $$x$$"),  # no dollar quoting in MySQL
    ],
)
def test_mysql_literals_are_masked(sql: str, masked: str) -> None:
    assert sanitize(sql, MY) == masked


@pytest.mark.parametrize(
    "sql, found",
    [
        ("SELECT * FROM users WHERE id = 1", [("SELECT", "users")]),
        ("select a from public.users u where a in (1, 2)", [("SELECT", "public.users")]),
        ('SELECT * FROM "Sales"."Orders" AS o ORDER BY a, b', [("SELECT", '"Sales"."Orders"')]),
        ("SELECT * FROM a, b", [("SELECT", "")]),
        ("SELECT * FROM a x, b y", [("SELECT", "")]),
        ("SELECT * FROM a JOIN b USING (c)", [("SELECT", "")]),
        ("SELECT * FROM a WHERE id IN (SELECT id FROM b)", [("SELECT", "")]),
        ("SELECT * FROM (SELECT 1) s", [("SELECT", "")]),
        ("SELECT * FROM generate_series(1, 10)", [("SELECT", "")]),
        ("SELECT extract(year FROM now())", [("SELECT", "")]),
        ("SELECT substring('x' FROM 2) FROM t", [("SELECT", "t")]),
        ("SELECT 1", [("SELECT", "")]),
        ("INSERT INTO t (a, b) VALUES (1, 2) RETURNING id", [("INSERT", "t")]),
        ("INSERT INTO t SELECT * FROM u", [("INSERT", "")]),
        ("INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET a = 2", [("INSERT", "t")]),
        ("UPDATE ONLY accounts SET x = 1 WHERE id = 2", [("UPDATE", "accounts")]),
        ("UPDATE a SET x = b.x FROM b WHERE a.id = b.id", [("UPDATE", "")]),
        ("DELETE FROM t USING u WHERE t.id = u.id", [("DELETE", "")]),
        ("delete from t where id = $1", [("DELETE", "t")]),
        ("COPY t (a, b) FROM STDIN", [("COPY", "t")]),
        ("COPY (SELECT 1) TO STDOUT", [("COPY", "")]),
        ("TRUNCATE TABLE t", [("TRUNCATE", "t")]),
        ("SELECT * FROM t FOR UPDATE", [("SELECT", "t")]),
        ("WITH x AS (SELECT 1) SELECT * FROM x", [("WITH", "")]),
        ("CREATE TABLE t (a int)", [("CREATE", "")]),
        ("BEGIN;;COMMIT;", [("BEGIN", ""), ("COMMIT", "")]),
        ("SELECT ';' FROM t; SELECT 2 /* ; */", [("SELECT", "t"), ("SELECT", "")]),
        ("/* leading comment */ SELECT * FROM t", [("SELECT", "t")]),
        ("", []),
        ("  ;  ", []),
        ("(SELECT 1) UNION (SELECT 2)", [("", "")]),
    ],
)
def test_statements_and_their_table(sql: str, found: list[tuple[str, str]]) -> None:
    assert statements(sql) == tuple(Statement(op, table) for op, table in found)


def test_mysql_statements() -> None:
    assert statements("SELECT * FROM `db`.`t` WHERE a = 'x;y'; REPLACE INTO u VALUES (1)", MY) == (
        Statement("SELECT", "`db`.`t`"),
        Statement("REPLACE", "u"),
    )
    assert statements("INSERT IGNORE INTO t VALUES (1)", MY) == (Statement("INSERT", "t"),)


def test_long_texts_are_not_cached_but_read_alike() -> None:
    sql = "SELECT * FROM t WHERE a IN (" + ", ".join(["'x'"] * 2000) + ")"
    assert sanitize(sql) == "SELECT * FROM t WHERE a IN (" + ", ".join(["?"] * 2000) + ")"
    assert statements(sql) == (Statement("SELECT", "t"),)


# The characters a string literal may hold, quotes included (doubled inside the literal).
TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


@given(TEXT)
def test_a_string_literal_never_leaks(secret: str) -> None:
    quoted = "'" + secret.replace("'", "''") + "'"
    sql = f"SELECT a FROM t WHERE b = {quoted} AND c = $1"
    assert sanitize(sql) == "SELECT a FROM t WHERE b = ? AND c = $1"
    escaped = "E'" + secret.replace("\\", "\\\\").replace("'", "\\'") + "'"
    assert sanitize(f"SELECT {escaped}") == "SELECT ?"
    mysql = "'" + secret.replace("\\", "\\\\").replace("'", "\\'") + "'"
    assert sanitize(f"SELECT {mysql}, x", MY) == "SELECT ?, x"


@given(st.integers(), st.floats(allow_nan=False, allow_infinity=False))
def test_numbers_never_leak(whole: int, real: float) -> None:
    assert sanitize(f"SELECT {abs(whole)}, {abs(real)!r}") == "SELECT ?, ?"


@settings(max_examples=300)
@given(st.text(max_size=200), st.sampled_from([PG, MY]))
def test_any_text_is_read_without_error_and_never_grows(sql: str, dialect: Dialect) -> None:
    masked = sanitize(sql, dialect)
    assert len(masked) <= len(sql)
    for statement in statements(sql, dialect):
        assert statement.operation == statement.operation.upper()


@settings(max_examples=200)
@given(
    st.lists(
        st.sampled_from(
            ["'", '"', "`", "$$", "$a$", "/*", "*/", "--", "\n", "E'", "\\", "x", "1", ";", "("]
        ),
        max_size=60,
    )
)
def test_quote_soup_is_read_and_never_grows(parts: list[str]) -> None:
    sql = "".join(parts)
    for dialect in (PG, MY):
        once = sanitize(sql, dialect)
        assert len(once) <= len(sql)
        statements(sql, dialect)


@pytest.mark.parametrize(
    "sql",
    [
        "(" * 100_000 + "1" + ")" * 100_000,
        "/*" * 50_000,
        "/* " + "/* x */ " * 20_000 + "*/",
        "'" + "\\" * 100_000,
        "E'" + "\\'" * 50_000,
        "$a$" + "$" * 100_000,
        "SELECT " + "a." * 50_000 + "b FROM t",
        "x" * 200_000,
        '"' + '""' * 50_000,
    ],
)
def test_hostile_texts_take_linear_time(sql: str) -> None:
    began = time.process_time()
    for dialect in (PG, MY):
        sanitize(sql, dialect)
        statements(sql, dialect)
    assert time.process_time() - began < 2.0
