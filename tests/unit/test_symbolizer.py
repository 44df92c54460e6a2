"""The Symbolizer on real processes: programs built here report their own function
addresses, and their frames must name those functions (or say honestly that they cannot)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.native_programs import (
    Target,
    build_library,
    build_target,
    have_compilers,
    nm_symbols,
    stripped,
)
from tests.unit.test_elf_symbols import _file_offset
from zerotrace_collector.symbols import Symbolizer
from zerotrace_collector.symbols.proc_maps import parse_proc_maps

pytestmark = pytest.mark.skipif(not have_compilers(), reason="needs gcc, g++ and binutils")
ROOT = os.geteuid() == 0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("symbolizer")
    build_target(folder, "zt_target", "-pie", "-fPIE")
    build_target(folder, "zt_other", "-no-pie")
    stripped(folder / "zt_target", "zt_target_stripped")
    build_library(folder, "libzt.so")
    return folder


@pytest.fixture
def targets() -> Iterator[list[Target]]:
    started: list[Target] = []
    yield started
    for target in started:
        target.stop()


def start(targets: list[Target], program: Path) -> Target:
    target = Target(program)
    targets.append(target)
    return target


def test_frames_of_a_running_program(built: Path, targets: list[Target]) -> None:
    t = start(targets, built / "zt_target")
    sym = Symbolizer()
    a, b = t.addresses["zt_alpha"], t.addresses["zt_beta"]
    assert sym.user_frames(t.pid, [a + 1, b, a]) == [
        "native:zt_alpha [zt_target]",
        "native:zt_beta [zt_target]",
        "native:zt_alpha [zt_target]",
    ]
    assert sym.module_of(t.pid, a) == "zt_target"
    assert sym.module_of(t.pid, 8) is None
    assert sym.user_frames(t.pid, []) == []
    counts = sym.counters()
    assert counts["maps_read"] == 1 and counts["elf_loaded"] == 1 and counts["processes"] == 1


def test_stripped_program_gives_module_and_file_offset(built: Path, targets: list[Target]) -> None:
    t = start(targets, built / "zt_target_stripped")
    sym = Symbolizer()
    truth = nm_symbols(built / "zt_target")  # the same code, with its symbols
    offset = _file_offset(built / "zt_target", truth["zt_beta"][0])
    assert sym.user_frames(t.pid, [t.addresses["zt_beta"] + 3]) == [
        f"native:zt_target_stripped+0x{offset + 3:x}"
    ]
    assert sym.counters()["no_symbol"] == 1


def test_library_loaded_after_the_first_stack(built: Path, targets: list[Target]) -> None:
    t = start(targets, built / "zt_other")
    clock = Clock()
    sym = Symbolizer(clock=clock, maps_reread_s=0.5)
    assert sym.user_frames(t.pid, [t.addresses["zt_alpha"]]) == ["native:zt_alpha [zt_other]"]
    lib = t.load(built / "libzt.so")
    # Within the re-read interval the new library is not looked for: a garbage address in
    # every stack must not cost a maps read each.
    assert sym.user_frames(t.pid, [lib["zt_lib_fn"]]) == [
        f"native:[unknown]+0x{lib['zt_lib_fn']:x}"
    ]
    clock.now += 1.0
    frames = sym.user_frames(t.pid, [lib["zt_lib_static"], lib["zt_lib_fn"], lib["zt_asm_label"]])
    assert frames == [
        "native:zt_lib_static [libzt.so]",
        "native:zt_lib_fn [libzt.so]",
        "native:zt_asm_label [libzt.so]",
    ]
    assert sym.counters()["maps_reread"] == 1
    assert sym.user_frames(t.pid, [t.addresses["zt_alpha"]]) == ["native:zt_alpha [zt_other]"]


def test_deleted_library(built: Path, targets: list[Target], tmp_path: Path) -> None:
    lib = shutil.copy(built / "libzt.so", tmp_path / "libzt_del.so")
    t = start(targets, built / "zt_target")
    found = t.load(Path(lib))
    os.unlink(lib)
    maps = parse_proc_maps(Path(f"/proc/{t.pid}/maps").read_text())
    assert any(m.deleted and m.module == "libzt_del.so" for m in maps)
    sym = Symbolizer()
    frame = sym.user_frames(t.pid, [found["zt_lib_static"] + 2])[0]
    counts = sym.counters()
    assert counts["deleted_file"] == 1
    if ROOT:  # /proc/PID/map_files still opens the unlinked file
        assert frame == "native:zt_lib_static [libzt_del.so]"
    else:
        assert frame.startswith("native:libzt_del.so+0x")
        assert counts["unreadable_file"] == 1


def test_process_gone_and_exited_mid_sample(built: Path, targets: list[Target]) -> None:
    gone = start(targets, built / "zt_target")
    gone.stop()
    sym = Symbolizer()
    assert sym.user_frames(gone.pid, [0x1234, 0xABC]) == [
        "native:[unknown]+0x1234",
        "native:[unknown]+0xabc",
    ]
    assert sym.module_of(gone.pid, 0x1234) is None
    assert sym.counters()["process_gone"] == 1
    # Known before it exited: samples still buffered when it exits keep their names.
    t = start(targets, built / "zt_target")
    a = t.addresses["zt_alpha"]
    assert sym.user_frames(t.pid, [a]) == ["native:zt_alpha [zt_target]"]
    t.stop()
    assert sym.user_frames(t.pid, [a, t.addresses["zt_beta"]]) == [
        "native:zt_alpha [zt_target]",
        "native:zt_beta [zt_target]",
    ]
    sym.forget(t.pid)
    assert sym.user_frames(t.pid, [a]) == [f"native:[unknown]+0x{a:x}"]
    assert sym.counters()["process_gone"] == 2


def test_zombie_keeps_its_frames(built: Path, targets: list[Target]) -> None:
    t = start(targets, built / "zt_target")
    sym = Symbolizer()
    a = t.addresses["zt_alpha"]
    assert sym.user_frames(t.pid, [a]) == ["native:zt_alpha [zt_target]"]
    t.proc.kill()
    for _ in range(200):  # dead but not reaped: a zombie, same pid, same start time
        stat = Path(f"/proc/{t.pid}/stat").read_text()
        if stat.rpartition(")")[2].split()[0] == "Z":
            break
        time.sleep(0.005)
    else:
        raise AssertionError("no zombie")
    assert sym.user_frames(t.pid, [a]) == ["native:zt_alpha [zt_target]"]
    assert "pid_reused" not in sym.counters()


def test_reused_pid_in_a_proc_tree(built: Path, targets: list[Target], tmp_path: Path) -> None:
    """The same pid number shown first for one process, then for another (a proc tree of
    links to the real /proc entries): the second must not get the first one's names."""
    proc = tmp_path / "proc"
    proc.mkdir()
    first = start(targets, built / "zt_target")
    (proc / "4242").symlink_to(f"/proc/{first.pid}")
    sym = Symbolizer(proc_root=str(proc))
    a1 = first.addresses["zt_alpha"]
    assert sym.user_frames(4242, [a1]) == ["native:zt_alpha [zt_target]"]
    time.sleep(0.03)  # start times are in clock ticks (10 ms): be a tick apart
    second = start(targets, built / "zt_target_stripped")
    (proc / "4242").unlink()
    (proc / "4242").symlink_to(f"/proc/{second.pid}")
    frame = sym.user_frames(4242, [second.addresses["zt_alpha"]])[0]
    assert frame.startswith("native:zt_target_stripped+0x")
    assert sym.counters()["pid_reused"] == 1


