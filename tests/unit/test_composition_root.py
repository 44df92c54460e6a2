"""The composition root (cli/zerotrace_cli) stays wiring: argument parsing, building the object
graph, handing it over. A long function there is logic that belongs in a service or in the
embedded node object."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 60


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method in `source` longer than `limit` lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                out.append((node.name, lines))
    return out


def test_the_detector_finds_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    assert long_functions(f"def f():\n{body}\n") == [("f", 62)]
    assert long_functions("def g():\n    return 1\n") == []


def test_no_function_of_the_composition_root_is_over_60_lines() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{name}": lines
        for path in sorted((ROOT / "cli").rglob("*.py"))
        for name, lines in long_functions(path.read_text())
    }
    assert found == {}
