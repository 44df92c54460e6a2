"""What a loader of ``bpf/python_stack.h`` (the CPython frame walker) must add: the header's
file name and the -D flags it takes from the running kernel.

CPython 3.10 knows its threads only by ``pthread_self()``, which glibc makes the thread's FS
base; the walker reads that from the kernel's task (``task_struct.thread.fsbase``). bcc
compiles against headers of another kernel than the running one, so the offset comes from the
running kernel's BTF, as the socket probe's TCP sequence offsets do.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Final

from .kernel_btf import VMLINUX, BtfError, KernelBtf

__all__ = ["PYTHON_STACK_FILE", "python_stack_cflags"]

# Compiled first, as part of the main text: bcc rewrites map accesses only there.
PYTHON_STACK_FILE: Final = "python_stack.h"


@functools.lru_cache(maxsize=4)
def python_stack_cflags(btf_path: Path = VMLINUX) -> tuple[tuple[str, ...], str | None]:
    """The -D flags for python_stack.h on this kernel, and one line when something is off
    (then only CPython 3.10 threads go without Python frames). Read once per process."""
    try:
        btf = KernelBtf.running_kernel(btf_path)
        fsbase = btf.member_offset("task_struct", "thread") + btf.member_offset(
            "thread_struct", "fsbase"
        )
    except BtfError as exc:
        return (), f"CPython 3.10 stacks without Python frames: {exc}"
    return (f"-DZT_OFF_TASK_FSBASE={fsbase}",), None
