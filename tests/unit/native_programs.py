"""Tiny native programs and libraries built with gcc for the symbolization tests.

The target program prints the run-time address of each of its functions, then obeys lines
on stdin: ``load PATH`` dlopens a library and runs its ``zt_report`` (which prints the
library's function addresses), ``exit`` ends it. Names and addresses come from the
running code itself, so the tests compare the symbolizer with the truth, not with a copy of
its own rules.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

TARGET_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

__attribute__((noinline)) int zt_alpha(int x) { return x * 3 + 1; }
__attribute__((noinline)) static int zt_beta(int x) { return zt_alpha(x) ^ 0x55; }

int main(void) {
    printf("zt_alpha %lx\nzt_beta %lx\nready\n", (unsigned long)&zt_alpha,
           (unsigned long)&zt_beta);
    fflush(stdout);
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "load ", 5) == 0) {
            void *h = dlopen(line + 5, RTLD_NOW);
            void (*report)(void) = h ? (void (*)(void))dlsym(h, "zt_report") : 0;
            if (report) report();
            printf("loaded\n");
            fflush(stdout);
        } else if (strcmp(line, "exit") == 0) {
            break;
        }
    }
    return zt_beta(1) == 0;
}
"""

LIB_C = r"""
#include <stdio.h>

__attribute__((noinline)) int zt_lib_fn(int x) { return x + 7; }
__attribute__((noinline)) static int zt_lib_static(int x) { return zt_lib_fn(x) * 5; }
/* A hand-written function without .size: a symbol of size 0. */
__asm__(".text\n.globl zt_asm_label\n.type zt_asm_label,@function\n"
        "zt_asm_label:\n nop\n nop\n nop\n nop\n ret\n");
void zt_asm_label(void);

void zt_report(void) {
    printf("zt_lib_fn %lx\nzt_lib_static %lx\nzt_asm_label %lx\n", (unsigned long)&zt_lib_fn,
           (unsigned long)&zt_lib_static, (unsigned long)&zt_asm_label);
    fflush(stdout);
}
"""

CPP_LIB = r"""
#include <cstdio>
namespace zt { __attribute__((noinline)) int twice(int x) { return 2 * x; } }
extern "C" void zt_report(void) {
    std::printf("zt::twice %lx\n", (unsigned long)&zt::twice);
    std::fflush(stdout);
}
"""


def have_compilers() -> bool:
    return all(shutil.which(tool) for tool in ("gcc", "g++", "strip", "objcopy"))


def build(folder: Path, name: str, source: str, *flags: str, cpp: bool = False) -> Path:
    """Compile *source* into folder/name with -O1 -g (symbols on) and the given flags."""
    src = folder / (name + (".cpp" if cpp else ".c"))
    src.write_text(source)
    out = folder / name
    compiler = "g++" if cpp else "gcc"
    subprocess.run([compiler, "-O1", "-g", *flags, "-o", str(out), str(src)], check=True)
    return out


def build_library(
    folder: Path, name: str = "libzt.so", source: str = LIB_C, cpp: bool = False
) -> Path:
    return build(folder, name, source, "-shared", "-fPIC", cpp=cpp)


def build_target(folder: Path, name: str = "zt_target", *flags: str) -> Path:
    return build(folder, name, TARGET_C, *flags, "-ldl")


def stripped(path: Path, name: str) -> Path:
    """A copy of *path* with .symtab and debug info removed (.dynsym stays)."""
    out = path.with_name(name)
    subprocess.run(["strip", "--strip-all", "-o", str(out), str(path)], check=True)
    return out


def split_debug(path: Path, debug_file: Path) -> Path:
    """Keep only the debug info of *path* in *debug_file*; strip *path* in place."""
    debug_file.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(path), str(debug_file)], check=True)
    subprocess.run(["strip", "--strip-all", str(path)], check=True)
    return debug_file


def nm_symbols(path: Path, *, dynamic: bool = False) -> dict[str, tuple[int, int]]:
    """name -> (address, size) of the code symbols, as binutils' nm reads them (from
    .dynsym when *dynamic*)."""
    args = ["nm", "-S", "--defined-only", *(["-D"] if dynamic else []), str(path)]
    text = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) == 4 and cols[2] in "tTwW":
            out[cols[3].split("@")[0]] = (int(cols[0], 16), int(cols[1], 16))
        elif len(cols) == 3 and cols[1] in "tTwW":
            out[cols[2].split("@")[0]] = (int(cols[0], 16), 0)
    return out


class Target:
    """A running target program and the addresses it reported."""

    def __init__(self, program: Path) -> None:
        self.proc = subprocess.Popen(
            [str(program)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.pid = self.proc.pid
        self.addresses = self._read_until("ready")

    def _read_until(self, marker: str) -> dict[str, int]:
        assert self.proc.stdout is not None
        out: dict[str, int] = {}
        for line in self.proc.stdout:
            line = line.strip()
            if line == marker:
                return out
            name, _, hex_addr = line.partition(" ")
            out[name] = int(hex_addr, 16)
        raise RuntimeError(f"target ended before {marker!r}")

    def load(self, library: Path) -> dict[str, int]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"load {library}\n")
        self.proc.stdin.flush()
        found = self._read_until("loaded")
        self.addresses.update(found)
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
