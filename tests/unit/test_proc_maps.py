"""Pure parsing of /proc/PID/maps and /proc/PID/stat text, and address lookup in a map."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.symbols.proc_maps import (
    MapIndex,
    Mapping,
    map_files_path,
    parse_proc_maps,
    parse_start_time,
    parse_stat,
    read_proc_text,
)

MAPS = """\
7f0391d5c000-7f0391eb2000 r-xp 00026000 fe:00 326269   /usr/lib/x86_64-linux-gnu/libc.so.6
557ace617000-557ace619000 r--p 00000000 fe:00 247026   /usr/bin/cat
557ace619000-557ace61e000 r-xp 00002000 fe:00 247026   /usr/bin/cat
557ae8b0e000-557ae8b2f000 rw-p 00000000 00:00 0   [heap]
7f0391cb1000-7f0391cd3000 rw-p 00000000 00:00 0
7f0391d36000-7f0391d5c000 r--p 00000000 fe:00 326269   /usr/lib/x86_64-linux-gnu/libc.so.6
7f0391f27000-7f0391f29000 r-xp 00000000 00:00 0   [vdso]
7f0400000000-7f0400001000 r-xp 00001000 08:11 99   /tmp/my lib (v2).so (deleted)
7f0500000000-7f0500001000 r-xp 00000000 08:11 0   /memfd:jit (deleted)
garbage line
7f0600000000-7f0500000000 r-xp 00000000 08:11 5   /backwards
zzzz-7f0500000000 r-xp 00000000 08:11 5   /bad/hex
"""


def test_lines_are_parsed_and_sorted_by_start() -> None:
    maps = parse_proc_maps(MAPS)
    assert [m.start for m in maps] == sorted(m.start for m in maps)
    assert len(maps) == 9  # three malformed lines skipped
    cat = maps[1]
    assert cat == Mapping(
        0x557ACE619000, 0x557ACE61E000, "r-xp", 0x2000, (0xFE, 0), 247026, "/usr/bin/cat"
    )
    assert cat.is_file and cat.module == "cat"
    assert cat.file_offset(0x557ACE619010) == 0x2010
    assert cat.range_name == "557ace619000-557ace61e000"


def test_anonymous_pseudo_and_deleted_mappings() -> None:
    by_start = {m.start: m for m in parse_proc_maps(MAPS)}
    heap = by_start[0x557AE8B0E000]
    assert heap.path == "[heap]" and not heap.is_file and heap.inode == 0
    anon = by_start[0x7F0391CB1000]
    assert anon.path == "" and anon.module == "" and not anon.is_file
    assert by_start[0x7F0391F27000].module == "[vdso]"
    deleted = by_start[0x7F0400000000]
    # A path with spaces and parentheses survives; the suffix becomes a flag.
    assert deleted.path == "/tmp/my lib (v2).so" and deleted.deleted
    assert deleted.module == "my lib (v2).so" and deleted.dev == (8, 0x11)
    # inode 0: a memfd is not a file to open, whatever its name says.
    memfd = by_start[0x7F0500000000]
    assert not memfd.is_file and not memfd.deleted


def test_map_index_finds_the_covering_mapping_only() -> None:
    index = MapIndex(parse_proc_maps(MAPS))
    assert len(index) == 9
    libc_text = index.find(0x7F0391D5C000)
    assert libc_text is not None and libc_text.offset == 0x26000
    assert index.find(0x7F0391EB1FFF) is libc_text
    assert index.find(0x7F0391EB2000) is None  # end is exclusive, and a gap follows
    assert index.find(0) is None
    assert index.find(0xFFFFFFFFFFFFFFFF) is None
    assert MapIndex([]).find(0x1000) is None


STAT = (
    "6990 (we(ird) )name) R 6986 6986 4424 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 35274 "
    "3133440 382 18446744073709551615 94452430127104 94452430146985 0 0 0 0\n"
)


def test_start_time_is_field_22_counted_after_the_command_name() -> None:
    assert parse_start_time(STAT) == 35274
    assert parse_stat(STAT) == ("R", 35274)
    assert parse_stat(STAT.replace(") R ", ") Z ")) == ("Z", 35274)
    assert parse_start_time("1 (init) S 0 1") is None
    assert parse_start_time("no parentheses here") is None
    assert parse_start_time(STAT.replace("35274", "x")) is None


def test_reads_of_this_process_and_of_nothing() -> None:
    pid = os.getpid()
    text = read_proc_text(f"/proc/{pid}/stat")
    assert text is not None and parse_start_time(text) is not None
    maps = parse_proc_maps(read_proc_text(f"/proc/{pid}/maps") or "")
    assert any(m.module.startswith("libc") for m in maps)
    assert read_proc_text("/proc/0/maps") is None
    assert read_proc_text("/nonexistent/file") is None
    m = maps[0]
    assert map_files_path("/proc", pid, m) == f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}"


@pytest.mark.parametrize("line", ["", "   ", "1-2", "1-2 r-xp 0 00:00"])
def test_short_lines_are_skipped(line: str) -> None:
    assert parse_proc_maps(line) == []


@given(st.text())
def test_any_text_parses_without_raising(text: str) -> None:
    for m in parse_proc_maps(text):
        assert m.end > m.start
    parse_stat(text)


@given(
    st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 1 << 12)), max_size=30),
    st.lists(st.integers(0, 1 << 21), max_size=30),
)
def test_find_agrees_with_a_scan(gaps_sizes: list[tuple[int, int]], probes: list[int]) -> None:
    lines, at = [], 0
    for gap, size in gaps_sizes:
        start = at + gap
        lines.append(f"{start:x}-{start + size:x} r-xp 00000000 08:01 7 /lib/x{start}.so")
        at = start + size
    maps = parse_proc_maps("\n".join(lines))
    index = MapIndex(maps)
    for address in probes:
        expected = next((m for m in maps if m.start <= address < m.end), None)
        assert index.find(address) == expected
