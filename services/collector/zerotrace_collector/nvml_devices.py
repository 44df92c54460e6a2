"""NVIDIA GPUs through NVML (pynvml, package nvidia-ml-py): the I/O shell of the GPU device
port (:class:`~zerotrace_collector.gpu_devices.GpuDeviceSource`).

pynvml loads ``libnvidia-ml.so.1`` by its soname (the dynamic loader's search path: the
driver's install, or LD_LIBRARY_PATH) at ``nvmlInit``; without it the adapter raises
:class:`~zerotrace.errors.FeatureUnavailable` with one line and everything else runs.

A sample of one device is 15 pynvml calls (17 C calls when processes run on it; see
:meth:`NvmlDevices.sample`), and 2 more on a GPU with GPM (nvml_gpm.py: SM activity,
occupancy, tensor activity), none of which waits: the one NVML call that does,
nvmlDeviceGetPcieThroughput (a 20 ms window per call), is replaced by PCIe byte counters.
Measured over the C stand-in (tests/harness/nvml_standin) on a 2-core VM: 50-70 us of CPU per
device for pynvml's wrappers and ctypes, the stand-in's own C costing nothing; a real driver
adds its own time per call (not measured here: no GPU on these machines). An error is
told by its value: NOT_SUPPORTED (and a function this driver lacks) is a gap of the metrics
that call reads; any other error is a gap too, named in ``failed``, counted
(``nvml_errors``) and said in one line the first time that error is seen.

XID errors come through an NVML event set: :meth:`wait_events` blocks in
``nvmlEventSetWait_v2`` (ctypes lets the GIL go meanwhile), called from the feed's events
thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable, Sequence
from typing import Any

from zerotrace.clock import Clock
from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.gpu_devices import (
    DeviceEvent,
    DeviceInfo,
    DeviceSample,
    MetricValue,
    ProcessGpuUse,
    SampleBuilder,
)
from zerotrace_collector.nvml_gpm import NvmlGpm
from zerotrace_collector.nvml_readings import (
    FIELD_READS,
    FIELD_VALUE_MEMBERS,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_TIMEOUT,
    NVML_SUCCESS,
    UtilSample,
    is_gap,
    is_older_driver,
    merge_processes,
    nvlink_total,
    reason_names,
)

__all__ = ["NO_NVML", "VENDOR_NVIDIA", "NvmlDevices"]

VENDOR_NVIDIA = "nvidia"
NO_NVML = "no NVML (libnvidia-ml.so.1 not found): GPU device metrics off"
XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_MEMORY_V2 = 0x02000028  # nvmlMemory_v2: the struct's version word
EVENT_ERROR_PAUSE_S = 0.5  # after a failed wait, before the next: no spinning on a lost GPU


class _Failed(Exception):
    """A read failed with a code that is not a gap: already counted and said."""


class NvmlDevices:
    vendor = VENDOR_NVIDIA

    def __init__(
        self,
        clock: Clock,
        *,
        nvml: Any = None,
        note: Callable[[str], None] | None = None,
        handle_key: Callable[[Any], int] | None = None,
    ) -> None:
        """clock: epoch time for events; nvml: the pynvml module (tests pass a twin); note:
        where a one-line note goes (default: kept in :attr:`notes`); handle_key: a device
        handle's identity (the C pointer's value), to tell which device an event is of."""
        self._clock = clock
        self._nvml = nvml
        self.notes: list[str] = []
        self._note = note or self.notes.append
        self._key = handle_key or _pointer_value
        self._handles: dict[int, Any] = {}
        self._by_key: dict[int, int] = {}
        self._events: Any = None
        self._xid_devices: set[int] = set()
        self._last_util_us: dict[int, int] = {}
        self._driver: str | None = None
        self._said: set[int] = set()
        self.errors = 0
        self.event_errors = 0
        self._opened = False
        self._gpm: NvmlGpm | None = None

    # --- start and stop -------------------------------------------------------------------

    def open(self) -> list[DeviceInfo]:
        if self._nvml is None:
            import pynvml  # type: ignore[import-untyped]  # no stubs; used through Any

            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            if exc.value == NVML_ERROR_LIBRARY_NOT_FOUND:
                raise FeatureUnavailable(NO_NVML) from exc
            raise FeatureUnavailable(
                f"NVML did not start ({exc}, NVML error {exc.value}): GPU device metrics off"
            ) from exc
        self._opened = True
        self._gpm = NvmlGpm(
            nv,
            note=self._note,
            count=lambda d, code, names: self._count(d, code, _error_text(nv, code), names),
        )
        with contextlib.suppress(nv.NVMLError):
            self._driver = str(nv.nvmlSystemGetDriverVersion())
        devices = []
        for index in range(nv.nvmlDeviceGetCount()):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                info = DeviceInfo(
                    index, str(nv.nvmlDeviceGetUUID(handle)), str(nv.nvmlDeviceGetName(handle))
                )
            except nv.NVMLError as exc:  # a device lost or unreadable: the others still count
                self._say(exc.value, f"NVML cannot open GPU {index} ({exc}): it is left out")
                continue
            self._handles[index] = handle
            self._by_key[self._key(handle)] = index
            self._gpm.open_device(info, handle)
            devices.append(info)
        self._register_xid(devices)
        return devices

    def _register_xid(self, devices: Sequence[DeviceInfo]) -> None:
        nv = self._nvml
        try:
            self._events = nv.nvmlEventSetCreate()
        except nv.NVMLError as exc:
            if not is_gap(exc.value):
                self._say(exc.value, f"NVML gives no events ({exc}): XID errors are not seen")
            return
        for dev in devices:
            handle = self._handles[dev.index]
            try:
                supported = nv.nvmlDeviceGetSupportedEventTypes(handle)
                if supported & XID_CRITICAL_ERROR:
                    nv.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_ERROR, self._events)
                    self._xid_devices.add(dev.index)
            except nv.NVMLError as exc:
                if not is_gap(exc.value):
                    self._say(exc.value, f"GPU {dev.index}: XID events not registered ({exc})")

    def close(self) -> None:
        if not self._opened:
            return
        nv = self._nvml
        self._opened = False
        if self._gpm is not None:
            self._gpm.close()  # GPM samples are NVML's memory: freed before it shuts down
        if self._events is not None:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlEventSetFree(self._events)
            self._events = None
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()

    # --- reading ----------------------------------------------------------------------------

    def driver_version(self) -> str | None:
        return self._driver

    def events_supported(self, device: DeviceInfo) -> bool:
        return device.index in self._xid_devices

    def sample(self, device: DeviceInfo, ts_ns: int) -> DeviceSample:
        """Every metric of one device: the calls of :func:`_reads`, the field values in one
        call, the GPM metrics since the device's previous sample (two calls where it has
        GPM), and one or two calls per process list; a failed call leaves its metrics gaps."""
        h = self._handles[device.index]
        b = SampleBuilder(device, ts_ns)
        for names, calls, unpack in _reads(self._nvml, h):
            try:
                value = self._first(device, names, calls)
            except _Failed:
                b.fail(names)
                continue
            if value is not None:
                for name, v in zip(names, unpack(value), strict=True):
                    b.put(name, v)
        mask = b.value("clocks_event_reasons")
        if mask is not None:
            b.reason_names = reason_names(int(mask))
        self._field_values(device, h, b)
        if self._gpm is not None:
            self._gpm.read(device, h, b)
        b.processes = self._processes(device, h)
        return b.build()

    def _field_values(self, device: DeviceInfo, h: Any, b: SampleBuilder) -> None:
        names = [f.name for f in FIELD_READS]
        ids = [(f.field_id, f.scope_id) for f in FIELD_READS]
        try:
            values = self._first(
                device, names, (lambda: self._nvml.nvmlDeviceGetFieldValues(h, ids),)
            )
        except _Failed:
            b.fail(names)
            return
        if values is None:
            return
        for spec, fv in zip(FIELD_READS, values, strict=True):
            code = int(fv.nvmlReturn)
            if code != NVML_SUCCESS:
                if not is_gap(code):
                    self._count(device, code, _error_text(self._nvml, code), (spec.name,))
                    b.fail((spec.name,))
                continue
            member = FIELD_VALUE_MEMBERS.get(int(fv.valueType))
            if member is None:  # a value type NVML adds later: not guessed at
                continue
            b.put(spec.name, getattr(fv.value, member))
        b.put(
            "nvlink_bandwidth_total_kib",
            nvlink_total(b.value("nvlink_tx_kib"), b.value("nvlink_rx_kib")),
        )

    def _processes(self, device: DeviceInfo, h: Any) -> tuple[ProcessGpuUse, ...]:
        nv = self._nvml
        try:
            compute = [
                (int(p.pid), p.usedGpuMemory) for p in nv.nvmlDeviceGetComputeRunningProcesses_v3(h)
            ]
        except nv.NVMLError as exc:
            if not is_gap(exc.value):
                self._count(device, exc.value, str(exc), ("processes",))
            compute = []
        since = self._last_util_us.get(device.index, 0)
        samples: list[UtilSample] = []
        try:
            for s in nv.nvmlDeviceGetProcessUtilization(h, since):
                samples.append(
                    (int(s.pid), int(s.timeStamp), s.smUtil, s.memUtil, s.encUtil, s.decUtil)
                )
        except nv.NVMLError as exc:
            # NOT_FOUND: no sample since the last read (pynvml raises NVML_SUCCESS too when
            # the driver says so with an empty list).
            if exc.value not in (NVML_ERROR_NOT_FOUND, NVML_SUCCESS) and not is_gap(exc.value):
                self._count(device, exc.value, str(exc), ("process utilisation",))
        if samples:
            self._last_util_us[device.index] = max(s[1] for s in samples)
        return merge_processes(compute, samples)

    def _first(
        self, device: DeviceInfo, names: Sequence[str], calls: Sequence[Callable[[], Any]]
    ) -> Any:
        """The first call this driver has (a versioned one, then the older); None for a gap;
        raises _Failed for an error, counted and said."""
        nv = self._nvml
        for i, call in enumerate(calls):
            try:
                return call()
            except nv.NVMLError as exc:
                if i + 1 < len(calls) and is_older_driver(exc.value):
                    continue
                if is_gap(exc.value):
                    return None
                self._count(device, exc.value, str(exc), names)
                raise _Failed from exc
        return None

    def _count(self, device: DeviceInfo, code: int, text: str, names: Sequence[str]) -> None:
        self.errors += 1
        self._say(
            code,
            f"NVML error {code} ({text}) reading {', '.join(names)} of GPU {device.index}: "
            "such reads are left empty and counted (nvml_errors)",
        )

    def _say(self, code: int, line: str) -> None:
        """One line the first time an error code is seen; the counters tell the rest."""
        if code not in self._said:
            self._said.add(code)
            self._note(line)

    # --- events -----------------------------------------------------------------------------

    def wait_events(self, timeout_ms: int) -> list[DeviceEvent]:
        nv = self._nvml
        if self._events is None or not self._xid_devices:
            time.sleep(timeout_ms / 1000)
            return []
        try:
            data = nv.nvmlEventSetWait_v2(self._events, timeout_ms)
        except nv.NVMLError as exc:
            if exc.value != NVML_ERROR_TIMEOUT:
                self.event_errors += 1
                self._say(exc.value, f"waiting for GPU events failed ({exc}); retrying")
                time.sleep(EVENT_ERROR_PAUSE_S)
            return []
        index = self._by_key.get(self._key(data.device))
        if index is None or not data.eventType & XID_CRITICAL_ERROR:
            return []
        return [DeviceEvent(index, int(data.eventData), self._clock.now_ns())]

    def counters(self) -> dict[str, int]:
        return {"nvml_errors": self.errors, "nvml_event_errors": self.event_errors}


_Read = tuple[
    tuple[str, ...], tuple[Callable[[], Any], ...], Callable[[Any], Sequence[MetricValue]]
]


def _reads(nv: Any, h: Any) -> tuple[_Read, ...]:
    """The calls of one device's sample besides field values and processes: the metrics each
    reads, the call (a versioned one first, then the one older drivers have) and how its
    result gives the metrics' values."""
    return (
        (
            ("gpu_util_pct", "mem_copy_util_pct"),
            (lambda: nv.nvmlDeviceGetUtilizationRates(h),),
            lambda u: (u.gpu, u.memory),
        ),
        (("enc_util_pct",), (lambda: nv.nvmlDeviceGetEncoderUtilization(h),), lambda r: r[:1]),
        (("dec_util_pct",), (lambda: nv.nvmlDeviceGetDecoderUtilization(h),), lambda r: r[:1]),
        (
            ("fb_total_bytes", "fb_reserved_bytes", "fb_free_bytes", "fb_used_bytes"),
            (
                lambda: nv.nvmlDeviceGetMemoryInfo(h, version=NVML_MEMORY_V2),
                lambda: nv.nvmlDeviceGetMemoryInfo(h),  # drivers before 510: no reserved
            ),
            lambda m: (m.total, getattr(m, "reserved", None), m.free, m.used),
        ),
        (
            ("temperature_c",),
            (
                lambda: nv.nvmlDeviceGetTemperatureV(h, NVML_TEMPERATURE_GPU),
                lambda: nv.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU),
            ),
            _one,
        ),
        (("power_w",), (lambda: nv.nvmlDeviceGetPowerUsage(h),), lambda mw: (mw / 1000,)),
        (
            ("total_energy_consumption_mj",),
            (lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),),
            _one,
        ),
        (("sm_clock_mhz",), (lambda: nv.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM),), _one),
        (("mem_clock_mhz",), (lambda: nv.nvmlDeviceGetClockInfo(h, NVML_CLOCK_MEM),), _one),
        (
            ("clocks_event_reasons",),
            (
                lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
                lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h),  # before 535
            ),
            _one,
        ),
        (
            (
                "correctable_remapped_rows",
                "uncorrectable_remapped_rows",
                "row_remap_pending",
                "row_remap_failure",
            ),
            (lambda: nv.nvmlDeviceGetRemappedRows(h),),
            lambda r: (r[0], r[1], bool(r[2]), bool(r[3])),
        ),
        # [current, pending]: 1 is on (NVML_DEVICE_MIG_ENABLE).
        (("mig_mode",), (lambda: nv.nvmlDeviceGetMigMode(h),), lambda r: (bool(r[0]),)),
    )


def _one(value: Any) -> tuple[Any]:
    return (value,)


def _pointer_value(handle: Any) -> int:
    """An nvmlDevice_t's address (a ctypes pointer); twins' handles by identity."""
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


def _error_text(nv: Any, code: int) -> str:
    try:
        return str(nv.NVMLError(code))
    except Exception:  # the text is for people; a code NVML cannot name is said by number
        return "unknown error"
