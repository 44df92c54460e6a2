"""Huawei Ascend NPUs through the ``npu-smi`` CLI: the I/O shell of the GPU device port
(:class:`~zerotrace_collector.gpu_devices.GpuDeviceSource`). Without ``npu-smi`` on PATH (the
Ascend driver not installed) the adapter raises :class:`~zerotrace.errors.FeatureUnavailable`
with one line and everything else runs.

One reading of all chips is ``npu-smi info`` plus ``npu-smi info -t TYPE -i N`` per NPU and
per detail type (``usages`` by default: the HBM bandwidth use the table lacks), made for the
first chip of a tick and reused for the others of the same *ts_ns*. A failed table run leaves
every metric of the tick a failed gap; a failed detail run only its fields' gaps. Each is
counted and said once. Each chip's Health column is its sample's ``health``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.gpu_devices import (
    DeviceInfo,
)
from zerotrace_collector.npu_smi_parse import NpuDetail, chip_samples, parse_detail, parse_info
from zerotrace_collector.smi_cli import Runner, SmiRunError, TickReadings, find_tool, run_tool
from zerotrace_collector.smi_values import SmiOutputError

__all__ = ["DETAIL_TYPES", "NO_NPU_SMI", "VENDOR_HUAWEI", "NpuSmiDevices"]

VENDOR_HUAWEI = "huawei"
NO_NPU_SMI = "no npu-smi on PATH (Ascend driver not installed): Ascend NPU metrics off"
DETAIL_TYPES: tuple[str, ...] = ("usages",)


class NpuSmiDevices(TickReadings):
    vendor = VENDOR_HUAWEI

    def __init__(
        self,
        *,
        details: Sequence[str] = DETAIL_TYPES,
        run: Runner = run_tool,
        which: Callable[[str], str | None] = find_tool,
        note: Callable[[str], None] | None = None,
    ) -> None:
        """details: the ``-t`` types read per NPU each tick (usages, memory, power, temp,
        common, ecc); run, which, note: as in AmdSmiDevices."""
        self._details = tuple(details)
        self._run = run
        self._which = which
        self.notes: list[str] = []
        self._tool: str | None = None
        super().__init__(note or self.notes.append)
        self.errors = 0

    def open(self) -> list[DeviceInfo]:
        self._tool = self._which("npu-smi")
        if self._tool is None:
            raise FeatureUnavailable(NO_NPU_SMI)
        try:
            samples = chip_samples(parse_info(self._run([self._tool, "info"])), 0)
        except (SmiRunError, SmiOutputError) as exc:
            raise FeatureUnavailable(f"Ascend NPUs not listed ({exc}): NPU metrics off") from exc
        return [s.device for s in samples]

    def driver_version(self) -> str | None:
        return None

    def _read_all(self, ts_ns: int) -> None:
        assert self._tool is not None
        try:
            chips = parse_info(self._run([self._tool, "info"]))
        except (SmiRunError, SmiOutputError) as exc:
            self.errors += 1
            self._failed_tick = True
            self._say(f"Ascend NPU metrics not read ({exc})")
            return
        details: list[NpuDetail] = []
        for npu in sorted({c.npu for c in chips}):
            for kind in self._details:
                argv = [self._tool, "info", "-t", kind, "-i", str(npu)]
                try:
                    details.extend(parse_detail(self._run(argv)))
                except (SmiRunError, SmiOutputError) as exc:
                    self.errors += 1
                    self._say(f"npu-smi info -t {kind} failed ({exc}): its fields are gaps")
        samples = chip_samples(chips, ts_ns, details)
        self._samples = {s.device.index: s for s in samples}

    def counters(self) -> dict[str, int]:
        return {"npu_smi_errors": self.errors}