@pytest.mark.skipif(not ROOT, reason="steering pid allocation needs root")
def test_reused_pid_for_real(built: Path, targets: list[Target]) -> None:
    """A real pid handed to a new process (steered through ns_last_pid), watched by pidfd."""
    sym = Symbolizer()
    for _ in range(20):
        first = start(targets, built / "zt_target")
        assert sym.user_frames(first.pid, [first.addresses["zt_alpha"]]) == [
            "native:zt_alpha [zt_target]"
        ]
        first.stop()
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(first.pid - 1))
        second = start(targets, built / "zt_other")
        if second.pid == first.pid:
            break
        sym.forget(first.pid)  # another process took the pid first: try again
    else:
        pytest.skip("the machine kept taking the pid first")
    assert sym.user_frames(second.pid, [second.addresses["zt_beta"]]) == [
        "native:zt_beta [zt_other]"
    ]
    assert sym.counters()["pid_reused"] == 1


def test_memory_that_is_no_elf_file(targets: list[Target], tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(b"not an elf file at all" * 300)
    code = (
        "import mmap, sys\n"
        f"f = open({str(data)!r}, 'rb')\n"
        "m = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC)\n"
        "print('ready', flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        maps = parse_proc_maps(Path(f"/proc/{child.pid}/maps").read_text())
        mapped = next(m for m in maps if m.path == str(data))
        heap = next(m for m in maps if m.path == "[heap]")
        sym = Symbolizer()
        assert sym.user_frames(child.pid, [mapped.start + 0x10, heap.start + 8]) == [
            "native:data.bin+0x10",
            f"native:[unknown]+0x{heap.start + 8:x}",
        ]
        counts = sym.counters()
        assert counts["bad_elf"] == 1 and counts["unmapped_address"] == 1
    finally:
        child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


def test_processes_are_bounded(built: Path, targets: list[Target]) -> None:
    sym = Symbolizer(max_processes=2)
    for _ in range(3):
        t = start(targets, built / "zt_target")
        assert sym.user_frames(t.pid, [t.addresses["zt_alpha"]]) == ["native:zt_alpha [zt_target]"]
    counts = sym.counters()
    assert counts["processes"] == 2 and counts["process_evicted"] == 1
    assert counts["elf_loaded"] == 1  # one file, shared by the three processes


def test_a_known_stack_costs_microseconds(built: Path, targets: list[Target]) -> None:
    t = start(targets, built / "zt_target")
    t.load(built / "libzt.so")
    names = ("zt_alpha", "zt_beta", "zt_lib_fn", "zt_lib_static", "zt_asm_label")
    stack = [t.addresses[names[i % 5]] + i for i in range(20)]
    sym = Symbolizer()
    first = sym.user_frames(t.pid, stack)
    assert all(" [" in f for f in first)
    rounds = 2000
    began = time.perf_counter()
    for _ in range(rounds):
        assert sym.user_frames(t.pid, stack) == first
    per_stack_us = (time.perf_counter() - began) / rounds * 1e6
    print(f"20-frame stack: {per_stack_us:.1f} us")
    assert per_stack_us < 200  # about 5 us here; generous for a loaded CI machine


def test_kernel_frames(tmp_path: Path) -> None:
    fake = tmp_path / "kallsyms"
    fake.write_text(
        "ffffffff81000000 T _stext\nffffffff81001000 T schedule\nffffffff81002000 d x\n"
    )
    sym = Symbolizer(kallsyms_path=str(fake))
    assert sym.kernel_frames([0xFFFFFFFF81001010, 0xFFFFFFFF81002000, 5]) == [
        "kernel:schedule",
        "kernel:[unknown]",
        "kernel:[unknown]",
    ]
    assert sym.counters()["kernel_unknown"] == 2
    hidden = tmp_path / "hidden"
    hidden.write_text("0000000000000000 T _stext\n")
    blind = Symbolizer(kallsyms_path=str(hidden))
    assert blind.kernel_frames([0xFFFFFFFF81001010]) == ["kernel:[unknown]"]
    assert blind.counters()["kallsyms_unavailable"] == 1
    missing = Symbolizer(kallsyms_path=str(tmp_path / "none"))
    assert missing.kernel_frames([1]) == ["kernel:[unknown]"]


@pytest.mark.skipif(not ROOT, reason="kallsyms addresses need root")
def test_kernel_frames_of_the_running_kernel() -> None:
    text = Path("/proc/kallsyms").read_text()
    address = next(
        int(cols[0], 16)
        for cols in (line.split() for line in text.splitlines())
        if cols[2] == "schedule" and cols[1] in "tT"
    )
    assert Symbolizer().kernel_frames([address + 8]) == ["kernel:schedule"]


def test_vdso_functions_are_named(built: Path, targets: list[Target], tmp_path: Path) -> None:
    t = start(targets, built / "zt_target")
    maps = parse_proc_maps(Path(f"/proc/{t.pid}/maps").read_text())
    vdso = next(m for m in maps if m.path == "[vdso]")
    # Where clock_gettime lies: the vdso's symbols as binutils reads them, from a copy taken
    # out of this process (the same image in every process of this kernel).
    own = next(
        m for m in parse_proc_maps(Path("/proc/self/maps").read_text()) if m.path == "[vdso]"
    )
    with open("/proc/self/mem", "rb") as mem:
        mem.seek(own.start)
        copy = tmp_path / "vdso.so"
        copy.write_bytes(mem.read(own.end - own.start))
    truth = nm_symbols(copy, dynamic=True)
    start_, _ = truth.get("clock_gettime", truth.get("__vdso_clock_gettime", (0, 0)))
    assert start_, truth
    sym = Symbolizer()
    assert sym.user_frames(t.pid, [vdso.start + start_ + 2]) == ["native:clock_gettime [vdso]"]
    assert sym.module_of(t.pid, vdso.start) == "[vdso]"


def test_kallsyms_is_read_again_after_a_miss_rarely(tmp_path: Path) -> None:
    path = tmp_path / "kallsyms"
    path.write_text(
        "ffffffff81000000 T _stext\nffffffff81001000 T schedule\nffffffff81002000 d x\n"
    )
    clock = Clock()
    sym = Symbolizer(kallsyms_path=str(path), clock=clock, kallsyms_reread_s=60)
    late = 0xFFFFFFFFA0000010
    assert sym.kernel_frames([late]) == ["kernel:[unknown]"]
    # A BPF program loaded since: its symbol appears in kallsyms.
    path.write_text(path.read_text() + "ffffffffa0000000 t bpf_prog_6deef7357e7b4530_F\n")
    path.write_text(path.read_text() + "ffffffffa0000100 t bpf_prog_end\n")
    assert sym.kernel_frames([late]) == ["kernel:[unknown]"]  # too soon to read again
    clock.now += 61
    assert sym.kernel_frames([late, late]) == ["kernel:bpf_prog_6deef7357e7b4530_F"] * 2
    assert sym.counters()["kallsyms_reread"] == 1


def test_garbage_addresses_read_the_maps_less_and_less(built: Path, targets: list[Target]) -> None:
    t = start(targets, built / "zt_target")
    clock = Clock()
    sym = Symbolizer(clock=clock, maps_reread_s=0.5)
    garbage = 0x10

    def rereads_after(seconds: float) -> int:
        clock.now += seconds
        assert sym.user_frames(t.pid, [garbage]) == ["native:[unknown]+0x10"]
        return sym.counters().get("maps_reread", 0)

    assert rereads_after(0) == 0  # just read
    assert rereads_after(0.6) == 1  # useless: the wait doubles to 1 s
    assert rereads_after(0.6) == 1
    assert rereads_after(0.5) == 2  # useless again: 2 s
    assert rereads_after(1.5) == 2
    lib = t.load(built / "libzt.so")
    clock.now += 0.3  # 1.8 s after the last read: still waiting
    unknown = f"native:[unknown]+0x{lib['zt_lib_fn']:x}"
    assert sym.user_frames(t.pid, [lib["zt_lib_fn"]]) == [unknown]
    clock.now += 0.3
    assert sym.user_frames(t.pid, [lib["zt_lib_fn"]]) == ["native:zt_lib_fn [libzt.so]"]
    assert sym.counters()["maps_reread"] == 3
    assert rereads_after(0.6) == 4  # a useful read reset the wait to 0.5 s
    assert sym.user_frames(t.pid, [-1]) == ["native:[unknown]+0xffffffffffffffff"]


def test_one_symbolizer_shared_by_threads(built: Path, targets: list[Target]) -> None:
    first = start(targets, built / "zt_target")
    second = start(targets, built / "zt_other")
    sym = Symbolizer(max_processes=1)  # the two processes evict each other all the time
    expected = {
        first.pid: ["native:zt_alpha [zt_target]", "native:zt_beta [zt_target]"],
        second.pid: ["native:zt_alpha [zt_other]", "native:zt_beta [zt_other]"],
    }
    stacks = {t.pid: [t.addresses["zt_alpha"], t.addresses["zt_beta"]] for t in (first, second)}
    errors: list[str] = []

    def work(pid: int) -> None:
        for i in range(300):
            got = sym.user_frames(pid, stacks[pid])
            if got != expected[pid]:
                errors.append(f"{pid}: {got}")
            if i % 50 == 0:
                sym.forget(pid)

    threads = [threading.Thread(target=work, args=(pid,)) for pid in (first.pid, second.pid) * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sym.counters()["elf_loaded"] == 2


def test_frame_cache_is_bounded_over_all_processes(built: Path, targets: list[Target]) -> None:
    t = start(targets, built / "zt_target")
    sym = Symbolizer(max_frames=10)  # a floor of 1024 per process applies
    base = t.addresses["zt_alpha"]
    stack = [base - 4096 + i for i in range(3000)]
    frames = sym.user_frames(t.pid, stack)
    assert len(frames) == 3000 and all(f.startswith("native:") for f in frames)
    assert sym.user_frames(t.pid, stack) == frames  # the same answers from a cleared cache


def test_public_surface() -> None:
    """Others code against exactly this."""
    import inspect

    import zerotrace_collector.symbols as package

    assert package.__all__ == ["Symbolizer"]
    methods = {
        name: str(inspect.signature(getattr(Symbolizer, name)))
        for name in ("user_frames", "kernel_frames", "module_of", "forget", "counters")
    }
    assert methods == {
        "user_frames": "(self, pid: 'int', addresses: 'Sequence[int]') -> 'list[str]'",
        "kernel_frames": "(self, addresses: 'Sequence[int]') -> 'list[str]'",
        "module_of": "(self, pid: 'int', address: 'int') -> 'str | None'",
        "forget": "(self, pid: 'int') -> 'None'",
        "counters": "(self) -> 'dict[str, int]'",
    }
    init = inspect.signature(Symbolizer.__init__).parameters
    assert list(init)[:3] == ["self", "proc_root", "kallsyms_path"]
    assert init["proc_root"].default == "/proc"
    assert init["kallsyms_path"].default == "/proc/kallsyms"
    assert all(p.kind is p.KEYWORD_ONLY for p in list(init.values())[3:])


def test_a_path_that_names_another_file_now(
    built: Path, targets: list[Target], tmp_path: Path
) -> None:
    """The maps name a path whose file is no longer the mapped inode (and no map_files to
    reach the old one): module+offset, not the new file's symbols."""
    t = start(targets, built / "zt_target")
    lib = t.load(built / "libzt.so")
    real = Path(f"/proc/{t.pid}")
    fake = tmp_path / "proc" / "77"
    fake.mkdir(parents=True)
    (fake / "stat").write_text((real / "stat").read_text())
    lines = []
    for line in (real / "maps").read_text().splitlines():
        cols = line.split()
        if len(cols) == 6 and cols[5] == str(built / "libzt.so"):
            line = line.replace(f" {cols[4]} ", f" {int(cols[4]) + 1} ")
        lines.append(line)
    (fake / "maps").write_text("\n".join(lines) + "\n")
    sym = Symbolizer(proc_root=str(tmp_path / "proc"))
    frames = sym.user_frames(77, [lib["zt_lib_fn"], t.addresses["zt_alpha"]])
    assert frames[0].startswith("native:libzt.so+0x")
    assert frames[1] == "native:zt_alpha [zt_target]"
    assert sym.counters()["file_replaced"] == 1


def test_a_process_does_not_keep_an_image_the_elf_cache_let_go() -> None:
    from zerotrace_collector.symbols.elf_symbols import EMPTY_TABLE, ElfImage
    from zerotrace_collector.symbols.proc_maps import Mapping
    from zerotrace_collector.symbols.process_state import ProcessState

    loads: list[ElfImage] = []
    held: list[ElfImage] = []  # stands in for the ElfCache: what it holds stays alive

    def resolve(_mapping: Mapping) -> ElfImage:
        image = ElfImage((), EMPTY_TABLE, "symtab")
        loads.append(image)
        held[:] = [image]
        return image

    state = ProcessState.__new__(ProcessState)
    state.images = {}
    mapping = Mapping(0x1000, 0x2000, "r-xp", 0, (8, 1), 42, "/lib/x.so")
    first = state.image(mapping, resolve)
    assert state.image(mapping, resolve) is first and len(loads) == 1
    del first
    loads.clear()
    held.clear()  # the cache evicted it: nothing keeps it alive, so it is resolved again
    assert state.image(mapping, resolve) is not None and len(loads) == 1
