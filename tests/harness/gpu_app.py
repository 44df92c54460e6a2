"""A Python program that allocates, frees and launches on a (fake) GPU from known functions.

Run as ``python gpu_app.py LIB_DIR GO_FILE TRUTH_FILE EXIT_FILE``. It loads nothing CUDA at
start: it waits for GO_FILE to appear, then dlopens ``LIB_DIR/libcudart.so.12`` and
``LIB_DIR/libcuda.so.1`` (so a probe attached before proves it handles late loading), makes
the calls below through ctypes, writes what it did to TRUTH_FILE (JSON: one entry per call,
in order, with the Python function that made it), and stays alive until EXIT_FILE appears
(so its memory map can still be read to symbolize stacks).

The calls, by function (sizes in bytes):
  alloc_weights   3 x cudaMalloc 7 MiB
  alloc_cache     5 x cudaMalloc 1 MiB
  free_cache      cudaFree of the first 2 cache blocks
  launch_kernels  7 x cudaLaunchKernel
  driver_buffers  2 x cuMemAlloc_v2 3 MiB, cuMemFree_v2 of the first
  async_and_managed  cudaMallocAsync 2 MiB + cudaFreeAsync of it, cudaMallocManaged 4 MiB,
                  cuMemAllocAsync 512 KiB + cuMemFreeAsync of it, 3 x cuLaunchKernel
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
KERNEL_LAUNCHES = 7
DRIVER_LAUNCHES = 3


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class Gpu:
    def __init__(self, lib_dir: Path) -> None:
        self.rt = ctypes.CDLL(str(lib_dir / "libcudart.so.12"))
        self.drv = ctypes.CDLL(str(lib_dir / "libcuda.so.1"))
        self.truth: list[dict[str, Any]] = []
        self._kernel_stub = ctypes.c_int(0)  # stands in for a __global__ function's host stub

    def note(self, api: str, func: str, result: int, address: int = 0, size: int = 0) -> None:
        self.truth.append(
            {"api": api, "func": func, "result": result, "address": address, "size": size}
        )

    def malloc(self, api: str, func: str, size: int) -> int:
        out = ctypes.c_void_p()
        fn = getattr(self.rt, api)
        if api == "cudaMalloc":
            rc = fn(ctypes.byref(out), ctypes.c_size_t(size))
        elif api == "cudaMallocAsync":
            rc = fn(ctypes.byref(out), ctypes.c_size_t(size), ctypes.c_void_p(0))
        else:  # cudaMallocManaged, flags = cudaMemAttachGlobal
            rc = fn(ctypes.byref(out), ctypes.c_size_t(size), ctypes.c_uint(1))
        self.note(api, func, rc, out.value or 0, size)
        return out.value or 0

    def free(self, api: str, func: str, address: int) -> None:
        args: list[Any] = [ctypes.c_void_p(address)]
        if api == "cudaFreeAsync":
            args.append(ctypes.c_void_p(0))
        self.note(api, func, getattr(self.rt, api)(*args), address)

    def cu_alloc(self, api: str, func: str, size: int) -> int:
        out = ctypes.c_ulonglong()
        extra = [ctypes.c_void_p(0)] if api == "cuMemAllocAsync" else []
        rc = getattr(self.drv, api)(ctypes.byref(out), ctypes.c_size_t(size), *extra)
        self.note(api, func, rc, out.value, size)
        return out.value

    def cu_free(self, api: str, func: str, address: int) -> None:
        extra = [ctypes.c_void_p(0)] if api == "cuMemFreeAsync" else []
        self.note(api, func, getattr(self.drv, api)(ctypes.c_ulonglong(address), *extra), address)

    def launch(self, func: str) -> None:
        grid, block = Dim3(4, 1, 1), Dim3(128, 1, 1)
        rc = self.rt.cudaLaunchKernel(
            ctypes.byref(self._kernel_stub), grid, block, None, ctypes.c_size_t(0), None
        )
        self.note("cudaLaunchKernel", func, rc)

    def cu_launch(self, func: str) -> None:
        u = ctypes.c_uint
        rc = self.drv.cuLaunchKernel(
            ctypes.byref(self._kernel_stub), u(2), u(1), u(1), u(64), u(1), u(1), u(0), None,
            None, None,
        )  # fmt: skip
        self.note("cuLaunchKernel", func, rc)


def alloc_weights(gpu: Gpu) -> list[int]:
    return [gpu.malloc("cudaMalloc", "alloc_weights", 7 * MIB) for _ in range(3)]


def alloc_cache(gpu: Gpu) -> list[int]:
    return [gpu.malloc("cudaMalloc", "alloc_cache", 1 * MIB) for _ in range(5)]


def free_cache(gpu: Gpu, cache: list[int]) -> None:
    for address in cache[:2]:
        gpu.free("cudaFree", "free_cache", address)


def launch_kernels(gpu: Gpu) -> None:
    for _ in range(KERNEL_LAUNCHES):
        gpu.launch("launch_kernels")


def driver_buffers(gpu: Gpu) -> None:
    buffers = [gpu.cu_alloc("cuMemAlloc_v2", "driver_buffers", 3 * MIB) for _ in range(2)]
    gpu.cu_free("cuMemFree_v2", "driver_buffers", buffers[0])


def async_and_managed(gpu: Gpu) -> None:
    name = "async_and_managed"
    gpu.free("cudaFreeAsync", name, gpu.malloc("cudaMallocAsync", name, 2 * MIB))
    gpu.malloc("cudaMallocManaged", name, 4 * MIB)
    gpu.cu_free("cuMemFreeAsync", name, gpu.cu_alloc("cuMemAllocAsync", name, 512 * 1024))
    for _ in range(DRIVER_LAUNCHES):
        gpu.cu_launch(name)


def wait_for(path: Path, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"gpu_app: {path} did not appear within {limit_s} s")
        time.sleep(0.005)


def main(argv: list[str]) -> None:
    lib_dir, go_file, truth_file, exit_file = (Path(a) for a in argv)
    wait_for(go_file, 60)
    gpu = Gpu(lib_dir)
    alloc_weights(gpu)
    cache = alloc_cache(gpu)
    free_cache(gpu, cache)
    launch_kernels(gpu)
    driver_buffers(gpu)
    async_and_managed(gpu)
    truth_file.write_text(json.dumps(gpu.truth))
    wait_for(exit_file, 120)


if __name__ == "__main__":
    main(sys.argv[1:])
