"""One root-first stack from the three a sample carries: Python frames, native user frames and
kernel frames (pure).

Why a rule is needed: a CPython built without frame pointers (Debian's python3.11, most
distribution builds) lets the kernel's user-stack walk see only the leaf end of the native
stack: the frames up to the first interpreter function are right, what lies past it is
garbage or missing. The Python frames, walked from the interpreter's own state, tell what the
interpreter frames were doing. So:

    thread:<tid>
    py:... (root -> leaf)                      the Python call chain
    native:... (innermost interpreter -> leaf) what that Python code called into: frames of
                                               modules other than the interpreter (ctypes and
                                               libffi, C extensions, libc, libcudart)
    kernel:... (-> leaf)                       the system call or fault underneath

The native part is cut at the first frame (counting from the leaf) that belongs to the
interpreter module itself (``python3.11`` or ``libpython3.12.so.1.0``): everything from there
rootwards is the evaluation loop the Python frames already stand for, or garbage. It is also
cut at the first frame past the leaf that no mapped file covers (``native:[unknown]+0x...``):
in a sample of a Python thread that is the frame-pointer walk reading a stale register, not
code (a JIT would be the exception, and CPython 3.10-3.13 has none by default). A thread with
no Python frames (a native thread, or not a Python process) keeps its whole native stack.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

__all__ = ["frame_module", "merge_stack"]

# 'native:<symbol> [<module>]' or 'native:<module>+0x<offset>'
_WITH_SYMBOL: Final = re.compile(r"^native:.* \[([^\]]+)\]$")
_NO_SYMBOL: Final = re.compile(r"^native:(.+)\+0x[0-9a-fA-F]+$")
_UNMAPPED: Final = "native:[unknown]+0x"


def call_sites(addresses: Sequence[int]) -> list[int]:
    """Leaf first in, the same out, with every frame but the leaf moved one byte back: those
    are return addresses, just past their call, and a call that ends a function would be named
    after the next one."""
    return [a if i == 0 or a == 0 else a - 1 for i, a in enumerate(addresses)]


def frame_module(frame: str) -> str | None:
    """The module basename a native frame names, or None (not native, or unknown module)."""
    m = _WITH_SYMBOL.match(frame) or _NO_SYMBOL.match(frame)
    return m.group(1) if m else None


def merge_stack(
    tid: int,
    python_root_first: Sequence[str],
    native_leaf_first: Sequence[str],
    kernel_leaf_first: Sequence[str],
    interpreter_module: str | None,
) -> list[str]:
    """The merged frames, root first. *interpreter_module* is the basename of the module that
    runs the interpreter loop (None when the process is not a known CPython)."""
    native = list(native_leaf_first)
    if python_root_first and interpreter_module:
        for i, frame in enumerate(native):
            if frame_module(frame) == interpreter_module or (i and frame.startswith(_UNMAPPED)):
                native = native[:i]
                break
    out = [f"thread:{tid}", *python_root_first]
    out.extend(reversed(native))
    out.extend(reversed(kernel_leaf_first))
    return [f.replace(";", ":") for f in out]
