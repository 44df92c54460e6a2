"""The names of the HTTP/LLM correlation's counters (zerotrace_correlator/http_counters.py):
one distinct `http.` name per thing counted (the run summary and the analyze report pick them
by that prefix), each one counted somewhere in the correlation, and every limit counter's
comment names a constant that exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from zerotrace_correlator import http_counters

pytestmark = pytest.mark.unit

SOURCE = Path(http_counters.__file__)
CORRELATOR = SOURCE.parent
ALIASES = {"LIMIT_CONNECTIONS": "CONNS_EVICTED"}  # one thing, named as a limit and as a drop


def counters() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(http_counters).items()
        if name.isupper() and isinstance(value, str)
    }


def test_every_counter_is_an_http_name_and_names_one_thing() -> None:
    found = counters()
    assert len(found) >= 20
    # http.*: HTTP/1.x connections and exchanges; proto.*: connections handed to another
    # protocol's parser (proto_conversation.py).
    assert all(value.startswith(("http.", "proto.")) for value in found.values())
    assert all(re.fullmatch(r"[a-z_.]+", value) for value in found.values())
    by_value: dict[str, list[str]] = {}
    for name, value in found.items():
        by_value.setdefault(value, []).append(name)
    shared = {value: sorted(names) for value, names in by_value.items() if len(names) > 1}
    assert shared == {found[a]: sorted([a, b]) for a, b in ALIASES.items()}


def test_every_counter_is_counted_by_the_correlation() -> None:
    sources = "\n".join(
        path.read_text() for path in sorted(CORRELATOR.glob("*.py")) if path != SOURCE
    )
    never = [
        name
        for name in counters()
        if name not in ALIASES and not re.search(rf"\bc\.{name}\b", sources)
    ]
    assert never == []


def test_each_limit_counter_names_the_constant_it_counts() -> None:
    named = re.findall(r"^(LIMIT_\w+) = .*#.*?\b(\w+)\.(MAX_\w+)", SOURCE.read_text(), re.M)
    assert {name for name, _module, _constant in named} == {
        name for name in counters() if name.startswith("LIMIT_")
    }
    for _name, module, constant in named:
        value = getattr(importlib.import_module(f"zerotrace_correlator.{module}"), constant)
        assert isinstance(value, int) and value > 0
