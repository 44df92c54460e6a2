"""What a loader of ``bpf/python_stack.h`` (the CPython frame walker) must add: the header's
file name and the -D flags it takes from the running kernel.

CPython 3.10 knows its threads only by ``pthread_self()``, which glibc makes the thread's FS
base; the walker reads that from the kernel's task (``task_struct.thread.fsbase``). bcc
compiles against headers of another kernel than the running one, so the offset comes from the
running kernel's BTF, as the socket probe's TCP sequence offsets do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from .kernel_btf import VMLINUX, offset_cflags

__all__ = ["PYTHON_STACK_FILE", "THREAD_SELF_MEMBERS", "python_stack_cflags"]

# Compiled first, as part of the main text: bcc rewrites map accesses only there.
PYTHON_STACK_FILE: Final = "python_stack.h"


# current->thread.fsbase: pthread_self() of the sampled thread (x86-64).
THREAD_SELF_MEMBERS: Final = (("ZT_OFF_TASK_FSBASE", "task_struct", "thread.fsbase"),)


def python_stack_cflags(btf_path: Path = VMLINUX) -> tuple[list[str], str | None]:
    """The -D flags for python_stack.h on this kernel, and one line when something is off
    (then only CPython 3.10 threads go without Python frames)."""
    flags, why = offset_cflags(THREAD_SELF_MEMBERS, btf_path)
    return flags, (f"CPython 3.10 stacks without Python frames: {why}" if why else None)
