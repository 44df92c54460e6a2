"""SQL text as it leaves zerotrace: literals masked, and each statement's operation and table.
Pure.

`sanitize` replaces every literal (quoted strings, E'' and prefixed strings, dollar-quoted
bodies, numbers) with `?` and keeps everything else as written: keywords, identifiers (quoted
ones included), parameters ($1, ?), comments, TRUE/FALSE/NULL. OpenTelemetry asks that
`db.query.text` carry no literal unless the user opts in: literals are where user data is.
`statements` splits the text at top-level `;` and gives each statement's operation (its first
keyword) and its table when the statement names exactly one (`db.collection.name`).

A small tokenizer, not a SQL parser: one regular expression per dialect finds the tokens that
matter and everything between them is copied. Its rule for doubt is to mask more, never less:
a construct it does not know (a comment nested deeper than it follows, an unterminated quote)
ends early or runs to the end of the text, and what it cannot place counts as SQL, whose
literals are masked. Loops in the patterns are possessive, so no input backtracks.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import Enum, auto


class Dialect(Enum):
    POSTGRESQL = auto()  # '' strings, E'' escapes, $tag$ bodies, "identifiers", nested /* */
    MYSQL = auto()  # '' and "" strings with backslash escapes, `identifiers`, # comments


_WORD = r"[^\W\d][\w$]*"  # an unquoted identifier or keyword ($ is allowed after the start)
_NOT_IN_WORD = r"(?<![\w$])"  # a literal cannot start inside an identifier (t1, $1, a$b$)

_MASKING = {
    Dialect.POSTGRESQL: re.compile(
        r"(?P<keep>--[^\n]*+"
        # Block comments nest in PostgreSQL; one level of nesting is followed, a deeper one
        # ends the comment early (the rest is read as SQL: masked, never kept by mistake).
        r"|/\*(?:[^*/]++|\*(?!/)|/(?!\*)|/\*(?:[^*]++|\*(?!/))*+(?:\*/|\Z))*+(?:\*/|\Z)"
        r'|"(?:[^"]++|"")*+(?:"|\Z)'
        r"|\$\d+)"
        r"|(?P<mask>"
        rf"{_NOT_IN_WORD}[eE]'(?:[^'\\]++|\\[\s\S]?|'')*+(?:'|\Z)"
        rf"|(?:{_NOT_IN_WORD}(?:[bBxXnN]|[uU]&))?'(?:[^']++|'')*+(?:'|\Z)"
        rf"|{_NOT_IN_WORD}\$(?P<tag>(?:[^\W\d]\w*)?)\$[\s\S]*?(?:\$(?P=tag)\$|\Z)"
        rf"|{_NOT_IN_WORD}(?:0[xX][0-9A-Fa-f_]+|0[oO][0-7_]+|0[bB][01_]+"
        r"|(?:\d[\d_]*+(?:\.[\d_]*+)?|\.\d[\d_]*+)(?:[eE][+-]?\d+)?))"
    ),
    Dialect.MYSQL: re.compile(
        r"(?P<keep>(?:#|--(?=\s|\Z))[^\n]*+"
        r"|/\*(?:[^*]++|\*(?!/))*+(?:\*/|\Z)"  # no nesting; /*! ... */ is kept as a comment
        r"|`(?:[^`]++|``)*+(?:`|\Z))"
        r"|(?P<mask>"
        rf"(?:{_NOT_IN_WORD}[bBxXnN])?'(?:[^'\\]++|\\[\s\S]?|'')*+(?:'|\Z)"
        r'|"(?:[^"\\]++|\\[\s\S]?|"")*+(?:"|\Z)'
        rf"|{_NOT_IN_WORD}(?:0[xX][0-9A-Fa-f]+|0[bB][01]+"
        r"|(?:\d++(?:\.\d*+)?|\.\d++)(?:[eE][+-]?\d+)?))"
    ),
}

# After masking and with comments blanked: names (dotted, quoted) and the punctuation that
# shapes a statement. Everything else (operators, ?) is skipped.
_QUOTED_NAME = {Dialect.POSTGRESQL: r'"(?:[^"]++|"")*+"?', Dialect.MYSQL: r"`(?:[^`]++|``)*+`?"}
_TOKENS = {
    dialect: re.compile(
        rf"(?P<name>(?:{quoted}|{_WORD})(?:\s*+\.\s*+(?:{quoted}|{_WORD}))*+)|(?P<punct>[(),;])"
    )
    for dialect, quoted in _QUOTED_NAME.items()
}

# The table follows one of these. UPDATE counts only as a statement's first word (it also
# appears in ON CONFLICT DO UPDATE and FOR UPDATE).
_TABLE_BEFORE = frozenset({"FROM", "JOIN", "INTO", "USING"})
_COLUMNS_NEXT = frozenset({"INTO", "COPY"})  # INSERT INTO t (a, b), COPY t (a, b)
_SKIPPED_BEFORE_TABLE = frozenset({"ONLY", "TABLE", "IGNORE", "LOW_PRIORITY", "QUICK"})
# Words that end a table reference: what follows a table name that is not its alias.
_CLAUSES = frozenset(
    (
        *("WHERE", "GROUP", "ORDER", "LIMIT", "OFFSET", "FETCH", "FOR", "HAVING", "WINDOW"),
        *("UNION", "INTERSECT", "EXCEPT", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS"),
        *("NATURAL", "STRAIGHT_JOIN", "ON", "USING", "SET", "VALUES", "VALUE", "RETURNING"),
        *("SELECT", "DEFAULT", "OVERRIDING", "TABLESAMPLE", "PARTITION", "FORCE", "USE"),
        *("LOCK", "WITH", "AS", "FROM", "TO"),
    )
)
# Operations whose table is worth naming (DML and the table-wide COPY/TRUNCATE).
_WITH_TABLE = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "COPY", "TRUNCATE"})
# Texts up to this long are memoised (the same statement text recurs on a connection and
# across connections); longer ones are rare and summarised each time, so the cache stays small.
_CACHED_TEXT_CHARS = 2048


@dataclass(frozen=True, slots=True)
class Statement:
    operation: str  # the first keyword, upper case ("SELECT"); "" when the text has none
    collection: str  # the one table the statement names, as written; "" if none or several


def sanitize(sql: str, dialect: Dialect = Dialect.POSTGRESQL) -> str:
    """`sql` with every literal replaced by `?`; never longer than `sql`."""
    if len(sql) <= _CACHED_TEXT_CHARS:
        return _sanitize_cached(sql, dialect)
    return _MASKING[dialect].sub(_mask, sql)


def statements(sql: str, dialect: Dialect = Dialect.POSTGRESQL) -> tuple[Statement, ...]:
    """The statements of `sql` in order (empty ones between `;;` left out)."""
    if len(sql) <= _CACHED_TEXT_CHARS:
        return _statements_cached(sql, dialect)
    return _statements(sql, dialect)


def _mask(match: re.Match[str]) -> str:
    return "?" if match.group("keep") is None else match.group()


def _blank(match: re.Match[str]) -> str:
    """Comments become a space, literals `?`, quoted identifiers stay."""
    if match.group("mask") is not None:
        return "?"
    kept = match.group()
    return kept if kept[0] in '"`' else " "


@functools.lru_cache(maxsize=1024)
def _sanitize_cached(sql: str, dialect: Dialect) -> str:
    return _MASKING[dialect].sub(_mask, sql)


@functools.lru_cache(maxsize=1024)
def _statements_cached(sql: str, dialect: Dialect) -> tuple[Statement, ...]:
    return _statements(sql, dialect)


def _statements(sql: str, dialect: Dialect) -> tuple[Statement, ...]:
    bare = _MASKING[dialect].sub(_blank, sql)
    found: list[Statement] = []
    tokens: list[str] = []
    for match in _TOKENS[dialect].finditer(bare):
        token = match.group()
        if token != ";":
            tokens.append(token)
        elif tokens:
            found.append(_statement(tokens))
            tokens = []
    if tokens:
        found.append(_statement(tokens))
    return tuple(found)


def _is_word(token: str) -> bool:
    return token[0].isalpha() or token[0] == "_"


def _statement(tokens: list[str]) -> Statement:
    first = tokens[0]
    operation = first.upper() if _is_word(first) and "." not in first else ""
    if operation not in _WITH_TABLE:
        return Statement(operation, "")
    return Statement(operation, _collection(operation, tokens))


def _collection(operation: str, tokens: list[str]) -> str:
    """The table when the statement names exactly one and reads it plainly (no join, no
    comma-separated FROM list, no sub-select or function in FROM); else ""."""
    upper = [t.upper() for t in tokens]
    if operation in ("COPY", "TRUNCATE"):
        starts = [1]  # COPY t FROM STDIN: the FROM there names no table
    else:
        starts = [i + 1 for i, word in enumerate(upper) if word in _TABLE_BEFORE]
        if operation == "UPDATE":
            starts.insert(0, 1)
    tables: list[str] = []
    for start in starts:
        i = start
        while i < len(tokens) and upper[i] in _SKIPPED_BEFORE_TABLE:
            i += 1
        if i == len(tokens) or upper[i] in ("(", "LATERAL", "SELECT"):
            return ""  # a sub-select, a column list (COPY (...)) or a lateral join
        token = tokens[i]
        if not (_is_word(token) or token[0] in '"`') or upper[i] in _CLAUSES:
            continue  # FROM followed by a literal or a keyword: EXTRACT(x FROM ?), not a table
        after = i + 1
        if after < len(tokens) and tokens[after] == "(" and upper[start - 1] not in _COLUMNS_NEXT:
            return ""  # FROM f(...): a function, not a table
        if after < len(tokens) and upper[after] == "AS":
            after += 1
        if after < len(tokens) and _is_word(tokens[after]) and upper[after] not in _CLAUSES:
            after += 1  # an alias
        if after < len(tokens) and tokens[after] == ",":
            return ""  # FROM a, b
        tables.append(token)
    return tables[0] if len(tables) == 1 else ""
