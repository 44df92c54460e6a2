"""AMD GPUs through the ``amdsmi`` Python package (ROCm's bindings of ``libamd_smi.so``): the
I/O shell of the GPU device port (:class:`~zerotrace_collector.gpu_devices.GpuDeviceSource`),
preferred to the ``amd-smi`` CLI (``amd_smi_devices.py``) where it imports and starts: a
reading is a few library calls in this process, not a Python program started per tick.

The package's calls return the same dicts the CLI prints (the CLI is written on them), so each
device's answers are laid out as one entry of ``amd-smi metric --json`` and mapped by
``amd_smi_parse`` (one mapping to the DCGM-named fields for both):

    amdsmi call                                        entry of `amd-smi metric --json`
    amdsmi_get_gpu_activity                            usage (gfx, umc, mm activity)
    amdsmi_get_temp_metric(HOTSPOT|EDGE|VRAM, CURRENT) temperature hotspot, edge, mem
    amdsmi_get_power_info                              power (socket power, W)
    amdsmi_get_energy_count                            energy (accumulator x resolution, uJ)
    amdsmi_get_clock_info(GFX|MEM)                     clock gfx, mem
    amdsmi_get_gpu_total_ecc_count                     ecc total (un)correctable
    amdsmi_get_gpu_vram_usage                          mem_usage (MiB)

and ``amdsmi_get_gpu_process_list`` gives each process's VRAM (bytes here; the CLI's MiB).
A call the GPU does not support (AmdSmiLibraryException with AMDSMI_STATUS_NOT_SUPPORTED)
leaves its fields out: a gap, named unsupported. Any other failure of a call marks its fields
failed, counted and said once per call. Not read, so gaps as with the CLI: PCIe replays and
the throttle (violation) statuses, which the CLI's metric output has.

The package is not a requirement of zerotrace: it needs ROCm's ``libamd_smi.so`` (the
amd-smi-lib package), and on import without it the PyPI wheel prints two lines and fails, so
it is imported with stdout held back and any failure is "not there".
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType
from typing import Any

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.amd_smi_parse import metric_samples
from zerotrace_collector.gpu_devices import (
    METRIC_FIELDS,
    DeviceEvent,
    DeviceInfo,
    DeviceSample,
    ProcessGpuUse,
)

__all__ = ["NO_AMDSMI", "READS", "AmdSmiPackageDevices", "import_amdsmi"]

VENDOR_AMD = "amd"  # as amd_smi_devices.VENDOR_AMD (not imported: the CLI shell's module)
NO_AMDSMI = "no amdsmi Python package (ROCm's amd-smi-lib): AMD GPU metrics off"
# libamd_smi's status for "this GPU does not give it" (amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
STATUS_NOT_SUPPORTED = 2
# Each read: a name for notes and counters, the metric fields it fills (failed together).
READS: dict[str, tuple[str, ...]] = {
    "activity": ("gpu_util_pct", "mem_copy_util_pct", "dec_util_pct"),
    "temperature": ("temperature_c",),
    "memory_temperature": ("memory_temp_c",),
    "power": ("power_w",),
    "energy": ("total_energy_consumption_mj",),
    "gfx_clock": ("sm_clock_mhz",),
    "mem_clock": ("mem_clock_mhz",),
    "ecc": ("ecc_sbe_vol_total", "ecc_dbe_vol_total"),
    "vram": ("fb_total_bytes", "fb_used_bytes", "fb_free_bytes"),
}


class NotSupported(Exception):
    """A call the GPU does not support: its fields are gaps."""


def import_amdsmi() -> ModuleType:
    """The ``amdsmi`` package; :class:`FeatureUnavailable` (:data:`NO_AMDSMI`) when it is not
    installed or its library does not load (the wheel prints its complaint: held back)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return importlib.import_module("amdsmi")
    except Exception:  # ImportError; KeyError from the wheel's wrapper without libamd_smi.so
        raise FeatureUnavailable(NO_AMDSMI) from None


