"""The SQL of a MySQL connection's commands: as spans show it, and what each prepared
statement id stands for. Pure.

`describe` gives a statement text as spans show it (`Sql`: literals masked unless the user
opted in, with its operation and table; several statements in one COM_QUERY, which
CLIENT_MULTI_STATEMENTS allows, are one batch). `Statements` remembers the SQL of each id a
COM_STMT_PREPARE_OK gave, so an execute long after is named like its statement, until
COM_STMT_CLOSE forgets it (COM_RESET_CONNECTION and COM_CHANGE_USER forget them all).

Bounded: at most MAX_STATEMENTS statements holding MAX_STATEMENT_CHARS of text; past either
the oldest is forgotten (counted), and an execute of it later runs unknown SQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from zerotrace_correlator import sql_sanitize

# Prepared statements remembered per connection: HikariCP advises a Connector/J statement
# cache of 250-500, MariaDB Connector/J keeps 250, Go's database/sql and PyMySQL none. The
# text budget caps what MAX_STATEMENTS statements of mysql.MAX_QUERY_TEXT_BYTES could make
# us hold (2 MiB) at 1 MiB, as postgres_statements.py does.
MAX_STATEMENTS = 512
MAX_STATEMENT_CHARS = 1024 * 1024

EVICTED_STATEMENTS = "evicted_statements"  # counter: MAX_STATEMENTS or MAX_STATEMENT_CHARS

_MYSQL = sql_sanitize.Dialect.MYSQL
_USE = re.compile(r"\s*use\s+(`[^`]+`|[^\s;`]+)\s*;?\s*", re.I)
# An error message quotes the values it is about ("Duplicate entry 'ann@x' for key ..."): they
# become ?. It is prose, not SQL, so an apostrophe inside a word ("doesn't") opens nothing.
_QUOTED = re.compile(r"(?<!\w)(?:'[^']*+'|\"[^\"]*+\")")
# ER_PARSE_ERROR (1064) and its kin quote the rest of the statement as sent, quotes unescaped:
# "... near 'SELEC 'ann@x'' at line 1". That fragment (cut at 80 characters) is masked as SQL,
# up to the last "' at line N", so a literal inside it never pairs with the wrong quote.
_NEAR = re.compile(r"(near ')(.*)(' at line \d+)", re.S)


@dataclass(frozen=True, slots=True)
class Sql:
    text: str  # db.query.text: literals masked unless kept
    operation: str  # "SELECT"; "BATCH INSERT" or "BATCH" for several statements; "" if none
    collection: str  # db.collection.name, when the text names a single table
    batch_size: int  # statements in the text when two or more, else 0
    schema: str | None = None  # the schema a `USE schema` statement switches to


def describe(text: str, keep_text: bool) -> Sql:
    """A statement text as spans show it; several are a batch, named as OpenTelemetry asks:
    "BATCH <operation>" when all share it, the table when all share it."""
    found = sql_sanitize.statements(text, _MYSQL)
    shown = text if keep_text else sql_sanitize.sanitize(text, _MYSQL)
    use = _USE.fullmatch(text)
    schema = use.group(1).strip("`") if use is not None else None
    if len(found) <= 1:
        first = found[0] if found else sql_sanitize.Statement("", "")
        return Sql(shown, first.operation, first.collection, 0, schema)
    operations, collections = {s.operation for s in found}, {s.collection for s in found}
    single = operations.pop() if len(operations) == 1 else ""
    collection = collections.pop() if len(collections) == 1 else ""
    return Sql(shown, f"BATCH {single}" if single else "BATCH", collection, len(found))


def mask_message(message: str) -> str:
    near = _NEAR.search(message)
    if near is None:
        return _QUOTED.sub("?", message)
    fragment = sql_sanitize.sanitize(near[2], _MYSQL)
    before, after = message[: near.start()], message[near.end() :]
    return f"{_QUOTED.sub('?', before)}{near[1]}{fragment}{near[3]}{_QUOTED.sub('?', after)}"


class Statements:
    """`count(name, n)` is told of every statement forgotten for the limits."""

    def __init__(self, count: Callable[[str, int], None]) -> None:
        self._count = count
        self._statements: dict[int, Sql] = {}
        self._chars = 0
        self.last: Sql | None = None  # the latest COM_STMT_PREPARE's, answered or not

    def __len__(self) -> int:
        return len(self._statements)

    def chars(self) -> int:
        return self._chars

    def get(self, statement: int) -> Sql | None:
        return self._statements.get(statement)

    def prepared(self, statement: int, sql: Sql) -> None:
        self.close(statement)
        self._statements[statement] = sql
        self._chars += len(sql.text)
        while len(self._statements) > MAX_STATEMENTS or (
            self._chars > MAX_STATEMENT_CHARS and len(self._statements) > 1
        ):
            self.close(next(iter(self._statements)))
            self._count(EVICTED_STATEMENTS, 1)

    def close(self, statement: int) -> None:
        sql = self._statements.pop(statement, None)
        if sql is not None:
            self._chars -= len(sql.text)

    def clear(self) -> None:
        self._statements.clear()
        self._chars = 0
