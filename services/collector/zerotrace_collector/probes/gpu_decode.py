"""Decode the GPU calls probe's ring-buffer records (``bpf/gpu_calls.c``). Pure Python.

Two records share the buffer, told apart by their leading u32 type tag::

    zt_gpu_call_event (0x10)                   zt_gpu_lib_event (0x11), 296 bytes
      0  u32 type                                0  u32 type
      4  u32 pid (tgid)                          4  u32 pid
      8  u32 tid                                 8  u32 tid
     12  u32 api      (GPU_APIS)                12  s32 fd       openat's result
     16  u64 start_ns CLOCK_MONOTONIC           16  u32 stopped  1: SIGSTOP was sent
     24  u64 end_ns                             20  u32 _pad
     32  u64 address  allocated / freed         24  char path[256] as the program spelled it
     40  u64 size     bytes asked for
     48  s64 result   cudaError_t / CUresult
     56  s32 stack_id user stack, < 0 = none
     60  u32 _pad
     64  char comm[16]
     80  u64 caller   return address at entry: the immediate caller
     88  struct zt_py_stack: u32 status, depth, truncated, reserved;
         u64 code[D], u64 instr[D]   (D = ZT_PY_MAX_DEPTH; 104 + 16*D bytes in all)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum
from typing import Final, TypeAlias

from ..errors import MalformedEvent
from .event_layout import (
    COMM_LEN,
    DEFAULT_PY_DEPTH,
    MAX_TRAILING,
    PATH_MAX,
    PY_STACK_HEAD,
    ZT_EVENT_GPU_CALL,
    ZT_EVENT_GPU_LIB,
    PyStatus,
    RawEvent,
    peek_type,
    py_stack_size,
)

__all__ = [
    "CALL_STRUCT",
    "GPU_APIS",
    "LIB_STRUCT",
    "ApiKind",
    "GpuApi",
    "GpuCallSample",
    "GpuLibSample",
    "GpuSample",
    "api_named",
    "call_size",
    "decode_gpu_event",
]

CALL_STRUCT: Final = struct.Struct(f"<IIIIQQQQqiI{COMM_LEN}sQ")  # then struct zt_py_stack
LIB_STRUCT: Final = struct.Struct(f"<IIIiIIQQ{PATH_MAX}s")

if CALL_STRUCT.size != 88 or LIB_STRUCT.size != 296:  # pragma: no cover - layout guard
    raise ImportError("GPU event layouts drifted from bpf/gpu_calls.c")


class ApiKind(Enum):
    ALLOC = "alloc"  # address written through arg 1 at return, size in arg 2
    FREE = "free"  # arg 1 is the address freed
    LAUNCH = "launch"


@dataclass(frozen=True, slots=True)
class GpuApi:
    id: int
    """ZT_API_* in bpf/gpu_calls.c."""
    symbol: str
    """The exported symbol, which is also the schema's ``api`` value."""
    kind: ApiKind
    driver: bool
    """In libcuda (driver API) rather than libcudart (runtime API)."""


def _api(id_: int, symbol: str, kind: ApiKind) -> GpuApi:
    return GpuApi(id_, symbol, kind, driver=symbol.startswith("cu") and symbol[2].isupper())


# The probed entry points; the loader attaches zt_gpu_enter_<symbol> / zt_gpu_return_<symbol>.
GPU_APIS: Final = (
    _api(1, "cudaMalloc", ApiKind.ALLOC),
    _api(2, "cudaFree", ApiKind.FREE),
    _api(3, "cudaMallocAsync", ApiKind.ALLOC),
    _api(4, "cudaFreeAsync", ApiKind.FREE),
    _api(5, "cudaMallocManaged", ApiKind.ALLOC),
    _api(6, "cudaLaunchKernel", ApiKind.LAUNCH),
    _api(7, "cuMemAlloc_v2", ApiKind.ALLOC),
    _api(8, "cuMemFree_v2", ApiKind.FREE),
    _api(9, "cuMemAllocAsync", ApiKind.ALLOC),
    _api(10, "cuMemFreeAsync", ApiKind.FREE),
    _api(11, "cuLaunchKernel", ApiKind.LAUNCH),
)
_BY_ID: Final = {api.id: api for api in GPU_APIS}
_BY_NAME: Final = {api.symbol: api for api in GPU_APIS}


