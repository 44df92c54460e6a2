"""ELF symbol tables and file-offset translation, on files built here with gcc and checked
against binutils (nm) and the ELF program headers."""

from __future__ import annotations

import io
import lzma
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.native_programs import (
    CPP_LIB,
    build_library,
    build_target,
    have_compilers,
    nm_symbols,
    split_debug,
    stripped,
)
from zerotrace_collector.symbols.elf_cache import ElfCache, file_key
from zerotrace_collector.symbols.elf_sections import parse_build_id, parse_debuglink
from zerotrace_collector.symbols.elf_symbols import ElfError, load_elf, parse_elf

pytestmark = pytest.mark.skipif(not have_compilers(), reason="needs gcc, g++ and binutils")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("elf")


def _file_offset(path: Path, vaddr: int) -> int:
    """The oracle for vaddr -> file offset: pyelftools' own view of the PT_LOAD headers."""
    with open(path, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] == "PT_LOAD" and 0 <= vaddr - seg["p_vaddr"] < seg["p_filesz"]:
                return int(vaddr - seg["p_vaddr"] + seg["p_offset"])
    raise AssertionError(f"{vaddr:#x} in no segment")


def test_every_sized_function_covers_exactly_its_bytes(built: Path) -> None:
    lib = build_library(built)
    image = load_elf(str(lib))
    assert image.source == "symtab"
    truth = nm_symbols(lib)
    checked = 0
    for name, (vaddr, size) in truth.items():
        if size == 0 or name.startswith("_"):
            continue
        offset = _file_offset(lib, vaddr)
        assert image.symbol_at(offset) == name
        assert image.symbol_at(offset + size - 1) == name
        assert image.symbol_at(offset + size) != name
        checked += 1
    assert checked >= 3  # zt_lib_fn, zt_lib_static, zt_report at least
    assert {"zt_lib_fn", "zt_lib_static", "zt_report"} <= set(truth)


def test_a_symbol_without_size_runs_to_the_next_symbol(built: Path) -> None:
    lib = build_library(built, "libzt_asm.so")
    truth = nm_symbols(lib)
    start, size = truth["zt_asm_label"]
    assert size == 0
    image = load_elf(str(lib))
    nxt = min(v for v, _ in truth.values() if v > start)
    assert image.symbols.lookup(start + 4) == "zt_asm_label"  # the 5th byte: ret
    assert image.symbols.lookup(nxt - 1) == "zt_asm_label"
    assert image.symbols.lookup(nxt) != "zt_asm_label"


def test_stripped_library_keeps_only_its_exports(built: Path) -> None:
    full = build_library(built, "libzt_full.so")
    lib = stripped(full, "libzt_stripped.so")
    image = load_elf(str(lib))
    assert image.source == "dynsym"
    truth = nm_symbols(full)
    assert image.symbol_at(_file_offset(full, truth["zt_lib_fn"][0])) == "zt_lib_fn"
    assert image.symbol_at(_file_offset(full, truth["zt_lib_static"][0])) is None


def test_executables_position_dependent_and_pie(built: Path) -> None:
    for name, flags in (("zt_nopie", ("-no-pie",)), ("zt_pie", ("-pie", "-fPIE"))):
        exe = build_target(built, name, *flags)
        image = load_elf(str(exe))
        truth = nm_symbols(exe)
        for fn in ("zt_alpha", "zt_beta", "main"):
            vaddr = truth[fn][0]
            assert image.vaddr_of(_file_offset(exe, vaddr)) == vaddr
            assert image.symbol_at(_file_offset(exe, vaddr) + 1) == fn
        # A stripped executable has nothing for its own functions: no guessing.
        bare = load_elf(str(stripped(exe, name + "_stripped")))
        assert bare.symbol_at(_file_offset(exe, truth["zt_alpha"][0])) is None
    assert load_elf(str(built / "zt_nopie")).vaddr_of(10**12) is None


def test_cpp_names_are_demangled(built: Path) -> None:
    lib = build_library(built, "libzt_cpp.so", CPP_LIB, cpp=True)
    image = load_elf(str(lib))
    vaddr = next(v for name, (v, _) in nm_symbols(lib).items() if "5twice" in name)
    assert image.symbol_at(_file_offset(lib, vaddr)) == "zt::twice(int)"


def test_build_id_and_debug_file(built: Path) -> None:
    lib = build_library(built, "libzt_split.so")
    truth = nm_symbols(lib)
    before = load_elf(str(lib))
    assert before.build_id and len(before.build_id) == 40
    debug_root = built / "debug"
    bid = before.build_id
    split_debug(lib, debug_root / ".build-id" / bid[:2] / (bid[2:] + ".debug"))
    static_offset = _file_offset(lib, truth["zt_lib_static"][0])
    assert load_elf(str(lib)).symbol_at(static_offset) is None  # stripped now
    counts: Counter[str] = Counter()
    cache = ElfCache(counts, debug_root=str(debug_root))
    key = file_key(lib.stat())
    image = cache.get(key, str(lib), str(lib))
    assert image is not None and image.symbol_at(static_offset) == "zt_lib_static"
    assert cache.get(key, str(lib), str(lib)) is image
    assert counts == Counter({"elf_loaded": 1, "debug_file_used": 1})


