"""Compile the fake CUDA libraries from ``fake_cudart.c`` with the system C compiler.

Both twins come from one source: the runtime (``libcudart.so.12``) and, with
``-DZT_FAKE_DRIVER``, the driver (``libcuda.so.1``). Frame pointers are kept so user
stacks taken inside them unwind to the caller.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_cudart.c")
RUNTIME_NAME = "libcudart.so.12"
DRIVER_NAME = "libcuda.so.1"


@dataclass(frozen=True)
class FakeCuda:
    runtime: Path
    driver: Path


def build_fake_cuda(out_dir: Path) -> FakeCuda:
    """Build both libraries into *out_dir*; raises RuntimeError with the compiler's words."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc/cc) on PATH")
    out_dir.mkdir(parents=True, exist_ok=True)
    built = {}
    for name, extra in ((RUNTIME_NAME, []), (DRIVER_NAME, ["-DZT_FAKE_DRIVER"])):
        target = out_dir / name
        cmd = [cc, *extra, "-shared", "-fPIC", "-O2", "-fno-omit-frame-pointer"]
        cmd += ["-Wall", "-Werror", f"-Wl,-soname,{name}", "-o", str(target), str(SOURCE)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"building {name} failed: {done.stderr.strip()[:300]}")
        built[name] = target
    return FakeCuda(runtime=built[RUNTIME_NAME], driver=built[DRIVER_NAME])


def build_nested_runtime(out_dir: Path, driver: Path) -> Path:
    """A ``libcudart.so.12`` whose cudaMalloc allocates through *driver*'s cuMemAlloc_v2
    (as NVIDIA's runtime does), linked to it by path; built into *out_dir*."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc/cc) on PATH")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / RUNTIME_NAME
    cmd = [cc, "-DZT_FAKE_NESTED", "-shared", "-fPIC", "-O2", "-fno-omit-frame-pointer", "-Wall"]
    cmd += ["-Werror", f"-Wl,-soname,{RUNTIME_NAME}", "-o", str(target), str(SOURCE)]
    cmd += [f"-L{driver.parent}", f"-l:{driver.name}", f"-Wl,-rpath,{driver.parent}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"building the nested {RUNTIME_NAME} failed: {done.stderr.strip()[:300]}"
        )
    return target