class AmdSmiPackageDevices:
    vendor = VENDOR_AMD
    # A read is a few calls into libamd_smi, each a sysfs read or an SMU firmware message
    # (milliseconds each, more on a busy GPU): off the collector loop, as the CLI's.
    reads_block = True

    def __init__(
        self,
        *,
        load: Callable[[], ModuleType] = import_amdsmi,
        note: Callable[[str], None] | None = None,
    ) -> None:
        """load: returns the ``amdsmi`` module (tests pass a stand-in); note: where a one-line
        note goes (default :attr:`notes`)."""
        self._load = load
        self.notes: list[str] = []
        self._note = note or self.notes.append
        self._said: set[str] = set()
        self._amdsmi: Any = None
        self._handles: list[Any] = []
        self.errors = 0

    def open(self) -> list[DeviceInfo]:
        amdsmi = self._load()
        try:
            amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
        except Exception as exc:  # AmdSmiLibraryException: no driver, no permission
            raise FeatureUnavailable(
                f"amdsmi did not start ({_why(exc)}): AMD GPU metrics off"
            ) from None
        self._amdsmi = amdsmi
        try:
            self._handles = list(amdsmi.amdsmi_get_processor_handles())
            return [self._info(i, h) for i, h in enumerate(self._handles)]
        except Exception as exc:
            self.close()
            raise FeatureUnavailable(
                f"AMD GPUs not listed by amdsmi ({_why(exc)}): AMD GPU metrics off"
            ) from None

    def _info(self, index: int, handle: Any) -> DeviceInfo:
        a = self._amdsmi
        asic = _or_none(lambda: a.amdsmi_get_gpu_asic_info(handle)) or {}
        uuid = _text(_or_none(lambda: a.amdsmi_get_gpu_device_uuid(handle)))
        bdf = _text(_or_none(lambda: a.amdsmi_get_gpu_device_bdf(handle)))
        name = uuid or _text(asic.get("asic_serial")) or bdf or f"amd-gpu-{index}"
        return DeviceInfo(index, name, _text(asic.get("market_name")) or "AMD GPU")

    def driver_version(self) -> str | None:
        if not self._handles:
            return None
        info = _or_none(lambda: self._amdsmi.amdsmi_get_gpu_driver_info(self._handles[0]))
        return _text((info or {}).get("driver_version"))

    def sample(self, device: DeviceInfo, ts_ns: int) -> DeviceSample:
        handle = self._handles[device.index]
        entry, failed = self._entry(device.index, handle)
        processes = {device.index: self._processes(handle)}
        [sample] = metric_samples(json.dumps([entry]), [device], ts_ns, processes)
        if not failed:
            return sample
        names = {n for read in failed for n in READS[read]}
        return replace(
            sample,
            unsupported=tuple(n for n in sample.unsupported if n not in names),
            failed=tuple(n for n in METRIC_FIELDS if n in names or n in sample.failed),
        )

    def _entry(self, index: int, h: Any) -> tuple[dict[str, Any], list[str]]:
        """The device's answers as an `amd-smi metric --json` entry, and the reads that failed."""
        a = self._amdsmi
        temp, clk = a.AmdSmiTemperatureType, a.AmdSmiClkType
        current = a.AmdSmiTemperatureMetric.CURRENT
        calls: dict[str, Callable[[], Any]] = {
            "activity": lambda: a.amdsmi_get_gpu_activity(h),
            "temperature": lambda: self._sensors(
                {
                    "hotspot": lambda: a.amdsmi_get_temp_metric(h, temp.HOTSPOT, current),
                    "edge": lambda: a.amdsmi_get_temp_metric(h, temp.EDGE, current),
                }
            ),
            "memory_temperature": lambda: a.amdsmi_get_temp_metric(h, temp.VRAM, current),
            "power": lambda: a.amdsmi_get_power_info(h),
            "energy": lambda: a.amdsmi_get_energy_count(h),
            "gfx_clock": lambda: a.amdsmi_get_clock_info(h, clk.GFX),
            "mem_clock": lambda: a.amdsmi_get_clock_info(h, clk.MEM),
            "ecc": lambda: a.amdsmi_get_gpu_total_ecc_count(h),
            "vram": lambda: a.amdsmi_get_gpu_vram_usage(h),
        }
        got: dict[str, Any] = {}
        failed: list[str] = []
        for read, call in calls.items():
            try:
                got[read] = self._call(call)
            except NotSupported:
                continue
            except Exception as exc:
                self.errors += 1
                failed.append(read)
                self._say(read, f"amdsmi {read} read failed ({_why(exc)})")
        return _metric_entry(index, got), failed

    def _call(self, call: Callable[[], Any]) -> Any:
        """*call*'s answer; NotSupported for the GPU's "not supported"."""
        try:
            return call()
        except Exception as exc:
            if _status(exc) == STATUS_NOT_SUPPORTED:
                raise NotSupported from None
            raise

    def _sensors(self, calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """One value per sensor, leaving out those the GPU lacks (MI300X has no edge sensor:
        its hotspot still counts); NotSupported when it lacks them all."""
        out = {}
        for name, call in calls.items():
            with contextlib.suppress(NotSupported):
                out[name] = self._call(call)
        if not out:
            raise NotSupported
        return out

    def _processes(self, h: Any) -> tuple[ProcessGpuUse, ...]:
        try:
            listed = self._amdsmi.amdsmi_get_gpu_process_list(h)
        except Exception as exc:
            if _status(exc) != STATUS_NOT_SUPPORTED:
                self.errors += 1
                self._say("process_list", f"amdsmi process list failed ({_why(exc)})")
            return ()
        out = []
        for p in listed:
            if not isinstance(p, dict) or not isinstance(p.get("pid"), int):
                continue  # amdsmi before 6.1 listed process handles: no memory from them
            vram = (p.get("memory_usage") or {}).get("vram_mem")
            used = int(vram) if isinstance(vram, int) and not isinstance(vram, bool) else None
            out.append(ProcessGpuUse(int(p["pid"]), used))
        return tuple(sorted(out, key=lambda u: u.pid))

    def _say(self, read: str, line: str) -> None:
        if read not in self._said:
            self._said.add(read)
            self._note(line)

    def wait_events(self, timeout_ms: int) -> list[DeviceEvent]:
        return []  # never called: no XID-like events are read (events_supported)

    def events_supported(self, device: DeviceInfo) -> bool:
        return False

    def counters(self) -> dict[str, int]:
        return {"amdsmi_errors": self.errors}

    def close(self) -> None:
        if self._amdsmi is not None:
            amdsmi, self._amdsmi, self._handles = self._amdsmi, None, []
            with contextlib.suppress(Exception):
                amdsmi.amdsmi_shut_down()


def _metric_entry(index: int, got: dict[str, Any]) -> dict[str, Any]:
    """The package's answers laid out as the CLI prints them (amd_smi_parse reads this)."""
    entry: dict[str, Any] = {"gpu": index}
    if "activity" in got:
        entry["usage"] = got["activity"]
    temperature = dict(got.get("temperature") or {})
    if "memory_temperature" in got:
        temperature["mem"] = got["memory_temperature"]
    entry["temperature"] = temperature
    if "power" in got:
        entry["power"] = got["power"]
    energy = got.get("energy")
    if isinstance(energy, dict):
        uj = _product(energy.get("energy_accumulator"), energy.get("counter_resolution"))
        entry["energy"] = {"total_energy_consumption": {"value": uj, "unit": "uJ"}}
    entry["clock"] = {
        k: got[read] for k, read in (("gfx", "gfx_clock"), ("mem", "mem_clock")) if read in got
    }
    ecc = got.get("ecc")
    if isinstance(ecc, dict):
        entry["ecc"] = {
            "total_correctable_count": ecc.get("correctable_count"),
            "total_uncorrectable_count": ecc.get("uncorrectable_count"),
        }
    vram = got.get("vram")
    if isinstance(vram, dict):
        total, used = vram.get("vram_total"), vram.get("vram_used")
        free = total - used if isinstance(total, int) and isinstance(used, int) else None
        entry["mem_usage"] = {"total_vram": total, "used_vram": used, "free_vram": free}
    return entry


def _product(a: object, b: object) -> float | None:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) * float(b)
    return None


def _status(exc: BaseException) -> int | None:
    """The libamd_smi status of an AmdSmiLibraryException (its err_code), else None."""
    code = getattr(exc, "err_code", None)
    return code if isinstance(code, int) else None


def _why(exc: BaseException) -> str:
    """One line: the package's error text ('AMDSMI_STATUS_NO_PERM - Permission Denied')."""
    info = getattr(exc, "err_info", None)
    text = str(info) if info else (str(exc) or type(exc).__name__)
    return " ".join(text.split())


def _or_none(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:
        return None


def _text(value: object) -> str | None:
    if isinstance(value, str) and value.strip() and value.strip().upper() != "N/A":
        return value.strip()
    return None
