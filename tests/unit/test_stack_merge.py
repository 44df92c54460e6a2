"""The merge rule: thread, Python frames, the native frames past the interpreter, kernel."""

from __future__ import annotations

import pytest

from zerotrace_collector.stack_merge import frame_module, merge_stack

pytestmark = pytest.mark.unit

PY = ["py:main (/app.py:10)", "py:call_native (/app.py:20)"]
NATIVE = [  # leaf first, as the kernel walks it
    "native:__memcmp_evex_movbe [libc.so.6]",
    "native:ffi_call_unix64 [libffi.so.8]",
    "native:_ctypes_callproc [_ctypes.cpython-311-x86_64-linux-gnu.so]",
    "native:_PyObject_MakeTpCall [python3.11]",
    "native:[unknown]+0x7f00deadbeef",
]
KERNEL = ["kernel:__schedule", "kernel:schedule", "kernel:do_syscall_64"]


def test_python_then_native_past_the_interpreter_then_kernel() -> None:
    assert merge_stack(42, PY, NATIVE, KERNEL, "python3.11") == [
        "thread:42",
        *PY,
        "native:_ctypes_callproc [_ctypes.cpython-311-x86_64-linux-gnu.so]",
        "native:ffi_call_unix64 [libffi.so.8]",
        "native:__memcmp_evex_movbe [libc.so.6]",
        "kernel:do_syscall_64",
        "kernel:schedule",
        "kernel:__schedule",
    ]


def test_leaf_in_the_interpreter_keeps_no_native_frame() -> None:
    native = ["native:_PyEval_EvalFrameDefault [python3.11]", "native:libc.so.6+0x1234"]
    assert merge_stack(1, PY, native, [], "python3.11") == ["thread:1", *PY]


def test_unmapped_frame_past_the_leaf_ends_the_native_part() -> None:
    native = [
        "native:memcmp [libc.so.6]",
        "native:[unknown]+0x7f85d476d9e0",
        "native:x [libffi.so.8]",
    ]
    assert merge_stack(1, PY, native, [], "python3.11") == [
        "thread:1",
        *PY,
        "native:memcmp [libc.so.6]",
    ]


def test_no_python_frames_keeps_the_whole_native_stack() -> None:
    assert merge_stack(7, [], NATIVE, KERNEL[:1], "python3.11") == [
        "thread:7",
        *reversed(NATIVE),
        "kernel:__schedule",
    ]
    assert merge_stack(7, [], NATIVE[:2], [], None) == ["thread:7", *reversed(NATIVE[:2])]


def test_semicolons_never_survive() -> None:
    assert merge_stack(1, ["py:a;b (/f.py:1)"], [], [], None) == ["thread:1", "py:a:b (/f.py:1)"]


def test_frame_module() -> None:
    assert frame_module("native:foo [libfoo.so]") == "libfoo.so"
    assert frame_module("native:libfoo.so+0x10") == "libfoo.so"
    assert frame_module("native:[unknown]+0x10") == "[unknown]"
    assert frame_module("kernel:schedule") is None
    assert frame_module("py:f (/a.py:1)") is None


def test_return_addresses_are_named_by_their_call() -> None:
    from zerotrace_collector.stack_merge import call_sites

    # The leaf is where the CPU was; the others are just past their calls.
    assert call_sites([0x1000, 0x2005, 0x3010]) == [0x1000, 0x2004, 0x300F]
    assert call_sites([]) == [] and call_sites([0, 0]) == [0, 0]
