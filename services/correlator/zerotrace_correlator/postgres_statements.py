"""The prepared statements and portals of one PostgreSQL connection: which SQL an Execute
runs. Pure.

A Parse names a statement (or replaces the unnamed one), a Bind makes a portal of a
statement, an Execute runs a portal, a Close forgets either. The SQL of each is kept as a
span will show it (`Sql`: masked unless the user opted in, with its operation and table), so
an Execute of a statement prepared long before is named like the statement.

Bounded: at most MAX_STATEMENTS statements holding MAX_STATEMENT_CHARS of text, and
MAX_PORTALS portals; past either, the oldest is forgotten (counted), and an Execute of it
later is an Execute of unknown SQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from zerotrace_correlator import sql_sanitize

# Prepared statements remembered: pgx caches 512, pgjdbc 256, asyncpg and psycopg 100. The
# text budget caps what a client preparing MAX_STATEMENTS statements of MAX_SQL_BYTES could
# make us hold (8 MiB) at 1 MiB.
MAX_STATEMENTS = 512
MAX_STATEMENT_CHARS = 1024 * 1024
# Portals are named only for cursors, a handful per connection; the unnamed one is reused.
MAX_PORTALS = 64

# Counter names.
EVICTED_STATEMENTS = "evicted_statements"  # MAX_STATEMENTS or MAX_STATEMENT_CHARS
EVICTED_PORTALS = "evicted_portals"  # MAX_PORTALS
UNKNOWN_STATEMENTS = "unknown_statements"  # a Bind or Execute of one never seen


# An error message quotes, in double quotes, what it is about: a name (relation "t"), a token
# of the statement (at or near "'ann'"), or the value a client sent (invalid input syntax for
# type integer: "ann@x"), its own quotes not escaped. Everything from the first quote to the
# last goes, so a value holding a quote cannot leave a piece of itself behind.
_QUOTED = re.compile(r'"[\s\S]*"|"[\s\S]*\Z')  # to the last quote; a lone one: to the end


def mask_message(message: str) -> str:
    """An ErrorResponse's message as spans show it unless the user opted in."""
    return _QUOTED.sub("?", message)


@dataclass(frozen=True, slots=True)
class Sql:
    operation: str  # db.operation.name: "SELECT", "BATCH INSERT", "BATCH"; "" if none
    collection: str  # db.collection.name, when the text names a single table
    text: str  # db.query.text: literals masked unless kept
    batch_size: int  # statements in the text when two or more, else 0


def describe(text: str, keep_text: bool) -> Sql:
    """A statement text as spans show it. Several statements in one text are one batch
    (OpenTelemetry: "BATCH <operation>" when all share it, the table when all share it)."""
    found = sql_sanitize.statements(text)
    shown = text if keep_text else sql_sanitize.sanitize(text)
    if len(found) <= 1:
        first = found[0] if found else sql_sanitize.Statement("", "")
        return Sql(first.operation, first.collection, shown, 0)
    operations = {s.operation for s in found}
    collections = {s.collection for s in found}
    single = operations.pop() if len(operations) == 1 else ""
    operation = f"BATCH {single}" if single else "BATCH"
    return Sql(operation, collections.pop() if len(collections) == 1 else "", shown, len(found))


class Statements:
    """`count(name, n)` is told of every limit hit and unknown name."""

    def __init__(self, count: Callable[[str, int], None]) -> None:
        self._count = count
        self._statements: dict[str, Sql] = {}
        self._chars = 0
        self._portals: dict[str, Sql | None] = {}

    def held(self) -> tuple[int, int, int]:
        """Statements, the characters of their text, portals."""
        return len(self._statements), self._chars, len(self._portals)

    def parse(self, name: str, sql: Sql) -> None:
        self._forget_statement(name)
        self._statements[name] = sql
        self._chars += len(sql.text)
        while len(self._statements) > MAX_STATEMENTS or (
            self._chars > MAX_STATEMENT_CHARS and len(self._statements) > 1
        ):
            self._forget_statement(next(iter(self._statements)))
            self._count(EVICTED_STATEMENTS, 1)

    def parse_failed(self, name: str, sql: Sql | None) -> None:
        """The server refused or skipped that Parse: the statement does not exist."""
        if self._statements.get(name) is sql:
            self._forget_statement(name)

    def bind(self, portal: str, statement: str) -> Sql | None:
        sql = self._known(self._statements, statement)
        self._portals.pop(portal, None)
        self._portals[portal] = sql
        if len(self._portals) > MAX_PORTALS:
            del self._portals[next(iter(self._portals))]
            self._count(EVICTED_PORTALS, 1)
        return sql

    def portal(self, name: str) -> Sql | None:
        return self._known(self._portals, name)

    def described(self, what: bytes, name: str) -> Sql | None:
        """What a Describe or Close names: a statement (b"S") or a portal (b"P")."""
        table = self._statements if what == b"S" else self._portals
        return table.get(name)

    def close(self, what: bytes, name: str) -> None:
        if what == b"S":
            self._forget_statement(name)
        else:
            self._portals.pop(name, None)

    def _known(self, table: dict[str, Sql] | dict[str, Sql | None], name: str) -> Sql | None:
        if name not in table:
            self._count(UNKNOWN_STATEMENTS, 1)
        return table.get(name)

    def _forget_statement(self, name: str) -> None:
        sql = self._statements.pop(name, None)
        if sql is not None:
            self._chars -= len(sql.text)
