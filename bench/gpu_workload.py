"""A small GPU workload of known size and shape, for the device check (gpu_device_check.py).

Two engines, each a process of its own so the collector sees a pid come and go:

- ``driver``: the CUDA driver API through ctypes on ``libcuda.so.1`` (no toolkit, no
  framework): the primary context, one ``cuMemAlloc`` of --bytes (touched with cuMemsetD8),
  and a PTX kernel (JIT-compiled by the driver) that spins on ``%globaltimer`` for
  --spin-ms, launched on 4 blocks of 256 threads per SM until --seconds are over, with
  ``cuCtxSynchronize`` after each launch. Expected: NVML's per-process memory = --bytes plus
  the context's own; SM activity near 1; occupancy near 1024 / (the SM's thread limit: 2048
  on Hopper) = 0.5; tensor and FP pipes near 0.
- ``torch``: PyTorch, where it is installed: a --bytes uint8 tensor, then 4096x4096 bf16
  matrix products until --seconds are over (tensor activity near 1). Expected memory: what
  torch reserved (printed) plus the context and cuBLAS's workspace.

Prints JSON lines: ``{"ready": {...}}`` once the memory is held (the collector's cue), then
``{"done": {...}}``; or ``{"skipped": "<why>"}`` (exit 3) where the engine cannot run here.
A hard limit (--limit-s) ends the process whatever a CUDA call does.

    python -m bench.gpu_workload --engine driver --seconds 10 --bytes 1073741824
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import importlib.util
import json
import os
import sys
import time
from typing import Any

__all__ = ["ENGINES", "PTX_SPIN", "main"]

ENGINES = ("driver", "torch")
EXIT_SKIPPED = 3
BLOCKS_PER_SM = 4  # x 256 threads = 1024 threads per SM: half of Hopper's 2048
THREADS_PER_BLOCK = 256
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16  # cuda.h
CU_JIT_ERROR_LOG_BUFFER = 5  # cuda.h CUjit_option
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
MATMUL_N = 4096
MATMULS_PER_SYNC = 20  # ~4 ms of an H100's bf16 throughput between synchronisations

# Spins until `ns` nanoseconds of the GPU's global timer have passed since the thread began.
# PTX ISA 7.8 (CUDA 11.8) for sm_75: old enough for any driver that JITs for Hopper, and
# sm_75 is still a target CUDA 13 supports.
PTX_SPIN = b"""
.version 7.8
.target sm_75
.address_size 64

