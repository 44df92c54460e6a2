"""Compile the NVML stand-in (``nvml_standin.c``) with the system C compiler into a folder,
as ``libnvidia-ml.so.1`` with that soname: a process started with the folder in
LD_LIBRARY_PATH finds it where pynvml looks, ``CDLL("libnvidia-ml.so.1")``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("nvml_standin.c")
LIBRARY_NAME = "libnvidia-ml.so.1"
SCRIPT_ENV = "ZT_NVML_SCRIPT"  # the script of values the library reads at nvmlInit
LOG_ENV = "ZT_NVML_LOG"  # where it logs each XID it delivers, with the time it was due


def build_nvml_standin(out_dir: Path) -> Path:
    """Build into *out_dir*; returns the library's path. Raises RuntimeError with the
    compiler's words."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc/cc) on PATH")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    cmd = [cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"]
    cmd += [f"-Wl,-soname,{LIBRARY_NAME}", "-o", str(target), str(SOURCE)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building {LIBRARY_NAME} failed: {done.stderr.strip()[:500]}")
    return target
