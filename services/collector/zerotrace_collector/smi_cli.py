"""Running a vendor's monitoring CLI (amd-smi, rocm-smi, npu-smi) for the CLI-backed GPU
device adapters: find it, run it with a time limit, hand back its stdout. The parsing is
elsewhere (``amd_smi_parse.py``, ``npu_smi_parse.py``).

A run that fails (exit status, time limit, no such file) raises :class:`SmiRunError` with one
line; the adapters turn it into failed metrics, never into a crash of the feed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence

from zerotrace.errors import TransientIO
from zerotrace_collector.gpu_devices import (
    METRIC_FIELDS,
    DeviceEvent,
    DeviceInfo,
    DeviceSample,
    SampleBuilder,
)

__all__ = ["RUN_TIMEOUT_S", "Runner", "SmiRunError", "TickReadings", "find_tool", "run_tool"]

# amd-smi metric on an 8-GPU MI300X node takes about 1-2 s (it reads every sensor of every
# GPU); npu-smi info well under 1 s. 10 s leaves room for a busy node, not for a hung driver.
RUN_TIMEOUT_S = 10.0

Runner = Callable[[Sequence[str]], str]


class SmiRunError(TransientIO):
    """The tool did not run to the end; ``str(exc)`` says which and why, in one line."""


def find_tool(name: str, which: Callable[[str], str | None] = shutil.which) -> str | None:
    """The tool's path on PATH, or None."""
    return which(name)


def run_tool(argv: Sequence[str], timeout_s: float = RUN_TIMEOUT_S) -> str:
    """The tool's stdout (UTF-8, undecodable bytes replaced); :class:`SmiRunError` when it
    cannot start, exits non-zero with nothing on stdout, or outlives *timeout_s*. A non-zero
    exit with output is kept: amd-smi exits 1 while still printing the GPUs it could read."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise SmiRunError(f"{argv[0]}: not found") from None
    except subprocess.TimeoutExpired:
        raise SmiRunError(f"{' '.join(argv)}: no answer in {timeout_s:g} s") from None
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0 and not out.strip():
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = err[-1] if err else f"exit status {done.returncode}"
        raise SmiRunError(f"{' '.join(argv)}: {reason}")
    return out


class TickReadings:
    """What the CLI-backed adapters share: one run of the tool per tick (sample time) reads
    every device, and each device's sample of that tick comes from it. A device the run did
    not list, or every device of a tick whose run failed, gets a sample whose metrics are all
    marked failed (never a crash, never zeros). Subclasses fill ``_samples`` (and set
    ``_failed_tick``) in ``_read_all``, and set ``_tool`` (the tool's path) in ``open``.

    Each reading runs the tool, which may take seconds (and :data:`RUN_TIMEOUT_S` when it
    hangs): ``reads_block`` tells the GPU metrics feed to read off the collector loop."""

    reads_block = True
    _tool: str | None = None

    def __init__(self, note: Callable[[str], None]) -> None:
        self._tick: int | None = None
        self._samples: dict[int, DeviceSample] = {}
        self._failed_tick = False
        self._note = note
        self._said: set[str] = set()

    def sample(self, device: DeviceInfo, ts_ns: int) -> DeviceSample:
        if self._tick != ts_ns:
            self._tick, self._samples, self._failed_tick = ts_ns, {}, False
            self._read_all(ts_ns)
        found = self._samples.get(device.index)
        if found is not None:
            return found
        b = SampleBuilder(device, ts_ns)
        if self._failed_tick:
            b.fail(METRIC_FIELDS)
        return b.build()

    def _read_all(self, ts_ns: int) -> None:
        raise NotImplementedError

    @property
    def tool_path(self) -> str | None:
        """The tool read (after ``open``): which of several installs was found."""
        return self._tool

    def _say(self, line: str) -> None:
        """*line* once per kind of problem (the text before its first parenthesis)."""
        key = line.split("(")[0]
        if key not in self._said:
            self._said.add(key)
            self._note(line)

    def wait_events(self, timeout_ms: int) -> list[DeviceEvent]:
        return []  # never called: these tools give no events (events_supported)

    def events_supported(self, device: DeviceInfo) -> bool:
        return False

    def close(self) -> None:
        self._samples = {}