def test_cache_is_bounded_and_counts_failures(built: Path) -> None:
    counts: Counter[str] = Counter()
    cache = ElfCache(counts, max_files=2)
    libs = [build_library(built, f"libzt_lru{i}.so") for i in range(3)]
    for lib in libs:
        assert cache.get(file_key(lib.stat()), str(lib), str(lib)) is not None
    assert len(cache) == 2 and counts["elf_evicted"] == 1
    text = built / "not_elf.txt"
    text.write_text("hello")
    assert cache.get(file_key(text.stat()), str(text), str(text)) is None
    assert cache.get(file_key(text.stat()), str(text), str(text)) is None  # remembered
    assert counts["bad_elf"] == 1
    gone = built / "gone.so"
    assert cache.get(file_key(text.stat())._replace(inode=1), str(gone), str(gone)) is None
    assert counts["unreadable_file"] == 1
    tiny = ElfCache(counts, max_bytes=1)
    for lib in libs:
        tiny.get(file_key(lib.stat()), str(lib), str(lib))
    assert len(tiny) == 1  # the newest always stays


@pytest.mark.parametrize("data", [b"", b"hello world", b"\x7fELF\x02\x01\x01" + b"\0" * 9])
def test_not_an_elf_raises_elf_error(data: bytes) -> None:
    with pytest.raises(ElfError):
        parse_elf(io.BytesIO(data))


def test_truncated_elf_raises_elf_error(built: Path) -> None:
    lib = build_library(built, "libzt_cut.so")
    data = lib.read_bytes()
    for cut in (64, 1000, len(data) // 2):
        try:
            image = parse_elf(io.BytesIO(data[:cut]))
        except ElfError:
            continue
        # Headers may survive a cut; then whatever is left must still be consistent.
        assert image.symbol_at(0) is None or isinstance(image.symbol_at(0), str)


def _note(name: bytes, kind: int, desc: bytes) -> bytes:
    def pad(b: bytes) -> bytes:
        return b + b"\0" * (-len(b) % 4)

    return struct.pack("<III", len(name), len(desc), kind) + pad(name) + pad(desc)


def test_build_id_among_other_notes() -> None:
    notes = _note(b"GNU\0", 1, b"\0" * 16) + _note(b"GNU\0", 3, bytes(range(20)))
    assert parse_build_id(notes, True) == bytes(range(20)).hex()
    assert parse_build_id(_note(b"XYZ\0", 3, b"\x01\x02"), True) is None
    assert parse_build_id(notes[:-4], True) is None  # truncated descriptor
    assert parse_build_id(b"", True) is None
    assert parse_debuglink(b"libc.so.6.debug\0\0\0\x12\x34\x56\x78") == "libc.so.6.debug"
    assert parse_debuglink(b"\0abc") is None


@pytest.fixture(scope="module")
def small_lib(built: Path) -> bytes:
    return build_library(built, "libzt_fuzz.so").read_bytes()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8))
def test_a_corrupt_file_is_an_elf_error_or_a_usable_image(
    small_lib: bytes, flips: list[tuple[int, int]]
) -> None:
    data = bytearray(small_lib)
    # Hit the headers most: the ELF header, and the section header table at the end.
    for where, value in flips:
        spot = where % 64 if where % 3 == 0 else len(data) - 1 - where % 2048
        data[spot] = value
    try:
        image = parse_elf(io.BytesIO(bytes(data)))
    except ElfError:
        return
    for offset in (0, 0x1000, 0x1100, len(data) // 2):
        found = image.symbol_at(offset)
        assert found is None or (isinstance(found, str) and ";" not in found)


def test_minidebuginfo_names_the_local_functions(built: Path) -> None:
    """Fedora's scheme: a stripped file carries an xz-compressed ELF with the symbols its
    .dynsym lacks, in .gnu_debugdata."""
    full = build_library(built, "libzt_mini_full.so")
    truth = nm_symbols(full)
    debug = built / "mini.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    packed = built / "mini.debug.xz"
    packed.write_bytes(lzma.compress(debug.read_bytes()))
    lib = stripped(full, "libzt_mini.so")
    subprocess.run(["objcopy", "--add-section", f".gnu_debugdata={packed}", str(lib)], check=True)
    image = load_elf(str(lib))
    assert image.source == "minidebuginfo"
    for name in ("zt_lib_static", "zt_lib_fn", "zt_report"):
        assert image.symbol_at(_file_offset(full, truth[name][0]) + 1) == name
    # A broken payload is ignored, not fatal: the .dynsym names remain.
    packed.write_bytes(b"\xfd7zXZ\x00garbage")
    broken = stripped(full, "libzt_mini_broken.so")
    subprocess.run(
        ["objcopy", "--add-section", f".gnu_debugdata={packed}", str(broken)], check=True
    )
    image = load_elf(str(broken))
    assert image.source == "dynsym"
    assert image.symbol_at(_file_offset(full, truth["zt_lib_fn"][0])) == "zt_lib_fn"


ALIASES_C = r"""
__attribute__((noinline)) int __zt_impl(int x) { return x * 11; }
int zt_public(int x) __attribute__((weak, alias("__zt_impl")));
int _zt_internal(int x) __attribute__((alias("__zt_impl")));
"""


def test_aliases_give_the_plainest_name(built: Path) -> None:
    lib = build_library(built, "libzt_alias.so", ALIASES_C)
    truth = nm_symbols(lib)
    assert truth["zt_public"][0] == truth["__zt_impl"][0] == truth["_zt_internal"][0]
    image = load_elf(str(lib))
    assert image.symbol_at(_file_offset(lib, truth["zt_public"][0]) + 2) == "zt_public"
