"""DCGM's profiling fields through NVML's GPM (GPU Performance Monitoring: Hopper and newer),
for the NVML adapter (:class:`~zerotrace_collector.nvml_devices.NvmlDevices`).

GPM gives SM activity and occupancy, tensor, DRAM and FP pipe activity as percentages of the
time between two GPM samples of a device. Each device whose ``nvmlGpmQueryDeviceSupport`` says
yes gets two sample buffers (``nvmlGpmSampleAlloc``) at open, freed at close; each reading
fills the buffer that does not hold the previous sample (``nvmlGpmSampleGet``) and computes
the metrics between the two (``nvmlGpmMetricsGet``). So a record's GPM values cover the time
since the device's previous record: the feed's interval, or less when an XID sample (a record
of its own) came between.

Marks, as everywhere in a sample (gpu_devices.py): a device without GPM (before Hopper, or a
driver whose NVML has no GPM functions) has the fields unsupported, and one line per device
says so at open. The first reading after open, or after a failed GPM read, has no previous
sample: the fields are null and named in ``warming_up``, neither unsupported nor failed. An
NVML error other than a gap fails the fields, counted and said once by the adapter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from zerotrace_collector.gpu_devices import DeviceInfo, SampleBuilder
from zerotrace_collector.nvml_readings import (
    GPM_FIELDS,
    GPM_READS,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_SUCCESS,
    gpm_ratio,
    is_gap,
    no_gpm_line,
)

__all__ = ["NO_GPM", "NO_GPM_FUNCTIONS", "NvmlGpm"]

NO_GPM = "no GPM (needs Hopper or newer)"
NO_GPM_FUNCTIONS = "no GPM in this driver's NVML (nvmlGpm* missing)"
NVML_GPM_METRICS_GET_VERSION = 1  # nvml.h; pynvml names it the same

# An NVML error of a device: counted and said once per code by the adapter.
CountError = Callable[[DeviceInfo, int, Sequence[str]], None]


class NvmlGpm:
    def __init__(self, nv: Any, *, note: Callable[[str], None], count: CountError) -> None:
        """nv: the pynvml module (tests pass a twin); note: where a one-line note goes;
        count: the adapter's error count for an NVML error that is not a gap."""
        self._nv = nv
        self._note = note
        self._count = count
        self._buffers: dict[int, tuple[Any, Any]] = {}  # device index -> two GPM samples
        self._previous: dict[int, int] = {}  # device index -> the buffer of its last sample
        self._unknown: set[int] = set()  # support not known (an error at open): failed

    def open_device(self, device: DeviceInfo, handle: Any) -> None:
        """Whether the device has GPM; when it has, its two sample buffers."""
        nv = self._nv
        try:
            supported = bool(nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except nv.NVMLError as exc:
            if exc.value == NVML_ERROR_FUNCTION_NOT_FOUND:
                self._note(no_gpm_line(device.index, device.model, NO_GPM_FUNCTIONS))
                return
            if not is_gap(exc.value):
                self._count(device, exc.value, GPM_FIELDS)
                self._unknown.add(device.index)
                return
            supported = False
        if not supported:
            self._note(no_gpm_line(device.index, device.model, NO_GPM))
            return
        buffers: list[Any] = []
        try:
            while len(buffers) < 2:
                buffers.append(nv.nvmlGpmSampleAlloc())
        except nv.NVMLError as exc:
            self._free(buffers)
            self._count(device, exc.value, GPM_FIELDS)
            self._unknown.add(device.index)
            return
        self._buffers[device.index] = (buffers[0], buffers[1])

    def read(self, device: DeviceInfo, handle: Any, b: SampleBuilder) -> None:
        """A GPM sample of the device now, and the metrics since its previous one into *b*."""
        if device.index in self._unknown:
            b.fail(GPM_FIELDS)
            return
        buffers = self._buffers.get(device.index)
        if buffers is None:
            return  # no GPM: every field a gap, said at open
        nv = self._nv
        previous = self._previous.pop(device.index, None)
        current = 0 if previous is None else 1 - previous
        try:
            nv.nvmlGpmSampleGet(handle, buffers[current])
        except nv.NVMLError as exc:
            # The next reading starts over (warming up): no sample to measure from.
            if not is_gap(exc.value):
                self._count(device, exc.value, GPM_FIELDS)
                b.fail(GPM_FIELDS)
            return
        self._previous[device.index] = current
        if previous is None:
            b.warm_up(GPM_FIELDS)
            return
        self._metrics(device, buffers[previous], buffers[current], b)

    def _metrics(self, device: DeviceInfo, earlier: Any, later: Any, b: SampleBuilder) -> None:
        nv = self._nv
        get = nv.c_nvmlGpmMetricsGet_t()
        get.version = NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(GPM_READS)
        get.sample1 = earlier
        get.sample2 = later
        for i, read in enumerate(GPM_READS):
            get.metrics[i].metricId = read.metric_id
        try:
            nv.nvmlGpmMetricsGet(get)
        except nv.NVMLError as exc:
            if not is_gap(exc.value):
                self._count(device, exc.value, GPM_FIELDS)
                b.fail(GPM_FIELDS)
            return
        for i, read in enumerate(GPM_READS):
            metric = get.metrics[i]
            code = int(metric.nvmlReturn)
            if code != NVML_SUCCESS:
                if not is_gap(code):
                    self._count(device, code, (read.name,))
                    b.fail((read.name,))
                continue
            ratio = gpm_ratio(float(metric.value))
            if ratio is None:  # not a number: nothing to count, nor to show as a value
                b.fail((read.name,))
            else:
                b.put(read.name, ratio)

    def close(self) -> None:
        """Frees every sample buffer; before nvmlShutdown."""
        for buffers in self._buffers.values():
            self._free(buffers)
        self._buffers.clear()
        self._previous.clear()

    def _free(self, buffers: Sequence[Any]) -> None:
        for sample in buffers:
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlGpmSampleFree(sample)