.visible .entry zt_spin(.param .u64 zt_spin_ns)
{
    .reg .pred %p;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [zt_spin_ns];
    mov.u64 %rd2, %globaltimer;
ZT_LOOP:
    mov.u64 %rd3, %globaltimer;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p, %rd4, %rd1;
    @%p bra ZT_LOOP;
    ret;
}
\x00"""


class Skipped(Exception):
    """This engine cannot run here; the message says why in one line."""


def say(obj: object) -> None:
    print(json.dumps(obj), flush=True)


def run_driver(seconds: float, nbytes: int, spin_ms: int) -> dict[str, Any]:
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise Skipped(f"libcuda.so.1 not found ({exc})") from exc

    def check(what: str, code: int) -> None:
        if code != 0:
            name = ctypes.c_char_p()
            cu.cuGetErrorName(code, ctypes.byref(name))
            raise Skipped(f"{what} failed: CUresult {code} ({(name.value or b'?').decode()})")

    try:
        check("cuInit", cu.cuInit(0))
    except AttributeError as exc:  # a library named libcuda that is not NVIDIA's driver
        raise Skipped(f"libcuda.so.1 has no driver API ({exc})") from exc
    dev = ctypes.c_int()
    check("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
    sms = ctypes.c_int()
    check(
        "cuDeviceGetAttribute",
        cu.cuDeviceGetAttribute(ctypes.byref(sms), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
    )
    dptr = ctypes.c_uint64()
    check("cuMemAlloc_v2", cu.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(nbytes)))
    check("cuMemsetD8_v2", cu.cuMemsetD8_v2(dptr, ctypes.c_ubyte(1), ctypes.c_size_t(nbytes)))
    module = ctypes.c_void_p()
    log = ctypes.create_string_buffer(8192)
    options = (ctypes.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
    values = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(len(log)))
    code = cu.cuModuleLoadDataEx(ctypes.byref(module), PTX_SPIN, 2, options, values)
    if code != 0:
        raise Skipped(f"cuModuleLoadDataEx failed: CUresult {code}: {log.value.decode()[:300]}")
    fn = ctypes.c_void_p()
    check("cuModuleGetFunction", cu.cuModuleGetFunction(ctypes.byref(fn), module, b"zt_spin"))
    spin_ns = ctypes.c_uint64(spin_ms * 1_000_000)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(spin_ns), ctypes.c_void_p))
    grid = sms.value * BLOCKS_PER_SM
    ready = {"engine": "driver", "pid": os.getpid(), "allocated_bytes": nbytes}
    ready.update(sms=sms.value, grid=grid, block=THREADS_PER_BLOCK, spin_ms=spin_ms)
    say({"ready": {**ready, "ts_ns": time.time_ns()}})
    launches, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        # grid x 1 x 1 blocks of THREADS_PER_BLOCK x 1 x 1, no shared memory, the default stream
        launch = cu.cuLaunchKernel(fn, grid, 1, 1, THREADS_PER_BLOCK, 1, 1, 0, None, params, None)
        check("cuLaunchKernel", launch)
        check("cuCtxSynchronize", cu.cuCtxSynchronize())
        launches += 1
    busy_s = time.monotonic() - started
    freed = cu.cuMemFree_v2(dptr)  # the work is done: a failure here is said, not raised
    cu.cuModuleUnload(module)
    cu.cuDevicePrimaryCtxRelease(dev)
    return {"engine": "driver", "launches": launches, "busy_s": round(busy_s, 3), "free": freed}


def run_torch(seconds: float, nbytes: int) -> dict[str, Any]:
    if importlib.util.find_spec("torch") is None:
        raise Skipped("PyTorch is not installed for this Python")
    import torch  # type: ignore[import-not-found,unused-ignore]  # only where installed

    if not torch.cuda.is_available():
        raise Skipped(f"PyTorch {torch.__version__} sees no CUDA device")
    dev = torch.device("cuda")
    held = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    held.fill_(1)
    a = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=torch.bfloat16)
    c = a @ b  # cuBLAS's handle and workspace before the memory is reported
    torch.cuda.synchronize()
    ready = {"engine": "torch", "pid": os.getpid(), "allocated_bytes": nbytes}
    ready.update(torch_reserved_bytes=int(torch.cuda.memory_reserved()), torch=torch.__version__)
    ready.update(device=torch.cuda.get_device_name(0))
    say({"ready": {**ready, "ts_ns": time.time_ns()}})
    matmuls, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        for _ in range(MATMULS_PER_SYNC):
            c = a @ b
        torch.cuda.synchronize()
        matmuls += MATMULS_PER_SYNC
    busy_s = time.monotonic() - started
    del held, c
    return {
        "engine": "torch",
        "matmuls": matmuls,
        "busy_s": round(busy_s, 3),
        "tflops": round(2 * MATMUL_N**3 * matmuls / busy_s / 1e12, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=ENGINES, required=True)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--bytes", type=int, default=1 << 30)
    p.add_argument("--spin-ms", type=int, default=100)
    p.add_argument("--limit-s", type=float, default=90.0, help="hard limit: dump stacks, exit")
    args = p.parse_args(argv)
    # To file descriptor 2 (a test's captured sys.stderr has none); cancelled on return.
    faulthandler.dump_traceback_later(args.limit_s, exit=True, file=2)
    try:
        if args.engine == "driver":
            done = run_driver(args.seconds, args.bytes, args.spin_ms)
        else:
            done = run_torch(args.seconds, args.bytes)
    except Skipped as exc:
        say({"skipped": str(exc)})
        return EXIT_SKIPPED
    finally:
        faulthandler.cancel_dump_traceback_later()
    say({"done": {**done, "ts_ns": time.time_ns()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
