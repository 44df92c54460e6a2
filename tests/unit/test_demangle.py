"""C++ names made readable (zerotrace_collector/symbols/demangle.py) through libstdc++'s
__cxa_demangle: Itanium names demangled, anything else (C names, broken manglings, a host
without libstdc++) returned unchanged, each name decoded once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.symbols import demangle as module
from zerotrace_collector.symbols.demangle import demangle

pytestmark = pytest.mark.unit

needs_runtime = pytest.mark.skipif(
    module._Runtime().fn is None, reason="libstdc++ cannot be loaded here"
)


@needs_runtime
@pytest.mark.parametrize(
    ("mangled", "readable"),
    [
        ("_ZN3foo3barEv", "foo::bar()"),
        ("_Z3addii", "add(int, int)"),
        (
            "_ZNSt6vectorIiSaIiEE9push_backERKi",
            "std::vector<int, std::allocator<int> >::push_back(int const&)",
        ),
    ],
)
def test_itanium_names_come_out_readable(mangled: str, readable: str) -> None:
    assert demangle(mangled) == readable


@pytest.mark.parametrize("name", ["main", "PyEval_EvalFrameDefault", "", "_Z", "_Znot_valid"])
def test_other_names_and_broken_manglings_stay_as_they_are(name: str) -> None:
    assert demangle(name) == name


@given(st.text(max_size=40))
def test_any_text_gives_text_and_never_raises(name: str) -> None:
    out = demangle("_Z" + name)
    assert isinstance(out, str) and out


def test_without_the_runtime_a_name_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = module._Runtime.__new__(module._Runtime)
    missing.fn = missing.free = None
    monkeypatch.setattr(module, "_RUNTIME", missing)
    demangle.cache_clear()
    try:
        assert demangle("_ZN3foo3barEv") == "_ZN3foo3barEv"
    finally:
        demangle.cache_clear()


def test_a_name_is_demangled_once() -> None:
    demangle.cache_clear()
    demangle("_Z3addii")
    demangle("_Z3addii")
    assert demangle.cache_info().hits >= 1
