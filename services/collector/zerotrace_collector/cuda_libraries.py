"""Which CUDA runtime (libcudart) and driver (libcuda) files a process has mapped.

Read, then parse: :func:`cuda_libraries_in_maps` takes the text of ``/proc/PID/maps`` and
picks the files named like a CUDA library; :func:`probed_symbols` says which of the
probed entry points a file's export list holds. The readers (:func:`read_maps`,
:func:`exported_functions`) are one call each around them.

A file is recognised by name first (``libcudart*`` for the runtime, ``libcuda.*`` for the
driver: cheap, and what the kernel side also matches at open time), then confirmed by its
exported symbols: a file named like CUDA that exports none of the probed APIs (a stub, a
wrapper) is reported as such, not probed. Symbols are read from ``.dynsym`` (what
``dlsym`` and the uprobe loader resolve).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Final

from zerotrace_collector.probes.gpu_decode import GPU_APIS

__all__ = [
    "CudaLibKind",
    "MappedCudaLibrary",
    "cuda_kind_of_name",
    "cuda_libraries_in_maps",
    "exported_functions",
    "probed_symbols",
    "read_maps",
]

_DELETED: Final = " (deleted)"
_PROBED: Final = frozenset(api.symbol for api in GPU_APIS)


class CudaLibKind(Enum):
    RUNTIME = "runtime"  # libcudart
    DRIVER = "driver"  # libcuda


@dataclass(frozen=True, slots=True)
class MappedCudaLibrary:
    path: str
    """As the maps file shows it (absolute, in the process's mount namespace)."""
    kind: CudaLibKind
    device: str
    """``major:minor`` of the file system, with ``inode`` naming the file across paths."""
    inode: int
    deleted: bool
    """The file was unlinked (or replaced) after being mapped: it cannot be opened by path."""


def cuda_kind_of_name(path: str) -> CudaLibKind | None:
    """RUNTIME for ``libcudart*``, DRIVER for ``libcuda.*``, else None (by basename)."""
    name = path.rsplit("/", 1)[-1]
    if name.startswith("libcudart"):
        return CudaLibKind.RUNTIME
    if name.startswith("libcuda."):
        return CudaLibKind.DRIVER
    return None


def cuda_libraries_in_maps(text: str) -> list[MappedCudaLibrary]:
    """The CUDA-named files in a ``/proc/PID/maps`` text, each once, in map order.

    Lines are ``start-end perms offset dev inode [path]``; anonymous and pseudo mappings
    (``[heap]``) have no file and are skipped, as are malformed lines.
    """
    found: dict[tuple[str, int], MappedCudaLibrary] = {}
    for line in text.splitlines():
        cols = line.split(maxsplit=5)
        if len(cols) < 6 or not cols[5].startswith("/"):
            continue
        path, deleted = cols[5], cols[5].endswith(_DELETED)
        if deleted:
            path = path[: -len(_DELETED)]
        kind = cuda_kind_of_name(path)
        try:
            inode = int(cols[4])
        except ValueError:
            continue
        if kind is not None and (cols[3], inode) not in found:
            found[(cols[3], inode)] = MappedCudaLibrary(path, kind, cols[3], inode, deleted)
    return list(found.values())


def probed_symbols(exported: Iterable[str]) -> tuple[str, ...]:
    """The probed API symbols among *exported*, in GPU_APIS order."""
    have = set(exported) & _PROBED
    return tuple(api.symbol for api in GPU_APIS if api.symbol in have)


def read_maps(pid: int) -> str:
    """``/proc/PID/maps``; raises OSError (ProcessLookupError-like) when the process is gone."""
    return Path(f"/proc/{pid}/maps").read_text()


def exported_functions(path: str | Path) -> frozenset[str]:
    """Names of the functions a shared object defines in ``.dynsym``.

    Raises OSError when the file cannot be read and ValueError when it is not ELF.
    """
    elffile: Any = importlib.import_module("elftools.elf.elffile")  # pyelftools is untyped
    errors: Any = importlib.import_module("elftools.common.exceptions")
    with open(path, "rb") as f:
        try:
            elf = elffile.ELFFile(f)
            table = elf.get_section_by_name(".dynsym")
            if table is None:
                return frozenset()
            return frozenset(
                sym.name
                for sym in table.iter_symbols()
                if sym["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC")
                and sym["st_shndx"] != "SHN_UNDEF"
            )
        except errors.ELFError as exc:
            raise ValueError(f"{path}: not an ELF shared object ({exc})") from exc
