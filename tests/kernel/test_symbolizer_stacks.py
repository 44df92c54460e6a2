"""Kernel test: stacks sampled by a real perf-event BPF program, symbolized.

A native program built here with frame pointers spends its time in ``zt_spin`` called from
``zt_outer`` called from ``main``, and in a loop of getppid system calls. The user stacks the
kernel walks must come out as that chain, and the kernel stacks under the system calls as
named kernel functions: the Symbolizer against addresses it did not choose.
"""

from __future__ import annotations

import importlib
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.ebpf_required import require_ebpf

require_ebpf("sched/sched_switch")

from tests.unit.native_programs import build  # noqa: E402
from zerotrace_collector.probes.bcc_loader import bcc_for, compile_program  # noqa: E402
from zerotrace_collector.symbols import Symbolizer  # noqa: E402

pytestmark = pytest.mark.kernel

PROGRAM = Path(__file__).with_name("symbolizer_stacks.bpf.c")
BUSY_C = r"""
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) unsigned long zt_spin(unsigned long n) {
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < n; i++) x += i;
    return x;
}
__attribute__((noinline)) unsigned long zt_outer(unsigned long n) { return zt_spin(n) + 1; }
__attribute__((noinline)) void zt_syscalls(int n) {
    for (int i = 0; i < n; i++) syscall(SYS_getppid);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void) {
    char line[64];
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
    double end = now() + 1.5;
    unsigned long sink = 0;
    while (now() < end) {
        sink += zt_outer(2000000);
        zt_syscalls(3000);
    }
    printf("done %lu\n", sink & 1);
    fflush(stdout);
    fgets(line, sizeof line, stdin); /* stay alive until the stacks are read */
    return 0;
}
"""
SAMPLE_HZ = 997  # a prime: no lock-step with the program's own periods


def test_sampled_stacks_name_the_call_chain(tmp_path: Path) -> None:
    bcc = importlib.import_module("bcc")  # untyped

    busy = build(tmp_path, "zt_busy", BUSY_C, "-fno-omit-frame-pointer")
    proc = subprocess.Popen([str(busy)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        bpf_class = bcc_for("symbolizer stacks test", [])
        bpf = compile_program(bpf_class, PROGRAM.read_text(), [f"-DTARGET_PID={proc.pid}"], PROGRAM)
        bpf.attach_perf_event(
            ev_type=bcc.PerfType.SOFTWARE,
            ev_config=bcc.PerfSWConfig.CPU_CLOCK,
            fn_name=b"on_sample",
            sample_freq=SAMPLE_HZ,
        )
        try:
            began = time.monotonic()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().startswith("done")
            assert time.monotonic() - began < 30
            stacks = bpf[b"stacks"]
            sym = Symbolizer()
            samples: Counter[tuple[tuple[str, ...], tuple[str, ...]]] = Counter()
            for key, count in bpf[b"counts"].items():
                user = list(stacks.walk(key.user_id)) if key.user_id >= 0 else []
                kernel = list(stacks.walk(key.kernel_id)) if key.kernel_id >= 0 else []
                frames = (
                    tuple(sym.user_frames(proc.pid, user)),
                    tuple(sym.kernel_frames(kernel)),
                )
                samples[frames] += count.value
        finally:
            bpf.cleanup()
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()

    total = sum(samples.values())
    assert total > 200, samples  # ~1.5 s at 997 Hz, fewer when the CPU is shared
    spin = "native:zt_spin [zt_busy]"
    in_spin = {k: n for k, n in samples.items() if k[0] and k[0][0] == spin}
    chained = sum(
        n
        for (user, _), n in in_spin.items()
        if user[1:3] == ("native:zt_outer [zt_busy]", "native:main [zt_busy]")
    )
    print(f"samples {total}, in zt_spin {sum(in_spin.values())}, of which chained {chained}")
    assert sum(in_spin.values()) > total * 0.3, samples
    assert chained >= 0.9 * sum(in_spin.values()), in_spin
    # Under the system calls: kernel frames, every one of them named.
    kernel_samples = {k: n for k, n in samples.items() if k[1]}
    assert kernel_samples, samples
    named = sum(n for (_, kernel), n in kernel_samples.items() if "kernel:[unknown]" not in kernel)
    assert named >= 0.95 * sum(kernel_samples.values()), kernel_samples
    kernel_names = {f for (_, kernel) in kernel_samples for f in kernel}
    assert "kernel:do_syscall_64" in kernel_names, kernel_names
    # libc's syscall() keeps no frame pointer, so the walk from it skips zt_syscalls (the
    # caller's frame is read as its own): the libc frame and main are what can be named.
    syscall_user = [u for (u, kernel) in kernel_samples if "kernel:do_syscall_64" in kernel]
    assert any(u[:1] == ("native:syscall [libc.so.6]",) for u in syscall_user), syscall_user
