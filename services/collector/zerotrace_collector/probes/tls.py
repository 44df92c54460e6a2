"""Where libssl is, and which of its symbols ``bpf/tls.c`` hooks (no bcc import).

The TLS half of the socket probe attaches uprobes to the libssl that CPython's
``_ssl`` module links (OpenSSL 3 here): found from this interpreter's own memory map
after importing ``_ssl``, else from the dynamic linker's cache. Processes that carry
their own TLS (grpcio's BoringSSL, Go, rustls, a libssl in another mount namespace)
are not covered: their traffic stays ciphertext at the syscall layer.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import importlib
from pathlib import Path
from typing import Any, Final

from .bcc_loader import first_line

__all__ = ["TLS_RETURN_FN", "TLS_SYMBOLS", "attach_tls", "find_libssl", "libssl_from_maps"]

# (libssl symbol, BPF entry function); every symbol's return goes to TLS_RETURN_FN.
TLS_SYMBOLS: Final = (
    ("SSL_read", "zt_ssl_read_enter"),
    ("SSL_write", "zt_ssl_write_enter"),
    ("SSL_read_ex", "zt_ssl_read_ex_enter"),
    ("SSL_write_ex", "zt_ssl_write_ex_enter"),
    ("SSL_do_handshake", "zt_ssl_handshake_enter"),
)
TLS_RETURN_FN: Final = "zt_ssl_exit_probe"


def libssl_from_maps(text: str) -> str | None:
    """The path of the first mapped ``libssl.so*`` in a /proc/PID/maps text, else None."""
    for line in text.splitlines():
        cols = line.split(maxsplit=5)
        if len(cols) == 6 and Path(cols[5]).name.startswith("libssl.so"):
            return cols[5]
    return None


def find_libssl() -> Path | None:
    """libssl as CPython's ``_ssl`` loads it; None when there is none to hook."""
    try:
        importlib.import_module("_ssl")
        found = libssl_from_maps(Path("/proc/self/maps").read_text())
    except (ImportError, OSError):
        found = None
    if found is None:
        name = ctypes.util.find_library("ssl")  # e.g. "libssl.so.3", via ldconfig -p
        if name is not None:
            for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"):
                if (Path(folder) / name).exists():
                    found = str(Path(folder) / name)
                    break
    return Path(found) if found is not None and Path(found).exists() else None


def attach_tls(bpf: Any, libssl: Path, pid: int) -> str | None:
    """Attach TLS_SYMBOLS' entry and return probes of the compiled socket program *bpf* to
    *libssl* (pid -1: every process). None when all are attached; else, everything detached
    again, one line saying why TLS capture is off."""
    lib = str(libssl).encode()
    try:
        for sym, fn in TLS_SYMBOLS:
            bpf.attach_uprobe(name=lib, sym=sym.encode(), fn_name=fn.encode(), pid=pid)
            bpf.attach_uretprobe(
                name=lib, sym=sym.encode(), fn_name=TLS_RETURN_FN.encode(), pid=pid
            )
    except Exception as exc:
        for sym, _fn in TLS_SYMBOLS:
            for detach in (bpf.detach_uprobe, bpf.detach_uretprobe):
                with contextlib.suppress(Exception):
                    detach(name=lib, sym=sym.encode(), pid=pid)
        return f"uprobe on {libssl} failed ({first_line(exc, 120)}): TLS capture off"
    return None
