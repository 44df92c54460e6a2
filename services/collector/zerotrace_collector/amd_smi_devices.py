"""AMD GPUs through the ``amd-smi`` CLI (``rocm-smi`` where only it is installed): the I/O
shell of the GPU device port (:class:`~zerotrace_collector.gpu_devices.GpuDeviceSource`).

Where ROCm's ``amdsmi`` Python package can start, ``amdsmi_devices.py`` reads it in-process
instead (gpu_vendor tries it first) and maps its answers through this module's parser; the CLI
is the fallback, and its JSON is the format recorded as test fixtures. Without either tool
the adapter raises :class:`~zerotrace.errors.FeatureUnavailable` with one line and everything
else runs.

One reading of all GPUs is two runs (``metric --json``, ``process --json``), made for the
first device of a tick and reused for the others of the same *ts_ns*. A run or parse that
fails leaves every metric of that tick a failed gap, counted and said once.
"""

from __future__ import annotations

from collections.abc import Callable

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.amd_smi_parse import (
    devices_of,
    metric_samples,
    parse_list,
    parse_process,
    parse_rocm_smi,
    parse_static,
)
from zerotrace_collector.gpu_devices import (
    DeviceInfo,
)
from zerotrace_collector.smi_cli import Runner, SmiRunError, TickReadings, find_tool, run_tool
from zerotrace_collector.smi_values import SmiOutputError

__all__ = ["NO_AMD_SMI", "VENDOR_AMD", "AmdSmiDevices"]

VENDOR_AMD = "amd"
NO_AMD_SMI = "no amd-smi or rocm-smi on PATH (ROCm not installed): AMD GPU metrics off"


class AmdSmiDevices(TickReadings):
    vendor = VENDOR_AMD

    def __init__(
        self,
        *,
        run: Runner = run_tool,
        which: Callable[[str], str | None] = find_tool,
        note: Callable[[str], None] | None = None,
    ) -> None:
        """run: runs a command and returns its stdout (tests pass recorded outputs); which:
        finds a tool on PATH; note: where a one-line note goes (default: :attr:`notes`)."""
        self._run = run
        self._which = which
        self.notes: list[str] = []
        self._tool: str | None = None
        self._legacy = False
        self._devices: list[DeviceInfo] = []
        super().__init__(note or self.notes.append)
        self.errors = 0

    def open(self) -> list[DeviceInfo]:
        amd_smi, rocm_smi = self._which("amd-smi"), self._which("rocm-smi")
        try:
            if amd_smi:
                self._tool = amd_smi
                static = parse_static(self._run([amd_smi, "static", "--json"]))
                try:
                    uuids = parse_list(self._run([amd_smi, "list", "--json"]))
                except (SmiRunError, SmiOutputError) as exc:
                    self._say(f"amd-smi list gave no UUIDs ({exc}): GPUs named by serial")
                    uuids = {}
                self._devices = devices_of(static, uuids)
            elif rocm_smi:
                self._tool, self._legacy = rocm_smi, True
                self._devices = [s.device for s in parse_rocm_smi(self._legacy_text(), 0)]
            else:
                raise FeatureUnavailable(NO_AMD_SMI)
        except (SmiRunError, SmiOutputError) as exc:
            raise FeatureUnavailable(f"AMD GPUs not listed ({exc}): AMD GPU metrics off") from exc
        return list(self._devices)

    def driver_version(self) -> str | None:
        return None

    def _read_all(self, ts_ns: int) -> None:
        assert self._tool is not None
        try:
            if self._legacy:
                samples = parse_rocm_smi(self._legacy_text(), ts_ns)
            else:
                metric = self._run([self._tool, "metric", "--json"])
                try:
                    procs = parse_process(self._run([self._tool, "process", "--json"]))
                except (SmiRunError, SmiOutputError) as exc:
                    self._say(f"amd-smi process failed ({exc}): no per-process memory")
                    procs = {}
                samples = metric_samples(metric, self._devices, ts_ns, procs)
        except (SmiRunError, SmiOutputError) as exc:
            self.errors += 1
            self._failed_tick = True
            self._say(f"AMD GPU metrics not read ({exc})")
            return
        self._samples = {s.device.index: s for s in samples}

    def _legacy_text(self) -> str:
        assert self._tool is not None
        return self._run([self._tool, "--showallinfo", "--json"])

    def counters(self) -> dict[str, int]:
        return {"amd_smi_errors": self.errors}
