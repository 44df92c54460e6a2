"""Pure tests of finding CUDA libraries in a memory map and of their probed symbols."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from zerotrace_collector.cuda_libraries import (
    CudaLibKind,
    MappedCudaLibrary,
    cuda_kind_of_name,
    cuda_libraries_in_maps,
    exported_functions,
    probed_symbols,
)

pytestmark = pytest.mark.unit

MAPS = """\
55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1311 /usr/bin/python3.11
7f10a0000000-7f10a0021000 rw-p 00000000 00:00 0
7f10a1000000-7f10a1002000 r--p 00000000 08:01 4242 /usr/local/cuda/lib64/libcudart.so.12.4.127
7f10a1002000-7f10a1080000 r-xp 00002000 08:01 4242 /usr/local/cuda/lib64/libcudart.so.12.4.127
7f10a2000000-7f10a2400000 r-xp 00000000 08:01 5151 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f10a3000000-7f10a3001000 r-xp 00000000 08:01 6161 /opt/old/libcudart.so.11.0 (deleted)
7f10a4000000-7f10a4001000 r-xp 00000000 08:01 7171 /usr/lib/libcudnn.so.9
7f10a5000000-7f10a5001000 r-xp 00000000 08:01 8181 /usr/lib/libcuda_stub_not.so
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
garbage line
"""


def test_cuda_libraries_are_found_once_each_with_kind_and_identity() -> None:
    assert cuda_libraries_in_maps(MAPS) == [
        MappedCudaLibrary(
            "/usr/local/cuda/lib64/libcudart.so.12.4.127", CudaLibKind.RUNTIME, "08:01", 4242, False
        ),
        MappedCudaLibrary(
            "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
            CudaLibKind.DRIVER,
            "08:01",
            5151,
            False,
        ),
        MappedCudaLibrary("/opt/old/libcudart.so.11.0", CudaLibKind.RUNTIME, "08:01", 6161, True),
    ]


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/x/libcudart.so.12", CudaLibKind.RUNTIME),
        ("libcudart_static.a", CudaLibKind.RUNTIME),
        ("/x/libcuda.so.1", CudaLibKind.DRIVER),
        ("/x/libcuda.so", CudaLibKind.DRIVER),
        ("/x/libcudnn.so.9", None),
        ("/x/libcuda_stub.so", None),
        ("/libcuda.so.1/other.so", None),
    ],
)
def test_kind_is_decided_by_the_basename(path: str, kind: CudaLibKind | None) -> None:
    assert cuda_kind_of_name(path) is kind


def test_probed_symbols_keep_table_order_and_ignore_others() -> None:
    assert probed_symbols({"cudaFree", "cudaMemcpy", "cudaMalloc", "cuLaunchKernel"}) == (
        "cudaMalloc",
        "cudaFree",
        "cuLaunchKernel",
    )
    assert probed_symbols(()) == ()


def test_exported_functions_reads_dynsym_of_a_real_library(tmp_path: Path) -> None:
    lib = tmp_path / "libcudart.so.12"
    source = (
        b"int cudaMalloc(void **p, unsigned long n) { return 0; }\n"
        b"static int hidden(void) { return 1; }\n"
        b"int (*keep)(void) = hidden;\n"
    )
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(lib), "-x", "c", "-"], input=source, check=True
    )
    names = exported_functions(lib)
    assert "cudaMalloc" in names and "hidden" not in names
    assert probed_symbols(names) == ("cudaMalloc",)


def test_exported_functions_refuses_non_elf(tmp_path: Path) -> None:
    bogus = tmp_path / "libcuda.so.1"
    bogus.write_bytes(b"not an elf file at all")
    with pytest.raises(ValueError, match="not an ELF"):
        exported_functions(bogus)
    with pytest.raises(OSError):
        exported_functions(tmp_path / "missing.so")
