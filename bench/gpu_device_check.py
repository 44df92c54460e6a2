"""The GPU device check: a small GPU workload of its own under zerotrace's GPU metrics
collector, on a machine with an NVIDIA GPU, and a short report of what was seen.

What it does, each part saying in one line why it is skipped where it cannot run:

1. The NVML adapter and the GPU metrics feed (services/collector: nvml_devices.py,
   gpu_metrics_feed.py, gpu_metrics_record.py) under the collector loop, every --interval,
   each record encoded and decoded by the real Avro codec (fastavro), for the whole run: a
   few seconds idle, then each workload phase (bench/gpu_workload.py: ``driver``, the CUDA
   driver API through ctypes with a PTX spin kernel of known shape; ``torch``, bf16 matrix
   products), each a process of its own, then idle again. Each sample's CPU time (of the
   sampling thread) and wall time are measured around the adapter.
2. While a phase runs: the CUDA libraries its process mapped and the probed entry points they
   export (cuda_libraries.py: what the profiling issue's GPU probes would attach to).
3. The device windows fold (services/profiler-agg: device_windows.py) over the records,
   checked against them.
4. ``zerotrace run --gpu-metrics --profile`` over one more workload, for the CUDA probes, where
   eBPF can run (root, bcc, kernel headers, tracefs); otherwise one line says what is missing.

Writes under --out (default $OUT, else bench/out/gpu-check), at most 8 files: report.txt,
report.json, records.jsonl (every raw.gpumetrics datum), windows.json, workloads.log,
zerotrace-run.log where it ran, hang.txt only if the hard limit struck (the stacks of every
thread: nothing here can wait for ever); scripts/device-gpu-check.sh adds nvidia-smi.txt.
Exit 0 when the check ran (its findings are in the report), 2 when nothing could be observed
(no pynvml, no NVML device).

Run from the repository root (what scripts/device-gpu-check.sh prints for the device):

    PYTHONPATH=lib:services/collector:services/profiler-agg:cli:services/correlator:\\
        services/query python3 -m bench.gpu_device_check [--phase-s 12 --interval 0.5]
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.gpu_check_report import Phase, build_report, cost_report, render_text
from zerotrace.clock import SystemClock
from zerotrace_collector.gpu_devices import DeviceEvent, DeviceInfo, DeviceSample
from zerotrace_collector.gpu_metrics_feed import GpuMetricsFeed
from zerotrace_collector.nvml_devices import NvmlDevices
from zerotrace_profiler_agg.device_windows import DeviceWindows

ROOT = Path(__file__).resolve().parents[1]
WINDOW_NS = 10_000_000_000  # device windows of 10 s: a run of a minute folds into several
START_ALLOWANCE_S = 60.0  # a workload's start (PyTorch's import, the context, the JIT)
EXIT_NOTHING_SEEN = 2


class TimedSource:
    """The NVML adapter, each sample timed: CPU of the calling thread and wall, in us."""

    def __init__(self, inner: NvmlDevices) -> None:
        self.inner = inner
        self.vendor = inner.vendor
        self.devices: list[DeviceInfo] = []
        self.cpu_us: list[float] = []
        self.wall_us: list[float] = []

    def open(self) -> list[DeviceInfo]:
        self.devices = self.inner.open()
        return self.devices

    def driver_version(self) -> str | None:
        return self.inner.driver_version()

    def sample(self, device: DeviceInfo, ts_ns: int) -> DeviceSample:
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        sample = self.inner.sample(device, ts_ns)
        self.cpu_us.append((time.thread_time_ns() - cpu) / 1000)
        self.wall_us.append((time.perf_counter_ns() - wall) / 1000)
        return sample

    def wait_events(self, timeout_ms: int) -> list[DeviceEvent]:
        return self.inner.wait_events(timeout_ms)

    def events_supported(self, device: DeviceInfo) -> bool:
        return self.inner.events_supported(device)

    def counters(self) -> dict[str, int]:
        return self.inner.counters()

    def close(self) -> None:
        self.inner.close()


class DecodingProducer:
    """The bus end of the collector: each record decoded again, its datum kept."""

    def __init__(self, codec: Any, keep: Callable[[dict[str, Any]], None]) -> None:
        self._codec = codec
        self._keep = keep

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._keep(self._codec.decode(value)[1])

    def flush(self, timeout_s: float) -> int:
        return 0

    @property
    def failed(self) -> int:
        return 0

    def close(self) -> None:
        pass


@dataclass
class Observer:
    """The feed under the collector loop (or polled directly without fastavro)."""

    feed: GpuMetricsFeed
    records: list[dict[str, Any]] = field(default_factory=list)
    pump: Callable[[int], object] | None = None
    counters: Callable[[], dict[str, int]] | None = None

    def run_for(self, seconds: float, until: Callable[[], bool] = lambda: False) -> None:
        """Pumps for *seconds*, or until *until* says so (checked every 100 ms)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not until():
            assert self.pump is not None
            self.pump(100)


