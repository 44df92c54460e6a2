"""CPython process facts: maps parsing, interpreter detection, and the per-version offsets
checked against live interpreters (each finds its own fields by value, see
python_layout_probe.py)."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from zerotrace_collector.python_procs import (
    DEBUG_OFFSETS_SIZE,
    LAYOUTS,
    NO_CFRAME,
    NO_SHIM,
    OWNED_BY_GENERATOR,
    TID_NATIVE,
    TID_PTHREAD,
    defined_symbol,
    inspect,
    interpreter_module,
    layout_from_debug_offsets,
    parse_maps,
    pid_namespace,
    process_start_time,
)

pytestmark = pytest.mark.unit

PROBE = Path(__file__).with_name("python_layout_probe.py")
REPO = Path(__file__).resolve().parents[2]

STATIC_MAPS = (
    "00400000-0041f000 r--p 00000000 fe:00 1234     /usr/bin/python3.11\n"
    "0041f000-006d2000 r-xp 0001f000 fe:00 1234     /usr/bin/python3.11\n"
    "01d5b000-01e9c000 rw-p 00000000 00:00 0        [heap]\n"
    "7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n"  # anonymous: a trailing space
    "7f1000000000-7f1000028000 r--p 00000000 fe:00 99   /usr/lib/x86_64-linux-gnu/libc.so.6\n"
)

SHARED_MAPS = """\
5558612c9000-5558612ca000 r--p 00000000 fe:00 73259     /opt/py/bin/python3.12
7f3fe2c00000-7f3fe2d06000 r--p 00000000 fe:00 73482     /opt/py/lib/libpython3.12.so.1.0
7f3fe2d06000-7f3fe2f79000 r-xp 00106000 fe:00 73482     /opt/py/lib/libpython3.12.so.1.0
"""


def test_parse_maps_keeps_file_mappings_only() -> None:
    maps = parse_maps(STATIC_MAPS)
    assert [m.path for m in maps] == ["/usr/bin/python3.11"] * 2 + [
        "/usr/lib/x86_64-linux-gnu/libc.so.6"
    ]
    assert maps[1].start == 0x41F000 and maps[1].offset == 0x1F000 and maps[1].inode == 1234


def test_interpreter_of_a_static_build() -> None:
    assert interpreter_module(parse_maps(STATIC_MAPS)) == ("/usr/bin/python3.11", (3, 11), 0x400000)


def test_interpreter_of_a_shared_build_is_the_library() -> None:
    found = interpreter_module(parse_maps(SHARED_MAPS))
    assert found == ("/opt/py/lib/libpython3.12.so.1.0", (3, 12), 0x7F3FE2C00000)


def test_no_interpreter() -> None:
    maps = "7f1000000000-7f1000028000 r--p 00000000 fe:00 99   /usr/bin/bash\n"
    assert interpreter_module(parse_maps(maps)) is None
    lookalike = "7f1000000000-7f1000028000 r--p 00000000 fe:00 99   /usr/bin/python-config\n"
    assert interpreter_module(parse_maps(lookalike)) is None


def test_start_time_survives_odd_comm() -> None:
    stat = "4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 0 0"
    assert process_start_time(stat) == 987654


def test_pack_matches_the_c_struct() -> None:
    walker = LAYOUTS[(3, 13)].walker
    packed = walker.pack(0x1122334455667788, (0x400004, 4026532000))
    assert len(packed) == 8 + 22 * 4 + 16  # struct zt_py_offsets: no padding
    fields = struct.unpack("<Q22I2Q", packed)
    assert fields[0] == 0x1122334455667788
    assert fields[5] == walker.tstate_frame and fields[6] == NO_CFRAME
    assert fields[-2:] == (0x400004, 4026532000)
    # zt_python_task: the window (previous at 8, the owner byte 70 in the word at 64: its 7th
    # byte), the owner value of a generator's frame, co_flags
    assert fields[-13] == TID_NATIVE
    assert fields[-12:-4] == (8, 64, 0, 56, 8, 56, OWNED_BY_GENERATOR, 48)
    assert fields[-4:-2] == (208, 0)  # PyThreadState.context, then the reserved word
    legacy = struct.unpack("<Q22I2Q", LAYOUTS[(3, 10)].walker.pack(1))
    # f_back at 24, f_gen (the whole word) at 88: set in a generator's frame
    assert legacy[-13] == TID_PTHREAD and legacy[-12:-4] == (24, 72, 0, 64, 0, 0, 0, 36)
    assert legacy[-4] == 240


@pytest.mark.parametrize("version", sorted(LAYOUTS))
def test_the_task_window_holds_both_fields_of_every_layout(version: tuple[int, int]) -> None:
    w = LAYOUTS[version].walker
    start, size, prev_at, gen_at, above, below = w.task_window()
    assert 0 < size <= 72 and start + prev_at == w.frame_previous
    field = w.gen_field or w.frame_owner
    word = sum(b << (8 * i) for i, b in enumerate(range(1, 9)))  # bytes 1..8, little-endian
    assert ((word << above) & (2**64 - 1)) >> below == int.from_bytes(
        word.to_bytes(8, "little")[field - start - gen_at :][: w.gen_size], "little"
    )


def test_a_layout_whose_fields_lie_apart_gets_no_task_keys() -> None:
    far = dataclasses.replace(LAYOUTS[(3, 12)].walker, gen_field=400, gen_size=8)
    assert far.task_window() == (0, 0, 0, 0, 0, 0)


def test_pid_namespace_in_kernel_encoding() -> None:
    assert pid_namespace(os.makedev(0, 4), 0xEFFFFFFC) == (0, 0)  # the initial one
    assert pid_namespace(os.makedev(0, 4), 4026532999) == (4, 4026532999)
    assert pid_namespace(os.makedev(259, 3), 5) == ((259 << 20) | 3, 5)


def test_inspect_this_interpreter() -> None:
    proc = inspect(os.getpid())
    if sys.version_info[:2] not in LAYOUTS:
        assert proc is None
        return
    assert proc is not None and proc.version == sys.version_info[:2]
    # _PyRuntime's address, as the interpreter itself knows it.
    import ctypes

    runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    assert proc.runtime_addr == runtime


def test_inspect_gone_process() -> None:
    assert inspect(2**22 + 12345) is None


def interpreters() -> list[str]:
    found = {os.path.realpath(sys.executable)}
    patterns = [
        "/usr/bin/python3.1[0123]",
        str(REPO / ".venv/other-python/bin/python3.1[0123]"),
        "/root/.pyenv/versions/3.1[0123].*/bin/python3.1[0123]",
    ]
    for pattern in patterns:
        found.update(os.path.realpath(p) for p in glob.glob(pattern))
    return sorted(found)


@pytest.mark.parametrize("python", interpreters())
def test_layout_table_matches_the_live_interpreter(python: str) -> None:
    out = subprocess.run([python, str(PROBE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    layout = LAYOUTS[tuple(seen["version"])]
    w, c = layout.walker, layout.code
    assert min(seen["runtime_interp_head"]) == w.runtime_interp_head
    assert w.interp_threads_head in seen["interp_threads_head"]
    assert w.tstate_next in seen["tstate_next"]
    assert w.tstate_native_tid in seen["tstate_native_tid"]
    assert w.tstate_context in seen["tstate_context"]
    if w.cframe_current == NO_CFRAME:
        assert w.tstate_frame in seen["tstate_frame_direct"]
    else:
        assert [w.tstate_frame, w.cframe_current] in seen["tstate_frame_via_cframe"]
    assert w.frame_code in seen["frame_code"]
    assert w.frame_previous in seen["frame_previous"]
    assert w.frame_instr in seen["frame_instr"]
    assert c.filename in seen["code_filename"]
    assert c.qualname in seen["code_qualname"]
    assert c.linetable in seen["code_linetable"]
    assert c.firstlineno in seen["code_firstlineno"]
    if c.lasti_index:  # 3.10: no owner byte, no bytecode pointer, threads by pthread_self()
        assert w.owner_shim == NO_SHIM and w.tid_match == TID_PTHREAD
    else:
        assert w.frame_owner in seen["frame_owner"]
        assert c.code_adaptive in seen["code_adaptive"]
        assert w.tid_match == TID_NATIVE
    assert [c.ascii_data] == seen["ascii_data"] and [c.compact_data] == seen["compact_data"]
    # The task-key walk: a generator's frame, and its code's flags.
    assert w.code_flags in seen["code_flags"]
    if c.lasti_index:
        assert w.gen_field in seen["frame_gen"] and (w.gen_size, w.gen_value) == (8, 0)
    else:  # the owner byte found above holds 1 in a generator's frame
        assert w.gen_field == 0 and (w.gen_size, w.gen_value) == (1, OWNED_BY_GENERATOR)
    # ZT_PY_CO_ASYNC: CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR, not CO_GENERATOR
    coroutine, iterable, async_gen, generator = seen["co_async_flags"]
    assert coroutine | iterable | async_gen == 0x380 and not generator & 0x380


DUMP_RUNTIME = (
    "import ctypes, sys\n"
    "at = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, '_PyRuntime'))\n"
    "sys.stdout.write(ctypes.string_at(at, int(sys.argv[1])).hex())\n"
)


def runtime_head(python: str) -> bytes:
    out = subprocess.run(
        [python, "-c", DUMP_RUNTIME, str(DEBUG_OFFSETS_SIZE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return bytes.fromhex(out.stdout)


@pytest.mark.parametrize("python", [p for p in interpreters() if p.endswith("3.13")] or ["none"])
def test_debug_offsets_of_a_live_313(python: str) -> None:
    if python == "none":
        pytest.skip("no CPython 3.13 here: run scripts/other-python.sh")
    assert layout_from_debug_offsets(runtime_head(python)) == LAYOUTS[(3, 13)]


def test_debug_offsets_refused_unless_a_313_gil_build() -> None:
    good = bytearray(b"xdebugpy" + bytes(DEBUG_OFFSETS_SIZE - 8))
    struct.pack_into("<Q", good, 8, 0x030D00F0)
    assert layout_from_debug_offsets(bytes(good)) is not None
    free_threaded = bytearray(good)
    struct.pack_into("<Q", free_threaded, 16, 1)
    assert layout_from_debug_offsets(bytes(free_threaded)) is None
    newer = bytearray(good)
    struct.pack_into("<Q", newer, 8, 0x030E00F0)
    assert layout_from_debug_offsets(bytes(newer)) is None
    assert layout_from_debug_offsets(b"xdebugpz" + bytes(good[8:])) is None
    assert layout_from_debug_offsets(bytes(good[:100])) is None


def test_a_defined_symbol_is_found_by_a_scan_of_the_raw_table() -> None:
    strtab = b"\0_PyRuntime\0other\0"
    row64 = struct.Struct("<IBBHQQ")  # name, info, other, shndx, value, size
    undefined = row64.pack(1, 0x11, 0, 0, 0, 0)  # an import of it: section 0, value 0
    other = row64.pack(12, 0x11, 0, 20, 0x1000, 8)
    defined = row64.pack(1, 0x11, 0, 20, 0xA5B000, 0x4000)
    assert defined_symbol(undefined + other + defined, strtab, b"_PyRuntime") == 0xA5B000
    assert defined_symbol(undefined + other, strtab, b"_PyRuntime") is None
    assert defined_symbol(defined, b"\0_PyRuntimeX\0", b"_PyRuntime") is None
    row32 = struct.Struct("<IIIBBH")  # name, value, size, info, other, shndx
    assert defined_symbol(row32.pack(1, 0x8000, 4, 0x11, 0, 3), strtab, b"_PyRuntime", 32) == 0x8000
