"""The names registry, lib/zerotrace/names.py (STYLE.md rule 11), both ways: every name it
defines is read by the code, and no code spells one of its names as a string literal instead of
reading the constant. The code is lib/, cli/ and services/; tests may spell names (a test that
pins "raw.socket" checks the registry, it does not bypass it)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from zerotrace import names

ROOT = Path(__file__).resolve().parents[2]
NAMES_FILE = ROOT / "lib" / "zerotrace" / "names.py"
CODE_DIRS = ("lib", "cli", "services")


def code_files() -> list[Path]:
    """Every module of the code but the registry itself and generated gRPC stubs."""
    return sorted(
        path
        for folder in CODE_DIRS
        for path in (ROOT / folder).rglob("*.py")
        if path != NAMES_FILE and "_pb2" not in path.name and ".venv" not in path.parts
    )


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


# --- (a) every name is read ----------------------------------------------------------------


def definitions(registry: ast.Module) -> dict[str, set[str]]:
    """The registry's public module-level names (constants, functions, classes), each with the
    registry names its own definition reads."""
    defined: dict[str, ast.AST] = {}
    for node in registry.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    defined[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined[node.target.id] = node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined[node.name] = node
    public = {name for name in defined if not name.startswith("_")}
    return {
        name: {
            n.id
            for n in ast.walk(defined[name])
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in public
        }
        - {name}
        for name in public
    }


def registry_reads(module: ast.Module) -> set[str]:
    """The registry names a module reads: `from zerotrace.names import X`, and `alias.X` where
    the module bound alias to zerotrace.names (`from zerotrace import names [as alias]`,
    `import zerotrace.names as alias`), or `zerotrace.names.X` after `import zerotrace.names`."""
    read: set[str] = set()
    aliases: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.module == "zerotrace.names":
            read.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "zerotrace":
            aliases.update(a.asname or a.name for a in node.names if a.name == "names")
        elif isinstance(node, ast.Import):
            aliases.update(a.asname or a.name for a in node.names if a.name == "zerotrace.names")
    read.update(
        node.attr
        for node in ast.walk(module)
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases
    )
    return read


def unread(defined: Mapping[str, set[str]], read_outside: Iterable[str]) -> set[str]:
    """The defined names nothing outside the registry reads, directly or through another
    definition that is read. That second way is a real use, not a loophole: the topics inside
    ALL_TOPICS are created by `zerotrace topics --create` and by the in-memory bus from
    ALL_TOPICS, though no module names raw.rdma on its own. A name read only by definitions
    that are themselves unread stays unread."""
    used = {name for name in read_outside if name in defined}
    todo = list(used)
    while todo:
        for dependency in defined[todo.pop()]:
            if dependency not in used:
                used.add(dependency)
                todo.append(dependency)
    return set(defined) - used


def test_unread_finds_a_planted_unused_name() -> None:
    registry = ast.parse(
        "A = 1\nB = 2\nC = (B,)\nD = (A,)\ndef f():\n    return D\nclass K:\n    pass\n"
    )
    defined = definitions(registry)
    assert defined == {"A": set(), "B": set(), "C": {"B"}, "D": {"A"}, "f": {"D"}, "K": set()}
    first = registry_reads(ast.parse("from zerotrace import names as n\nx = n.C\n"))
    assert unread(defined, first) == {"A", "D", "f", "K"}
    second = registry_reads(
        ast.parse(
            "import zerotrace.names\nfrom zerotrace.names import f\n"
            "def g():\n    from zerotrace import names\n    return names.K\n"
        )
    )
    assert second == {"f", "K"}
    assert unread(defined, first | second) == set()


def test_registry_reads_ignores_other_modules_with_the_same_attribute() -> None:
    module = ast.parse("import other\nnames = []\nnames.append(other.ALL_TOPICS)\n")
    assert registry_reads(module) == set()


def test_every_registry_name_is_read_by_the_code() -> None:
    defined = definitions(parse(NAMES_FILE))
    read_outside: set[str] = set()
    for path in code_files():
        read_outside |= registry_reads(parse(path))
    missing = unread(defined, read_outside)
    assert sorted(missing) == [], (
        "defined in names.py but read nowhere in lib/, cli/, services/: remove them, "
        "or read them where they were meant to be read"
    )


# --- (b) no name spelled as a literal ------------------------------------------------------


def registry_values() -> dict[str, str]:
    """Each name the registry holds, as spelled, -> the constant to read instead: topic names
    and record names, index names and their prefix, consumer groups, span kinds, attributes."""
    values: dict[str, str] = {}
    for constant, value in vars(names).items():
        if constant.startswith("_"):
            continue
        if isinstance(value, names.Topic):
            values[value.name] = f"names.{constant}.name"
            if value.record:
                values[value.record] = f"names.{constant}.record"
        elif isinstance(value, str):
            values[value] = f"names.{constant}"
    return values


def docstrings(module: ast.Module) -> set[int]:
    nodes: list[ast.AST] = [module]
    nodes += [
        n
        for n in ast.walk(module)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    found: set[int] = set()
    for node in nodes:
        body = getattr(node, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            found.add(id(body[0].value))
    return found


def other_names(module: ast.Module) -> set[int]:
    """Constants in places where a plain word names something else than an index: a dict key
    or a subscript (a JSON field: the HTTP API's {"spans": [...]}, speedscope's "profiles") and
    the first argument of add_parser (a CLI subcommand: `zerotrace spans`)."""
    found: set[int] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Dict):
            found.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            found.add(id(node.slice))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_parser"
            and node.args
        ):
            found.add(id(node.args[0]))
    return found


def spelled(module: ast.Module, values: Iterable[str]) -> list[tuple[int, str]]:
    """(line, value) of every string constant, f-string pieces included, that spells one of
    values. Docstrings are prose and do not count. A plain word (the index names spans, llm,
    profiles) counts only where it cannot be another kind of name (other_names)."""
    wanted = set(values)
    skip = docstrings(module)
    fields = other_names(module)
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(module)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in wanted
        and id(node) not in skip
        and not (node.value.isalpha() and id(node) in fields)
    )


def test_spelled_finds_a_planted_literal() -> None:
    module = ast.parse(
        '"""Spans of raw.socket."""\n'
        "def f(store, consumer, sub, q, x):\n"
        '    """Reads raw.socket."""\n'
        '    store.search("spans", q)\n'
        '    consumer.subscribe(["raw.socket"])\n'
        '    body = {"spans": [], "file.fd": 1}\n'
        '    sub.add_parser("spans")\n'
        '    return body["spans"], f"zerotrace-{x}"\n'
    )
    values = ("spans", "raw.socket", "file.fd", "zerotrace-")
    assert spelled(module, values) == [
        (4, "spans"),
        (5, "raw.socket"),
        (6, "file.fd"),
        (8, "zerotrace-"),
    ]


def test_no_registry_name_is_spelled_outside_the_registry() -> None:
    values = registry_values()
    lines: list[str] = []
    for path in code_files():
        where = str(path.relative_to(ROOT))
        for line, value in spelled(parse(path), values):
            lines.append(f"{where}:{line}: {value!r} (read {values[value]})")
    assert lines == [], "registry names spelled as literals:\n" + "\n".join(lines)