def observer(feed: GpuMetricsFeed, skipped: list[tuple[str, str]]) -> Observer:
    obs = Observer(feed)
    if importlib.util.find_spec("fastavro") is None:
        skipped.append(("Avro encoding", "fastavro not importable: records polled unencoded"))

        def poll(timeout_ms: int) -> object:
            obs.records.extend(r.datum for r in feed.poll(timeout_ms))
            return None

        obs.pump, obs.counters = poll, feed.counters
        return obs
    from zerotrace.codec import AvroCodec
    from zerotrace.schema_registry import InMemorySchemaRegistry
    from zerotrace.schemas import load_schema_dir
    from zerotrace_collector.collector import Collector

    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    collector = Collector([feed], DecodingProducer(codec, obs.records.append), codec)
    obs.pump, obs.counters = collector.pump, collector.counters
    return obs


class Workload:
    """One phase's process (bench/gpu_workload.py), its JSON lines read by a thread."""

    def __init__(self, engine: str, seconds: float, nbytes: int, log: Path) -> None:
        self.engine = engine
        self.lines: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.ready: dict[str, Any] | None = None
        self.done: dict[str, Any] | None = None
        self.skipped: str | None = None
        self._log = log.open("a")  # one log for every workload: fewer files under $OUT
        self._log.write(f"== {engine} workload ==\n")
        command = [sys.executable, "-m", "bench.gpu_workload", "--engine", engine]
        command += ["--seconds", str(seconds), "--bytes", str(nbytes)]
        command += ["--limit-s", str(seconds + START_ALLOWANCE_S)]
        self.proc = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, out: IO[str] | None) -> None:
        assert out is not None
        for line in out:
            self._log.write(line)
            self._log.flush()
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                continue

    def take(self) -> bool:
        """Takes what it said; True once it is over (exited, skipped or done)."""
        while True:
            try:
                said = self.lines.get_nowait()
            except queue.Empty:
                break
            self.ready = said.get("ready", self.ready)
            self.done = said.get("done", self.done)
            self.skipped = said.get("skipped", self.skipped)
        return self.proc.poll() is not None and self.lines.empty()

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.skipped = self.skipped or "killed: past its time"
        self.proc.wait(timeout=10)
        self.take()
        if self.ready is None and self.skipped is None:
            self.skipped = f"exited {self.proc.returncode} before it was ready (see its log)"
        self._log.close()


def cuda_libraries_of(pid: int) -> list[dict[str, Any]]:
    """The CUDA files a process mapped, with the probed entry points each exports."""
    from zerotrace_collector.cuda_libraries import (
        cuda_libraries_in_maps,
        exported_functions,
        probed_symbols,
        read_maps,
    )

    out: list[dict[str, Any]] = []
    try:
        libraries = cuda_libraries_in_maps(read_maps(pid))
    except OSError as exc:
        return [{"kind": "-", "path": f"/proc/{pid}/maps unreadable ({exc})"}]
    for lib in libraries:
        row: dict[str, Any] = {"kind": lib.kind.value, "path": lib.path}
        try:
            row["probed"] = list(probed_symbols(exported_functions(lib.path)))
        except ImportError:
            row["probed"] = "pyelftools not importable: symbols not read"
        except (OSError, ValueError) as exc:
            row["probed"] = f"not read ({exc})"
        out.append(row)
    return out


