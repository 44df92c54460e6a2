"""One place that decides whether a test module can load real eBPF programs here.

Without root, bcc, kernel headers or the tracepoint it needs, a module is skipped with the
reason; but the test command (scripts/test, as root after set-up) sets
ZEROTRACE_REQUIRE_KERNEL=1, and there a missing kernel feature is a failure to see, not a
skip to overlook. Call `require_ebpf(...)` at module level.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest


def ebpf_missing(tracepoint: str = "syscalls/sys_enter_openat") -> str | None:
    if os.geteuid() != 0:
        return "kernel tests need root to load eBPF programs"
    if importlib.util.find_spec("bcc") is None:
        return "bcc not importable: run scripts/setup-ebpf.sh <venv> as root"
    release = os.uname().release
    if not Path(f"/lib/modules/{release}/build").exists():
        return f"no kernel headers for {release}: run scripts/setup-ebpf.sh as root"
    if not Path(f"/sys/kernel/tracing/events/{tracepoint}").exists():
        return "tracefs not mounted or no syscall tracepoints: run scripts/setup-ebpf.sh"
    return None


def require(reason: str | None) -> None:
    """Skip (or, under the test command, fail) the calling module when reason is set."""
    if reason is None:
        return
    if os.environ.get("ZEROTRACE_REQUIRE_KERNEL") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_ebpf(tracepoint: str = "syscalls/sys_enter_openat") -> None:
    require(ebpf_missing(tracepoint))
