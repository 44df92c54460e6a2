"""How many bytes a long-lived parser holds: the objects reachable from it, summed.

Why this measure, not tracemalloc: tracemalloc slows every allocation of the run several
times (a million inputs would take hours) and counts the fuzzer's own garbage too; walking
the parser's object graph now and then costs nothing between samples and counts exactly what
the parser retains (its buffers, tables, queues), which is what a documented limit bounds.
Classes, modules and functions are shared code, not state, and are not counted.
"""

from __future__ import annotations

import gc
import sys
import types

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def retained_bytes(root: object) -> int:
    """sys.getsizeof summed over every object reachable from *root*, each counted once."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SHARED):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total