def run_phase(obs: Observer, engine: str, args: argparse.Namespace, out: Path) -> Phase:
    work = Workload(engine, args.phase_s, args.bytes, out / "workloads.log")
    libraries: list[dict[str, Any]] = []

    def over() -> bool:
        finished = work.take()
        if work.ready is not None and not libraries:
            libraries.extend(cuda_libraries_of(int(work.ready["pid"])))
        return finished

    try:
        obs.run_for(args.phase_s + START_ALLOWANCE_S, until=over)
    finally:
        work.end()
    return Phase(engine, work.ready, work.done, work.skipped, libraries)


def ebpf_missing() -> str | None:
    """Why the eBPF probes cannot run here (None: they can), as tests/ebpf_required.py asks,
    with what the kernel offers instead."""
    release = os.uname().release
    btf = "BTF yes" if Path("/sys/kernel/btf/vmlinux").exists() else "BTF no"
    if os.geteuid() != 0:
        return f"not root (kernel {release}, {btf})"
    if importlib.util.find_spec("bcc") is None:
        return f"bcc not importable by {sys.executable} (kernel {release}, {btf})"
    if not Path(f"/lib/modules/{release}/build").exists():
        return f"no kernel headers for {release} ({btf})"
    if not Path("/sys/kernel/tracing/events/syscalls/sys_enter_openat").exists():
        return f"tracefs not mounted or no syscall tracepoints (kernel {release}, {btf})"
    return None


def zerotrace_run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """`zerotrace run --gpu-metrics --profile` over a driver workload; its summary."""
    home = Path(tempfile.mkdtemp(prefix="zt-gpu-check-"))
    summary = home / "summary.json"
    command = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--no-tls"]
    command += ["--port", "1", "--gpu-metrics", "--gpu-interval", str(args.interval)]
    command += ["--profile", "--quiet", "--summary-json", str(summary)]
    command += ["--store", str(home / "e.duckdb")]
    command += ["--http-port", str(free_port()), "--grpc-port", str(free_port())]
    command += ["--", sys.executable, "-m", "bench.gpu_workload", "--engine", "driver"]
    command += ["--seconds", "8", "--bytes", str(args.bytes)]
    env = {**os.environ, "ZEROTRACE_HOME": str(home)}
    log = out / "zerotrace-run.log"
    try:
        with log.open("w") as f:
            done = subprocess.run(
                command, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                timeout=args.run_limit_s, check=False,
            )  # fmt: skip
        result: dict[str, Any] = {"returncode": done.returncode}
    except subprocess.TimeoutExpired:
        result = {"returncode": None, "timeout_s": args.run_limit_s}
    if summary.exists():
        result["summary"] = json.loads(summary.read_text())
    shutil.rmtree(home, ignore_errors=True)
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_out() -> Path:
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "bench/out/gpu-check"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="report folder (default $OUT)")
    p.add_argument("--interval", type=float, default=0.5, help="GPU sampling interval, s")
    p.add_argument("--idle-s", type=float, default=3.0, help="idle before and after, s")
    p.add_argument("--phase-s", type=float, default=12.0, help="each workload's busy time, s")
    p.add_argument("--bytes", type=int, default=1 << 30, help="what each workload allocates")
    p.add_argument("--engines", default="driver,torch", help="workloads in turn ('' for none)")
    p.add_argument("--no-zerotrace-run", action="store_true", help="skip part 4")
    p.add_argument("--run-limit-s", type=float, default=60.0, help="part 4's time limit")
    p.add_argument("--limit-s", type=float, default=170.0, help="hard limit of the whole check")
    p.add_argument("--node", default=os.uname().nodename)
    args = p.parse_args(argv)
    out = args.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    with (out / "hang.txt").open("w") as hang:
        faulthandler.dump_traceback_later(args.limit_s, exit=True, file=hang)
        try:
            code = check(args, out)
        finally:
            faulthandler.cancel_dump_traceback_later()
    if (out / "hang.txt").stat().st_size == 0:
        (out / "hang.txt").unlink()
    return code


