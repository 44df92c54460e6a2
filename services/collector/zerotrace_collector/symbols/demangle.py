"""C++ names in readable form, through the C++ runtime's own ``__cxa_demangle``.

Optional by design: where libstdc++ cannot be loaded the mangled name is returned
unchanged, which is still a correct (if ugly) frame. Each distinct name is demangled once:
the table of a library decodes only the names its samples hit, and those repeat.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["demangle"]


class _Runtime:
    def __init__(self) -> None:
        self.fn: ctypes._NamedFuncPointer | None = None
        self.free: ctypes._NamedFuncPointer | None = None
        name = ctypes.util.find_library("stdc++")
        if name is None:
            return
        try:
            lib = ctypes.CDLL(name)
            libc = ctypes.CDLL(None)
            fn = getattr(lib, "__cxa_demangle")  # not lib.__x: a class body would mangle it
            free = libc.free
        except (OSError, AttributeError):
            return
        # char* __cxa_demangle(const char* mangled, char* buf, size_t* len, int* status);
        # the result is malloc'd and ours to free.
        fn.restype = ctypes.c_void_p
        fn.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int),
        ]
        free.argtypes = [ctypes.c_void_p]
        free.restype = None
        self.fn, self.free = fn, free


_RUNTIME: _Runtime | None = None


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The demangled form of an Itanium C++ name (``_Z...``); any other name unchanged."""
    global _RUNTIME
    if not name.startswith("_Z"):
        return name
    if _RUNTIME is None:
        _RUNTIME = _Runtime()
    fn, free = _RUNTIME.fn, _RUNTIME.free
    if fn is None or free is None:
        return name
    status = ctypes.c_int(-1)
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        return name
    ptr = fn(raw, None, None, ctypes.byref(status))
    if not ptr:
        return name
    try:
        if status.value != 0:
            return name
        value = ctypes.string_at(ptr)
    finally:
        free(ptr)
    return value.decode("utf-8", "replace")
