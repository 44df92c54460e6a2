"""Kernel test: the GPU probe sees exactly the CUDA calls a Python program makes through a
fake CUDA runtime and driver, including when the libraries are loaded after the probe.

The program (tests/harness/gpu_app.py) starts with no CUDA library mapped, waits for a go
file, then dlopens ``libcudart.so.12`` and ``libcuda.so.1`` (built here from
tests/harness/fake_cuda/fake_cudart.c) and makes 28 calls from known Python functions: the
feed's raw.gpu records must be those calls, one for one, with the same addresses, sizes
and results, frees matching allocations by address, and frames ending in ``cuda:<api>``.

Needs root, bcc, kernel headers (scripts/setup-ebpf.sh), syscall tracepoints and gcc.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.ebpf_required import require_ebpf

require_ebpf("syscalls/sys_enter_openat")

from tests.harness.fake_cuda.build import (  # noqa: E402
    FakeCuda,
    build_fake_cuda,
    build_nested_runtime,
)
from tests.harness.services import Service  # noqa: E402
from zerotrace import names  # noqa: E402
from zerotrace.codec import AvroCodec  # noqa: E402
from zerotrace_collector.feeds import RawRecord  # noqa: E402
from zerotrace_collector.gpu_feed import GpuFeed  # noqa: E402
from zerotrace_collector.probes.gpu import GpuProbe  # noqa: E402
from zerotrace_collector.python_procs import inspect  # noqa: E402
from zerotrace_collector.symbols import Symbolizer  # noqa: E402

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "tests" / "harness" / "gpu_app.py"
MIB = 1 << 20
# What gpu_app.py does, per API (see its docstring).
EXPECTED_CALLS = {
    "cudaMalloc": 8,
    "cudaFree": 2,
    "cudaLaunchKernel": 7,
    "cuMemAlloc_v2": 2,
    "cuMemFree_v2": 1,
    "cudaMallocAsync": 1,
    "cudaFreeAsync": 1,
    "cudaMallocManaged": 1,
    "cuMemAllocAsync": 1,
    "cuMemFreeAsync": 1,
    "cuLaunchKernel": 3,
}
ALLOCS = ("cudaMalloc", "cudaMallocAsync", "cudaMallocManaged", "cuMemAlloc_v2", "cuMemAllocAsync")


@dataclass
class Run:
    records: list[RawRecord]
    truth: list[dict[str, Any]]
    pid: int
    counters: dict[str, int]


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory: pytest.TempPathFactory) -> FakeCuda:
    # Built before any probe is attached: the linker writing libcudart.so.12 would
    # otherwise be an opener of a CUDA-named file.
    return build_fake_cuda(tmp_path_factory.mktemp("fake_cuda"))


def run_app(
    feed: GpuFeed, lib_dir: Path, work: Path, calls: int, python: str = sys.executable
) -> Run:
    go, truth_file, exit_file = work / "go", work / "truth.json", work / "exit"
    app = subprocess.Popen(
        [python, str(APP), str(lib_dir), str(go), str(truth_file), str(exit_file)]
    )
    try:
        # Followed once its interpreter is up (libpython mapped), as a running program is:
        # a process learnt earlier than that shows Python frames only from a later poll.
        deadline = time.monotonic() + 10
        while inspect(app.pid) is None:
            assert time.monotonic() < deadline, "the app's interpreter never came up"
            time.sleep(0.005)
        # Only this app is traced: other programs on the host (other tests) stay untouched.
        feed.probe.follow_pid(app.pid)
        # The app has not mapped any CUDA library yet: the probe cannot have attached to it.
        assert "libcud" not in Path(f"/proc/{app.pid}/maps").read_text()
        go.touch()
        records: list[RawRecord] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (truth_file.exists() and len(records) >= calls):
            records += [r for r in feed.poll(50) if r.pid == app.pid]
        records += [r for r in feed.poll(50) if r.pid == app.pid]  # nothing more may come
        truth = json.loads(truth_file.read_text())
        return Run(records, truth, app.pid, feed.counters())
    finally:
        exit_file.touch()
        app.wait(timeout=30)


@pytest.fixture(scope="module")
def late_run(fake_cuda: FakeCuda, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    probe = GpuProbe(REPO / "bpf", follow=True)
    feed = GpuFeed(probe, "node-test", 0, Symbolizer())
    feed.attach()
    try:
        yield run_app(feed, fake_cuda.runtime.parent, tmp_path_factory.mktemp("app"), 28)
    finally:
        feed.close()


def test_every_call_is_recorded_once_in_order(late_run: Run) -> None:
    got = [
        (r.datum["api"], r.datum["address"], r.datum["size"], r.datum["result"])
        for r in late_run.records
    ]
    want = [(t["api"], t["address"], t["size"], t["result"]) for t in late_run.truth]
    assert len(want) == sum(EXPECTED_CALLS.values()) == 28
    assert got == want
    assert Counter(r.datum["api"] for r in late_run.records) == EXPECTED_CALLS


def test_known_sizes_per_calling_function(late_run: Run) -> None:
    by_func: Counter[tuple[str, int]] = Counter()
    for rec, truth in zip(late_run.records, late_run.truth, strict=True):
        if rec.datum["api"] in ALLOCS:
            by_func[(truth["func"], rec.datum["size"])] += 1
    assert by_func[("alloc_weights", 7 * MIB)] == 3
    assert by_func[("alloc_cache", 1 * MIB)] == 5
    assert by_func[("driver_buffers", 3 * MIB)] == 2


def test_frees_match_allocations_by_address(late_run: Run) -> None:
    allocated = {
        r.datum["address"]: r.datum["size"] for r in late_run.records if r.datum["api"] in ALLOCS
    }
    freed = [r.datum["address"] for r in late_run.records if "Free" in r.datum["api"]]
    assert len(freed) == 5 and all(a in allocated for a in freed)
    in_use = sum(allocated.values()) - sum(allocated[a] for a in freed)
    # weights 21 MiB + cache 3 of 5 MiB + driver 3 of 6 MiB + managed 4 MiB
    assert in_use == (21 + 3 + 3 + 4) * MIB


def test_records_are_valid_raw_gpu_events(late_run: Run, codec: AvroCodec) -> None:
    for rec in late_run.records:
        assert rec.topic == names.RAW_GPU.name and rec.key == str(late_run.pid).encode()
        assert codec.decode(codec.encode(rec.record, rec.datum))[1] == rec.datum
        d = rec.datum
        assert d["tid"] == late_run.pid and d["start_ns"] <= d["end_ns"]
        assert d["frames"][0] == f"thread:{d['tid']}"
        assert d["frames"][-1] == f"cuda:{d['api']}"
    assert len({r.datum["event_id"] for r in late_run.records}) == len(late_run.records)


def python_function(frames: list[str]) -> list[str]:
    """Names of the py: frames, root first ('py:Gpu.malloc (app.py:49)' -> 'Gpu.malloc')."""
    return [f[3:].split(" (", 1)[0] for f in frames if f.startswith("py:")]


def test_every_call_is_attributed_to_its_python_caller(late_run: Run) -> None:
    for rec, truth in zip(late_run.records, late_run.truth, strict=True):
        chain = python_function(rec.datum["frames"])
        assert chain[0] == "<module>" and "main" in chain, chain
        assert truth["func"] in chain, (truth, rec.datum["frames"])
        # Python frames come first, then the native ones below them, then the API.
        kinds = [f.split(":", 1)[0] for f in rec.datum["frames"][1:-1]]
        assert kinds == sorted(kinds, key=lambda k: k != "py"), rec.datum["frames"]
        assert str(APP) in rec.datum["frames"][1]


def test_mem_alloc_and_in_use_per_stack_are_exact(late_run: Run) -> None:
    """What profiler-agg folds: bytes per calling stack, and what stays after the frees."""
    alloc: Counter[tuple[str, ...]] = Counter()
    owner: dict[int, tuple[str, ...]] = {}
    sizes: dict[int, int] = {}
    for rec in late_run.records:
        d = rec.datum
        if d["api"] in ALLOCS:
            stack = tuple(d["frames"][:-1])  # the API leaf aside: runtime and driver differ
            alloc[stack] += d["size"]
            owner[d["address"]], sizes[d["address"]] = stack, d["size"]
    in_use = Counter(alloc)
    for rec in late_run.records:
        if "Free" in rec.datum["api"]:
            in_use[owner[rec.datum["address"]]] -= sizes[rec.datum["address"]]

    def by_function(counts: Counter[tuple[str, ...]], func: str) -> list[int]:
        return [v for k, v in counts.items() if func in python_function(list(k))]

    assert by_function(alloc, "alloc_weights") == [21 * MIB]  # one stack: 3 x 7 MiB
    assert by_function(alloc, "alloc_cache") == [5 * MIB]
    assert by_function(in_use, "alloc_weights") == [21 * MIB]
    assert by_function(in_use, "alloc_cache") == [3 * MIB]  # 2 of 5 blocks freed
    assert by_function(in_use, "driver_buffers") == [3 * MIB]
    launches = Counter(
        tuple(r.datum["frames"]) for r in late_run.records if r.datum["api"] == "cudaLaunchKernel"
    )
    assert list(launches.values()) == [7]


def test_late_loaded_libraries_were_stopped_once_and_resumed(late_run: Run) -> None:
    c = late_run.counters
    assert c["stops"] == 2 and c["resumed"] == 2 and c["libraries"] == 2
    assert c["lost"] == 0 and c["malformed"] == 0 and c["nested"] == 0
    assert c["python_processes"] == 1 and c.get("py_read_fail", 0) == 0
    # Each stop lasted from the open to SIGCONT: attach work, well under a second here.
    max_ms, total_ms = c["pause_ns_max"] / 1e6, c["pause_ns_total"] / 1e6
    print(f"library-open pauses: max {max_ms:.1f} ms, total {total_ms:.1f} ms")
    assert 0 < c["pause_ns_max"] < 1_000_000_000


def test_a_library_probed_before_start_is_seen_by_a_new_process(
    fake_cuda: FakeCuda, tmp_path: Path
) -> None:
    """Libraries given at attach are probed inode-wide, before any process maps them."""
    probe = GpuProbe(REPO / "bpf", follow=True, libraries=[fake_cuda.runtime, fake_cuda.driver])
    feed = GpuFeed(probe, "node-test", 0, Symbolizer())
    feed.attach()
    try:
        run = run_app(feed, fake_cuda.runtime.parent, tmp_path, 28)
    finally:
        feed.close()
    assert len(run.records) == 28
    assert run.counters["libraries"] == 2
    for rec, truth in zip(run.records, run.truth, strict=True):
        assert truth["func"] in python_function(rec.datum["frames"])
    # Not known per cgroup yet: the first opener is stopped once per file, and resumed. (In
    # the whole suite it was once seen not stopped at all, calls still all probed: what counts
    # here is that the library was probed before the process mapped it, and no stop is left.)
    assert run.counters["stops"] == run.counters["resumed"] <= 2


def test_a_library_without_the_symbols_is_counted_not_fatal(tmp_path: Path) -> None:
    fake = tmp_path / "libcudart.so.99"
    fake.write_bytes(Path("/proc/self/exe").read_bytes()[:4096])  # not a complete ELF
    empty = tmp_path / "libcuda.so.7"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "empty.so"), "-x", "c", "-"],
        input=b"int zt_nothing(void) { return 0; }\n",
        check=True,
    )
    (tmp_path / "empty.so").rename(empty)
    probe = GpuProbe(REPO / "bpf", libraries=[fake, empty, tmp_path / "libcudart.so.gone"])
    with probe:
        assert probe.counters()["no_symbols"] == 1
        assert probe.counters()["unreadable"] == 2
        assert len(probe.notes) == 3 and all("not probed" in n for n in probe.notes)
    assert os.path.exists(empty)


def wait_stopped(pid: int, limit_s: float = 20) -> None:
    deadline = time.monotonic() + limit_s
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "the app was not stopped at its library open"
        time.sleep(0.005)


def test_a_process_that_dies_while_stopped_is_counted_and_the_next_one_is_probed(
    fake_cuda: FakeCuda, tmp_path: Path
) -> None:
    probe = GpuProbe(REPO / "bpf", follow=True)
    feed = GpuFeed(probe, "node-test", 0, Symbolizer())
    feed.attach()
    try:
        lib_dir, work = fake_cuda.runtime.parent, tmp_path / "first"
        work.mkdir()
        app = subprocess.Popen(
            [sys.executable, str(APP), str(lib_dir), *(str(work / n) for n in ("go", "t", "x"))]
        )
        probe.follow_pid(app.pid)
        (work / "go").touch()
        wait_stopped(app.pid)  # stopped by the kernel side, not yet seen by user space
        app.kill()
        app.wait(timeout=10)
        assert feed.poll(50) == []
        assert feed.counters()["vanished"] >= 1 and feed.counters()["libraries"] == 0
        # The path was not marked known: the next process is stopped, probed and resumed.
        second = tmp_path / "second"
        second.mkdir()
        run = run_app(feed, lib_dir, second, 28)
    finally:
        feed.close()
    assert len(run.records) == 28 and run.counters["libraries"] == 2
    assert run.counters["stops"] == 3 and run.counters["resumed"] == 2


HOLD_LIBRARY = (
    "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print(1, flush=True); sys.stdin.read()"
)


def test_a_deleted_mapped_library_is_counted_not_fatal(fake_cuda: FakeCuda, tmp_path: Path) -> None:
    copy = tmp_path / "libcudart.so.12"
    copy.write_bytes(fake_cuda.runtime.read_bytes())
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_LIBRARY, str(copy)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == b"1\n"
            copy.unlink()
            with GpuProbe(REPO / "bpf", pid_filter=holder.pid) as probe:
                assert probe.counters()["deleted"] == 1 and probe.counters()["libraries"] == 0
                note = f"{copy} (pid {holder.pid}) was deleted after mapping: not probed"
                assert probe.notes == [note]
        finally:
            holder.kill()


def other_pythons() -> list[str]:
    """CPython 3.10/3.12/3.13 interpreters here ($ZEROTRACE_OTHER_PYTHON, .venv/other-python,
    pyenv's), one per version."""
    candidates = [os.environ.get("ZEROTRACE_OTHER_PYTHON", "")]
    candidates += sorted(glob.glob(str(REPO / ".venv/other-python/bin/python3.1[23]")))
    candidates += sorted(glob.glob("/root/.pyenv/versions/3.1[023].*/bin/python3.1[023]"))
    found: dict[str, str] = {}
    for c in candidates:
        if c and os.access(c, os.X_OK):
            found.setdefault(os.path.basename(os.path.realpath(c)), c)
    return list(found.values())


@pytest.mark.parametrize("python", other_pythons() or [None])
def test_python_frames_under_another_cpython(
    python: str | None, fake_cuda: FakeCuda, tmp_path: Path
) -> None:
    if python is None:
        pytest.skip("no CPython 3.10/3.12/3.13 here (set ZEROTRACE_OTHER_PYTHON)")
    feed = GpuFeed(GpuProbe(REPO / "bpf", follow=True), "node-test", 0, Symbolizer())
    feed.attach()
    try:
        run = run_app(feed, fake_cuda.runtime.parent, tmp_path, 28, python)
    finally:
        feed.close()
    assert [r.datum["api"] for r in run.records] == [t["api"] for t in run.truth]
    for rec, truth in zip(run.records, run.truth, strict=True):
        assert truth["func"] in python_function(rec.datum["frames"]), rec.datum["frames"]


NESTED_APP = """
import ctypes, sys
sys.stdin.readline()
lib = ctypes.CDLL(sys.argv[1])
out = []
for mib in (1, 2, 3):
    p = ctypes.c_void_p()
    assert lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(mib << 20)) == 0
    out.append(p.value)
print(*out, flush=True)
sys.stdin.readline()
"""


def test_a_runtime_call_that_enters_the_driver_is_reported_once(
    fake_cuda: FakeCuda, tmp_path: Path
) -> None:
    """NVIDIA's cudaMalloc allocates through libcuda: only the outer call is a record."""
    runtime = build_nested_runtime(tmp_path / "nested", fake_cuda.driver)
    feed = GpuFeed(GpuProbe(REPO / "bpf", follow=True), "node-test", 0, Symbolizer())
    feed.attach()
    try:
        with subprocess.Popen(
            [sys.executable, "-c", NESTED_APP, str(runtime)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        ) as app:
            assert app.stdin is not None and app.stdout is not None
            feed.probe.follow_pid(app.pid)
            app.stdin.write(b"go\n")
            app.stdin.flush()
            records: list[RawRecord] = []
            deadline = time.monotonic() + 20
            while len(records) < 3 and time.monotonic() < deadline:
                records += feed.poll(50)  # also resumes the app at each library open
            addresses = [int(a) for a in app.stdout.readline().split()]
            records += feed.poll(100)
            app.stdin.write(b"done\n")
            app.stdin.flush()
        counters = feed.counters()
    finally:
        feed.close()
    assert [(r.datum["api"], r.datum["address"], r.datum["size"]) for r in records] == [
        ("cudaMalloc", addr, mib << 20) for addr, mib in zip(addresses, (1, 2, 3), strict=True)
    ]
    # Both files are opened by one dlopen (libcuda as a DT_NEEDED): two stops, two resumes.
    assert counters["nested"] == 3 and counters["stops"] == counters["resumed"] == 2


THREADED_APP = """
import ctypes, sys, threading
sys.stdin.readline()
lib = ctypes.CDLL(sys.argv[1])
tids = {}

def alloc(name, mib):
    p = ctypes.c_void_p()
    assert lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(mib << 20)) == 0
    tids[name] = threading.get_native_id()

def worker_alloc():
    alloc("worker_alloc", 5)

def main_alloc():
    alloc("main_alloc", 2)

t = threading.Thread(target=worker_alloc)
t.start()
t.join()
main_alloc()
print(tids["worker_alloc"], tids["main_alloc"], flush=True)
sys.stdin.readline()
"""


def run_held_app(
    feed: GpuFeed, code: str, lib: Path, want: int
) -> tuple[int, list[RawRecord], bytes]:
    """Run `python -c code lib` under *feed*: followed once its interpreter is up, started by
    a line on stdin, polled until *want* records came; then its first line of output is read
    and a line lets it end. Returns its pid, its records and that line."""
    with subprocess.Popen(
        [sys.executable, "-c", code, str(lib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as app:
        assert app.stdin is not None and app.stdout is not None
        deadline = time.monotonic() + 10
        while inspect(app.pid) is None:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        feed.probe.follow_pid(app.pid)
        app.stdin.write(b"go\n")
        app.stdin.flush()
        records: list[RawRecord] = []
        deadline = time.monotonic() + 30
        while len(records) < want and time.monotonic() < deadline:
            records += [r for r in feed.poll(50) if r.pid == app.pid]
        line = app.stdout.readline()
        app.stdin.write(b"done\n")
        app.stdin.flush()
    return app.pid, records, line


def test_calls_from_two_threads_carry_each_thread_and_its_python_caller(
    fake_cuda: FakeCuda,
) -> None:
    feed = GpuFeed(GpuProbe(REPO / "bpf", follow=True), "node-test", 0, Symbolizer())
    feed.attach()
    try:
        pid, records, line = run_held_app(feed, THREADED_APP, fake_cuda.runtime, 2)
    finally:
        feed.close()
    worker_tid, main_tid = (int(t) for t in line.split())
    worker, main = (r.datum for r in records)
    assert (worker["tid"], worker["size"]) == (worker_tid, 5 * MIB) and worker_tid != pid
    assert (main["tid"], main["size"]) == (main_tid, 2 * MIB) and main_tid == pid
    assert worker["frames"][0] == f"thread:{worker_tid}"
    assert python_function(worker["frames"])[-2:] == ["worker_alloc", "alloc"]
    assert python_function(main["frames"])[-3:] == ["<module>", "main_alloc", "alloc"]


MANY_THREADS_APP = """
import ctypes, sys, threading, time
sys.stdin.readline()
lib = ctypes.CDLL(sys.argv[1])
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(100)]
for t in threads:
    t.start()

def main_alloc():
    p = ctypes.c_void_p()
    assert lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0

for _ in range(60):
    main_alloc()
    time.sleep(0.05)
stop.set()
print("done", flush=True)
sys.stdin.readline()
"""


def test_the_main_thread_past_the_walkers_reach_gets_its_python_frames(
    fake_cuda: FakeCuda,
) -> None:
    """100 newer Python threads put the main thread's state past the 64 the BPF walker looks
    at: once a call finds none, the feed reads the whole thread list (python_threads.py)
    and the main thread's later calls carry their Python caller."""
    feed = GpuFeed(GpuProbe(REPO / "bpf", follow=True), "node-test", 0, Symbolizer())
    feed.attach()
    try:
        _, records, line = run_held_app(feed, MANY_THREADS_APP, fake_cuda.runtime, 60)
        counters = feed.counters()
    finally:
        feed.close()
    assert line == b"done\n"
    assert len(records) == 60
    framed = [r for r in records if "main_alloc" in python_function(r.datum["frames"])]
    assert len(framed) >= 50, (len(framed), records[0].datum["frames"])
    assert counters["py_no_thread"] >= 1 and counters["py_thread_walks"] >= 1, counters


def test_a_process_held_at_its_library_open_goes_on_when_the_collector_is_killed(
    fake_cuda: FakeCuda, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The real collector (`--profile --pid`), hung (SIGSTOP) once attached, so it cannot
    resume what the kernel stops; the app opens its CUDA library and is stopped there; the
    collector is killed (SIGKILL): its stop guard continues the app within a second, and
    the app runs to its end."""

    work = tmp_path / "app"
    work.mkdir()
    go, truth, exit_file = work / "go", work / "truth.json", work / "exit"
    files = [str(f) for f in (go, truth, exit_file)]
    app = subprocess.Popen([sys.executable, str(APP), str(fake_cuda.runtime.parent), *files])
    env = {
        **os.environ,
        "ZEROTRACE_KAFKA": kafka_bootstrap,
        "ZEROTRACE_HOME": str(tmp_path / "home"),
        "ZEROTRACE_NODE_ID": "kernel-test-stop-guard",
    }
    args = ["collector", "--profile", "--no-files", "--pid", str(app.pid)]
    collector = Service("collector", args, env, tmp_path)
    try:
        collector.wait_for("collector attached", timeout_s=120)
        os.kill(collector.proc.pid, signal.SIGSTOP)  # hung: it will never resume the app
        go.touch()
        wait_stopped(app.pid)
        time.sleep(0.3)
        assert state_of(app.pid) == "T"  # held, and nobody lets it go
        os.kill(collector.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        while state_of(app.pid) == "T":
            assert time.monotonic() - killed < 1.0, "still stopped 1 s after the collector died"
            time.sleep(0.01)
        deadline = time.monotonic() + 30
        while not truth.exists():
            assert time.monotonic() < deadline, "the app did not run on"
            time.sleep(0.05)
        assert len(json.loads(truth.read_text())) == 28
    finally:
        exit_file.touch()
        app.wait(timeout=30)
        collector.stop()
    said = f"continued [{app.pid}]"
    deadline = time.monotonic() + 30  # the guard says so once the collector's files are shut
    while said not in collector.log.read_text():
        assert time.monotonic() < deadline, collector.log.read_text()[-2000:]
        time.sleep(0.1)


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