def check(args: argparse.Namespace, out: Path) -> int:
    notes: list[str] = []
    skipped: list[tuple[str, str]] = []
    (out / "workloads.log").unlink(missing_ok=True)
    started = time.monotonic()
    if importlib.util.find_spec("pynvml") is None:
        print("GPU device check: pynvml (nvidia-ml-py) not importable: nothing observed")
        return EXIT_NOTHING_SEEN
    clock = SystemClock()
    source = TimedSource(NvmlDevices(clock, note=notes.append))
    feed = GpuMetricsFeed(source, args.node, clock, interval_s=args.interval, note=notes.append)
    feed.attach()
    obs = observer(feed, skipped)
    phases: list[Phase] = []
    try:
        if not source.devices:
            line = f"GPU device check: NVML gave no device: {'; '.join(notes) or 'none listed'}"
            (out / "report.txt").write_text(line + "\n")
            print(line)
            return EXIT_NOTHING_SEEN
        obs.run_for(args.idle_s)
        for engine in [e for e in args.engines.split(",") if e]:
            phases.append(run_phase(obs, engine, args, out))
            obs.run_for(1.0)  # the process gone from NVML's list before the next
        obs.run_for(args.idle_s)
    finally:
        feed.close()
    counters = obs.counters() if obs.counters else {}
    windows = fold(obs.records)
    ran = None
    if args.no_zerotrace_run:
        skipped.append(("zerotrace run --gpu-metrics --profile", "--no-zerotrace-run given"))
    elif (why := ebpf_missing()) is not None:
        skipped.append(("zerotrace run --gpu-metrics --profile (the CUDA probes)", why))
    elif time.monotonic() - started + args.run_limit_s + 10 > args.limit_s:
        skipped.append(("zerotrace run --gpu-metrics --profile", "too little of --limit-s left"))
    else:
        ran = zerotrace_run(args, out)
    report = build_report(
        obs.records,
        windows,
        phases,
        cost_report(source.cpu_us, source.wall_us),
        notes=notes,
        skipped=skipped,
        counters=counters,
    )
    if ran is not None:
        report["zerotrace_run"] = ran
    text = render_text(report)
    if ran is not None:
        text += run_text(ran)
    write(out, report, text, obs.records, windows)
    print(text, end="")
    return 0


def run_text(ran: dict[str, Any]) -> str:
    """Part 4 in a few lines: its exit, samples and the GPU probes' and metrics' counters."""
    summary = ran.get("summary") or {}
    counters = summary.get("counters") or {}
    lines = [f"zerotrace run --gpu-metrics --profile: exit {ran['returncode']}"]
    lines.append(f"  profile samples {summary.get('profile_samples')}")
    lines.append(f"  gpu probes {counters.get('gpu')}")
    lines.append(f"  gpu-metrics {counters.get('gpu-metrics')}")
    return "\n".join(lines) + "\n"


def fold(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    windows = DeviceWindows(WINDOW_NS, 0)
    closed: list[dict[str, Any]] = []
    for datum in sorted(records, key=lambda d: d["ts_ns"]):
        closed.extend(windows.add_gpu(datum))
    return closed + windows.flush()


def write(out: Path, report: dict[str, Any], text: str, records: list[Any], windows: Any) -> None:
    (out / "report.txt").write_text(text)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    with (out / "records.jsonl").open("w") as f:
        for line in _lines(records):
            f.write(line)
    (out / "windows.json").write_text(json.dumps(windows, indent=1, default=str))


def _lines(records: list[Any]) -> Iterator[str]:
    for datum in records:
        yield json.dumps(datum, default=str) + "\n"


if __name__ == "__main__":
    sys.exit(main())
