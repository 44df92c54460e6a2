"""Pure parsing of /proc/kallsyms text and kernel address lookup."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.symbols.kallsyms import parse_kallsyms
from zerotrace_collector.symbols.proc_maps import read_proc_text

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000000 t srso_alias_untrain_ret
ffffffff81001000 T do_one_initcall
ffffffff81001200 d some_data
ffffffff81001400 t helper;odd
ffffffff81001500 W weak_fn
not-hex T bad
ffffffff81002000 T
ffffffffc0000000 t mod_fn\t[nvidia]
ffffffffc0000100 d mod_data\t[nvidia]
ffffffffc0000200 T last_fn
"""


def test_lookup_covers_up_to_the_next_symbol() -> None:
    table = parse_kallsyms(KALLSYMS)
    # Same address: the first text name in order wins, deterministically.
    assert table.lookup(0xFFFFFFFF81000000) == "_stext"
    assert table.lookup(0xFFFFFFFF81000FFF) == "_stext"
    assert table.lookup(0xFFFFFFFF81001000) == "do_one_initcall"
    assert table.lookup(0xFFFFFFFF810011FF) == "do_one_initcall"
    # Data symbols end the text before them and are never answers themselves.
    assert table.lookup(0xFFFFFFFF81001200) is None
    assert table.lookup(0xFFFFFFFF81001450) == "helper:odd"  # no ';' inside a frame
    assert table.lookup(0xFFFFFFFF81001600) == "weak_fn"
    assert table.lookup(0xFFFFFFFFC0000010) == "mod_fn"
    assert table.lookup(0xFFFFFFFFC0000100) is None


def test_outside_the_table_is_unknown() -> None:
    table = parse_kallsyms(KALLSYMS)
    assert table.lookup(0x1000) is None
    assert table.lookup(0xFFFFFFFFC0000300) is None  # past the last symbol: no end known


def test_hidden_addresses_give_an_empty_table() -> None:
    # What an unprivileged reader sees with kptr_restrict: zeros, not addresses.
    table = parse_kallsyms("0000000000000000 T _stext\n0000000000000000 T do_one_initcall\n")
    assert len(table) == 0
    assert table.lookup(0) is None
    assert len(parse_kallsyms("")) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="kallsyms addresses need root")
def test_the_running_kernel() -> None:
    text = read_proc_text("/proc/kallsyms")
    assert text is not None
    table = parse_kallsyms(text)
    assert len(table) > 10000
    address = next(
        int(cols[0], 16)
        for cols in (line.split() for line in text.splitlines())
        if cols[2] == "schedule" and cols[1] in "tT"
    )
    assert table.lookup(address) == "schedule"
    assert table.lookup(address + 4) == "schedule"


@given(
    st.lists(
        st.tuples(
            st.integers(1, 1 << 16),
            st.sampled_from("tTdDbrW"),
            st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
        ),
        max_size=40,
    ),
    st.lists(st.integers(0, 1 << 17), max_size=30),
)
def test_lookup_agrees_with_a_scan(symbols: list[tuple[int, str, str]], probes: list[int]) -> None:
    table = parse_kallsyms("".join(f"{a:016x} {t} {n}\n" for a, t, n in symbols))
    # The oracle: at each address the text symbol first by name (else a data symbol wins
    # the address); a text symbol runs to the next address of any symbol.
    by_address: dict[int, list[tuple[bool, str]]] = {}
    for address, kind, name in symbols:
        by_address.setdefault(address, []).append((kind not in "tTwW", name))
    starts = sorted(by_address)
    for probe in probes:
        before = [a for a in starts if a <= probe]
        expected = None
        if before:
            at = before[-1]
            is_data, name = min(by_address[at])
            later = [a for a in starts if a > at]
            if not is_data and later:
                expected = name
        assert table.lookup(probe) == expected
