"""Run INSIDE a CPython 3.10+ interpreter: find, in its own memory, the struct offsets that
python_procs.LAYOUTS hard-codes, by the value each field must hold, and print them as JSON
(each field: the offsets where the expected value was found; the table's must be among them).

Reads memory at addresses the interpreter itself handed out (via ctypes and id()), in bounded
ranges inside the objects, and follows a pointer only into a readable mapping of
/proc/self/maps, so a wrong guess here cannot crash the interpreter.
The frame checks run in one function body without calling Python functions: a call would
push a frame and move tstate's current frame away from the one being checked.

3.10 differs where the walker does (python_procs.LAYOUTS): the thread is known by thread_id
(pthread_self(), threading.get_ident()), the frame is the PyFrameObject itself, its instruction
is the int f_lasti (code units), co_name stands for co_qualname, and there is no owner byte.
"""

import contextvars
import ctypes
import inspect
import json
import sys
import threading
import types
from collections.abc import Iterator

api = ctypes.pythonapi
for _name in (
    "PyThreadState_Get",
    "PyInterpreterState_Get",
    "PyInterpreterState_Main",
    "PyInterpreterState_ThreadHead",
    "PyThreadState_Next",
):
    getattr(api, _name).restype = ctypes.c_void_p
api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
U64 = ctypes.c_uint64.from_address


def readable_ranges() -> list[tuple[int, int]]:
    ranges = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            if perms.startswith("r"):
                lo, hi = (int(x, 16) for x in span.split("-"))
                ranges.append((lo, hi))
    return ranges


READABLE = readable_ranges()


def find(base: int, value: int, limit: int) -> list[int]:
    return [o for o in range(0, limit, 8) if U64(base + o).value == value]


out: dict[str, object] = {}
tstate = api.PyThreadState_Get()
interp = api.PyInterpreterState_Get()
runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
out["runtime_interp_head"] = find(runtime, api.PyInterpreterState_Main(), 8192)
LEGACY = sys.version_info < (3, 11)
# The value the walker matches a thread by.
thread_key = threading.get_ident() if LEGACY else threading.get_native_id()
out["tstate_native_tid"] = find(tstate, thread_key, 512)
# PyThreadState.context: the context a Context.run() entered.
entered = contextvars.Context()
out["tstate_context"] = entered.run(lambda: find(api.PyThreadState_Get(), id(entered), 512))
stop = threading.Event()
other = threading.Thread(target=stop.wait)
other.start()
head = api.PyInterpreterState_ThreadHead(interp)
out["interp_threads_head"] = find(interp, head, 16384)
out["tstate_next"] = find(head, api.PyThreadState_Next(head), 512)
stop.set()
other.join()


class Holder:
    def method(
        self,
    ) -> tuple[int, int, types.CodeType, list[int], list[list[int]], list[int], list[int]]:
        frame = sys._getframe()
        if LEGACY:  # the PyFrameObjects themselves
            iframe, caller = id(frame), id(frame.f_back)
        else:  # PyFrameObject.f_frame (3.11+)
            iframe = U64(id(frame) + 24).value
            caller = U64(id(frame.f_back) + 24).value
        direct: list[int] = []
        via: list[list[int]] = []
        for o in range(0, 512, 8):
            p = U64(tstate + o).value
            if p == iframe:
                direct.append(o)
            elif p % 8 == 0 and any(lo <= p and p + 16 <= hi for lo, hi in READABLE):
                for k in (0, 8):
                    outside = p - k < tstate or p - k >= tstate + 512  # not tstate itself
                    if outside and U64(p + k).value == iframe:
                        via.append([o, k])
        code = frame.f_code
        # 3.10: f_lasti only grows in straight code, so while the words are read it lies
        # between what it was before and after (Python shows it in bytes, it keeps code units).
        before = frame.f_lasti // 2
        head_bytes = [U64(iframe + o).value for o in range(0, 128 if LEGACY else 80, 8)]
        after = frame.f_lasti // 2
        lasti = [
            i * 8
            for i, w in enumerate(head_bytes)
            if LEGACY and before <= (w & 0xFFFFFFFF) <= after
        ]
        return iframe, caller, code, direct, via, head_bytes, lasti


iframe, caller, code, direct, via, words, lasti_at = Holder().method()
out["tstate_frame_direct"] = direct
out["tstate_frame_via_cframe"] = via
out["frame_code"] = [i * 8 for i, w in enumerate(words) if w == id(code)]
out["frame_previous"] = [i * 8 for i, w in enumerate(words) if w == caller]
out["frame_instr"] = lasti_at or [
    i * 8 for i, w in enumerate(words) if id(code) < w < id(code) + 65536
]
cid = id(code)
out["code_filename"] = find(cid, id(code.co_filename), 256)
out["code_qualname"] = find(cid, id(code.co_name if LEGACY else code.co_qualname), 256)
out["code_linetable"] = find(cid, id(code.co_linetable), 256)
out["code_firstlineno"] = [
    o for o in range(0, 256, 4) if ctypes.c_int.from_address(cid + o).value == code.co_firstlineno
]
out["code_adaptive"] = [
    o for o in range(0, 256, 8) if ctypes.string_at(cid + o, 2) == code.co_code[:2]
]


def generator() -> Iterator[int]:
    yield U64(id(sys._getframe()) + 24).value


# owner: FRAME_OWNED_BY_GENERATOR (1) in a suspended generator, FRAME_OWNED_BY_THREAD (0) here.
# 3.10 frames have none.
out["frame_owner"] = []
if not LEGACY:
    suspended = generator()
    gen_frame = next(suspended)
    module_frame = U64(id(sys._getframe()) + 24).value
    byte = ctypes.c_uint8.from_address
    out["frame_owner"] = [
        o
        for o in range(64, 72)
        if byte(gen_frame + o).value == 1 and byte(module_frame + o).value == 0
    ]


# The task-key walk (zt_python_task): 3.10 tells a generator's frame by f_gen, the generator
# object (NULL in a plain function's frame); every version reads co_flags, an int, which
# differs between a generator's code and a coroutine's (CO_GENERATOR, CO_COROUTINE).
def legacy_generator() -> Iterator[int]:
    yield id(sys._getframe())


out["frame_gen"] = []
if LEGACY:
    gen_object = legacy_generator()
    gen_pyframe = next(gen_object)
    plain_pyframe = id(sys._getframe())
    out["frame_gen"] = [
        o
        for o in range(16, 128, 8)
        if U64(gen_pyframe + o).value == id(gen_object) and U64(plain_pyframe + o).value == 0
    ]


async def coroutine() -> None:
    pass


def int_at(address: int) -> int:
    return ctypes.c_int.from_address(address).value


gen_code, coro_code = generator.__code__, coroutine.__code__
out["code_flags"] = [
    o
    for o in range(0, 256, 4)
    if int_at(id(gen_code) + o) == gen_code.co_flags
    and int_at(id(coro_code) + o) == coro_code.co_flags
]
out["co_async_flags"] = [
    inspect.CO_COROUTINE,
    inspect.CO_ITERABLE_COROUTINE,
    inspect.CO_ASYNC_GENERATOR,
    inspect.CO_GENERATOR,
]
out["ascii_data"] = [sys.getsizeof("") - 1]
out["compact_data"] = [sys.getsizeof("x\xe9") - 3]  # two latin-1 chars and a NUL
out["version"] = list(sys.version_info[:2])
print(json.dumps(out))
