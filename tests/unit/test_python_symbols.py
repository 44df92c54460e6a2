"""Python frame names: the location-table decoder against the interpreters' own co_lines(),
and code objects read from a live process's memory (this one)."""

from __future__ import annotations

import dis
import glob
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from zerotrace_collector.python_procs import PythonProcess, inspect
from zerotrace_collector.python_symbols import (
    PythonSymbols,
    line_for,
    line_for_pairs,
    python_frame,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

# Run by other interpreters: (linetable, firstlineno, [(code unit, line)]) of many functions.
DUMP = """
import dis, json, sys, json.decoder, threading, argparse
out = []
for mod in (json.decoder, threading, argparse):
    for obj in vars(mod).values():
        for fn in [obj, *vars(obj).values()] if isinstance(obj, type) else [obj]:
            code = getattr(fn, "__code__", None)
            if code is None:
                continue
            lines = {}
            for start, end, line in code.co_lines():
                for off in range(start, end, 2):
                    lines[off // 2] = line if line is not None else code.co_firstlineno
            out.append([code.co_linetable.hex(), code.co_firstlineno, sorted(lines.items())])
print(json.dumps({"version": sys.version_info[:2], "codes": out}))
"""


def other_interpreters() -> list[str]:
    found = glob.glob(str(REPO / ".venv/other-python/bin/python3.1[23]"))
    found += glob.glob("/root/.pyenv/versions/3.1[0123].*/bin/python3.1[0123]")
    return sorted(set(found)) or ["none"]


@pytest.mark.parametrize("python", [sys.executable, *other_interpreters()])
def test_line_table_matches_co_lines(python: str) -> None:
    if python == "none":
        pytest.skip("no other CPython here: run scripts/other-python.sh")
    out = subprocess.run([python, "-c", DUMP], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    dumped = json.loads(out.stdout)
    codes = dumped["codes"]
    decode = line_for_pairs if tuple(dumped["version"]) == (3, 10) else line_for
    assert len(codes) > 100
    for table, first, lines in codes:
        for unit, line in lines:
            assert decode(bytes.fromhex(table), first, unit) == line


def test_before_the_first_instruction_is_the_first_line() -> None:
    assert line_for(b"", 7, -1) == 7
    assert line_for_pairs(b"\x04\x01", 7, -1) == 7
    assert line_for(b"\xff", 7, 3) == 7  # truncated table: no crash, first line


def test_pairs_of_310() -> None:
    # Bytes 0-3 on line 8, 4-5 with no line (-128), then an empty range moving to line 10,
    # bytes 6-9 on line 10 (the line deltas add up); an odd trailing byte is ignored.
    table = bytes([4, 1, 2, 0x80, 0, 2, 4, 0, 9])
    assert [line_for_pairs(table, 7, unit) for unit in range(6)] == [8, 8, 7, 10, 10, 7]


def test_frame_text_has_no_semicolon() -> None:
    from zerotrace_collector.python_symbols import CodeInfo

    assert python_frame(CodeInfo("a;b", "/x;y.py", 1, b""), 3) == "py:a:b (/x:y.py:3)"


class Outer:
    def método(self) -> int:
        x = 1
        return x + 1


def me() -> PythonProcess:
    proc = inspect(os.getpid())
    if proc is None:
        pytest.skip(f"this interpreter ({sys.version_info[:2]}) is not a supported CPython")
    return proc


def instr_at(proc: PythonProcess, code: types.CodeType, offset: int) -> int:
    return id(code) + proc.layout.code.code_adaptive + offset


def test_reads_code_objects_of_a_live_process() -> None:
    proc, names = me(), PythonSymbols()
    code = Outer.método.__code__
    ret = next(i for i in dis.get_instructions(code) if i.opname == "RETURN_VALUE")
    frame = names.frame(proc, id(code), instr_at(proc, code, ret.offset))
    assert frame == f"py:Outer.método ({__file__}:{code.co_firstlineno + 2})"
    # Cached: a second lookup reads no memory (the process could be gone by then).
    os.close(names._fds.pop(proc.pid)[1])
    assert names.frame(proc, id(code), instr_at(proc, code, 0)) is not None
    names.close()


def test_unreadable_code_and_gone_process_are_counted() -> None:
    proc, names = me(), PythonSymbols()
    assert names.frame(proc, 8, 8) is None
    assert names.counts["py_code_unreadable"] == 1
    gone = PythonProcess(2**22 + 7, 1, proc.version, proc.module, 0, proc.layout)
    assert names.frame(gone, id(Outer.método.__code__), 0) is None
    assert names.counts["py_process_gone"] == 1
    names.close()


def test_reused_pid_is_read_again() -> None:
    proc, names = me(), PythonSymbols()
    code = Outer.método.__code__
    assert names.frame(proc, id(code), instr_at(proc, code, 0)) is not None
    # Same pid, another start time: the old entry must not answer for the new process.
    other = PythonProcess(proc.pid, proc.start_time + 1, proc.version, proc.module, 0, proc.layout)
    assert (proc.pid, other.start_time, id(code)) not in names._codes
    assert names.frame(other, id(code), instr_at(proc, code, 0)) is not None
    assert (proc.pid, proc.start_time, id(code)) not in names._codes
    names.close()


def test_the_code_cache_is_bounded_in_bytes() -> None:
    proc, names = me(), PythonSymbols(max_code_bytes=1024)
    codes = [f.__code__ for f in (Outer.método, test_frame_text_has_no_semicolon, me, instr_at)]
    codes += [
        c for c in json.__dict__.values() if isinstance(c, types.FunctionType) for c in [c.__code__]
    ]
    for code in codes:
        assert names.frame(proc, id(code), instr_at(proc, code, 0)) is not None
    assert 0 < names._code_bytes <= 1024 and len(names._codes) < len(codes)
    names.close()