def api_named(symbol: str) -> GpuApi:
    """The API for an exported symbol; KeyError when it is not probed."""
    return _BY_NAME[symbol]


@dataclass(frozen=True, slots=True)
class GpuCallSample:
    """One completed, outermost CUDA call on a thread."""

    pid: int
    tid: int
    api: GpuApi
    start_mono_ns: int
    end_mono_ns: int
    address: int
    """Allocations: the device address written at return (0 when the call failed);
    frees: the address passed; launches: 0."""
    size: int
    result: int
    stack_id: int
    """Id in the probe's user stack table; negative (-errno) when none was taken."""
    comm: str
    caller: int = 0
    """The return address at the API's entry (its immediate caller); 0 when unreadable."""
    py_status: PyStatus = PyStatus.NONE
    py_frames: tuple[tuple[int, int], ...] = ()
    """(code object, instruction pointer) of the calling Python frames, leaf first; code 0
    marks a shim frame (C calling into Python)."""
    py_truncated: bool = False


@dataclass(frozen=True, slots=True)
class GpuLibSample:
    """A process opened a file named like a CUDA library (and may be stopped for it)."""

    pid: int
    tid: int
    fd: int
    stopped: bool
    path: str
    open_mono_ns: int = 0
    """When openat returned (CLOCK_MONOTONIC): a stopped process is paused from then on."""
    cgroup_id: int = 0


GpuSample: TypeAlias = GpuCallSample | GpuLibSample


def _cstr(raw: bytes, field: str) -> str:
    end = raw.find(b"\0")
    if end < 0:
        raise MalformedEvent(f"{field} is not NUL-terminated")
    return raw[:end].decode("utf-8", "backslashreplace")


def _check_size(buf: RawEvent, want: int, what: str) -> None:
    if not want <= len(buf) <= want + MAX_TRAILING:
        raise MalformedEvent(f"{what} record is {len(buf)} bytes, expected {want}")


def call_size(py_depth: int = DEFAULT_PY_DEPTH) -> int:
    """Bytes of a call record built with ZT_PY_MAX_DEPTH = *py_depth*."""
    return CALL_STRUCT.size + py_stack_size(py_depth)


def decode_gpu_event(buf: RawEvent, py_depth: int = DEFAULT_PY_DEPTH) -> GpuSample:
    """Decode one record; raise :class:`MalformedEvent` when it is not valid.
    *py_depth* is the ZT_PY_MAX_DEPTH the program was built with."""
    tag = peek_type(buf)
    if tag == ZT_EVENT_GPU_CALL:
        _check_size(buf, call_size(py_depth), "gpu call")
        _, pid, tid, api_id, start, end, address, size, result, stack_id, _, comm, caller = (
            CALL_STRUCT.unpack_from(buf, 0)
        )
        api = _BY_ID.get(api_id)
        if api is None:
            raise MalformedEvent(f"unknown GPU api id {api_id}")
        if end < start:
            raise MalformedEvent(f"end_ns {end} precedes start_ns {start}")
        status, depth, truncated, _ = PY_STACK_HEAD.unpack_from(buf, CALL_STRUCT.size)
        if depth > py_depth or status > max(PyStatus):
            raise MalformedEvent(f"python depth {depth} / status {status} out of range")
        at = CALL_STRUCT.size + PY_STACK_HEAD.size
        codes = struct.unpack_from(f"<{depth}Q", buf, at)
        instrs = struct.unpack_from(f"<{depth}Q", buf, at + 8 * py_depth)
        return GpuCallSample(
            pid,
            tid,
            api,
            start,
            end,
            address,
            size,
            result,
            stack_id,
            _cstr(comm, "comm"),
            caller,
            PyStatus(status),
            tuple(zip(codes, instrs, strict=True)),
            bool(truncated),
        )
    if tag == ZT_EVENT_GPU_LIB:
        _check_size(buf, LIB_STRUCT.size, "gpu lib")
        _, pid, tid, fd, stopped, _, ts, cgroup, path = LIB_STRUCT.unpack_from(buf, 0)
        return GpuLibSample(pid, tid, fd, bool(stopped), _cstr(path, "path"), ts, cgroup)
    raise MalformedEvent(f"wrong type tag {tag:#x} for the GPU probe")
