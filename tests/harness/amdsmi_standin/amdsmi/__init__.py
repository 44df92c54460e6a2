"""The stand-in ``amdsmi`` package (see tests/harness/amdsmi_standin/__init__.py): the real
package's function names and signatures, handles of the real handle type checked as the real
functions check them, and answers from the JSON script named by ZT_AMDSMI_SCRIPT, read at
amdsmi_init. A scripted answer ``{"status": N}`` raises AmdSmiLibraryException(N), as the real
package does for a call whose libamd_smi status is not success (2: NOT_SUPPORTED).

Script: {"init": status or null, "driver_version": str, "gpus": [{"uuid", "bdf", "asic",
"activity", "temperature": {"edge", "hotspot", "vram"}, "power", "energy",
"clock": {"gfx", "mem"}, "ecc", "vram", "processes"}]}, each value the dict the real call
returns (or a status)."""

from __future__ import annotations

import ctypes
import json
import os
from enum import IntEnum
from typing import Any

from . import amdsmi_wrapper
from .amdsmi_exception import AmdSmiException, AmdSmiLibraryException, AmdSmiParameterException

__version__ = "7.0.2+standin"
_SCRIPT_ENV = "ZT_AMDSMI_SCRIPT"
_state: dict[str, Any] = {"script": None}


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = amdsmi_wrapper.AMDSMI_INIT_ALL_PROCESSORS
    INIT_AMD_CPUS = amdsmi_wrapper.AMDSMI_INIT_AMD_CPUS
    INIT_AMD_GPUS = amdsmi_wrapper.AMDSMI_INIT_AMD_GPUS


class AmdSmiClkType(IntEnum):
    SYS = amdsmi_wrapper.AMDSMI_CLK_TYPE_SYS
    GFX = amdsmi_wrapper.AMDSMI_CLK_TYPE_GFX
    DF = amdsmi_wrapper.AMDSMI_CLK_TYPE_DF
    DCEF = amdsmi_wrapper.AMDSMI_CLK_TYPE_DCEF
    SOC = amdsmi_wrapper.AMDSMI_CLK_TYPE_SOC
    MEM = amdsmi_wrapper.AMDSMI_CLK_TYPE_MEM


class AmdSmiTemperatureType(IntEnum):
    EDGE = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_EDGE
    HOTSPOT = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HOTSPOT
    JUNCTION = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_JUNCTION
    VRAM = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_VRAM


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = amdsmi_wrapper.AMDSMI_TEMP_CURRENT
    MAX = amdsmi_wrapper.AMDSMI_TEMP_MAX


_CLOCKS = {AmdSmiClkType.GFX: "gfx", AmdSmiClkType.MEM: "mem"}
_SENSORS = {
    AmdSmiTemperatureType.EDGE: "edge",
    AmdSmiTemperatureType.HOTSPOT: "hotspot",
    AmdSmiTemperatureType.VRAM: "vram",
}


def _answer(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"status"}:
        raise AmdSmiLibraryException(value["status"])
    if value is None:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    return value


def _gpu(processor_handle: Any) -> dict[str, Any]:
    if not isinstance(processor_handle, amdsmi_wrapper.amdsmi_processor_handle):
        raise AmdSmiParameterException(processor_handle, amdsmi_wrapper.amdsmi_processor_handle)
    script = _state["script"]
    if script is None:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_INIT_ERROR)
    gpus = script["gpus"]
    index = (ctypes.cast(processor_handle, ctypes.c_void_p).value or 0) - 1
    if not 0 <= index < len(gpus):
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_FOUND)
    gpu: dict[str, Any] = gpus[index]
    return gpu


def amdsmi_init(flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
    if not isinstance(flag, AmdSmiInitFlags):
        raise AmdSmiParameterException(flag, AmdSmiInitFlags)
    path = os.environ.get(_SCRIPT_ENV)
    if not path:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_INIT_ERROR)
    with open(path) as f:
        script = json.load(f)
    if script.get("init") is not None:
        raise AmdSmiLibraryException(script["init"])
    _state["script"] = script


def amdsmi_shut_down() -> None:
    _state["script"] = None


def amdsmi_get_processor_handles() -> list[Any]:
    script = _state["script"]
    if script is None:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_INIT_ERROR)
    return [
        ctypes.cast(ctypes.c_void_p(i + 1), amdsmi_wrapper.amdsmi_processor_handle)
        for i in range(len(script["gpus"]))
    ]


def amdsmi_get_gpu_device_uuid(processor_handle: Any) -> str:
    return str(_answer(_gpu(processor_handle).get("uuid")))


def amdsmi_get_gpu_device_bdf(processor_handle: Any) -> str:
    return str(_answer(_gpu(processor_handle).get("bdf")))


def amdsmi_get_gpu_asic_info(processor_handle: Any) -> dict[str, Any]:
    return dict(_answer(_gpu(processor_handle).get("asic")))


def amdsmi_get_gpu_driver_info(processor_handle: Any) -> dict[str, Any]:
    _gpu(processor_handle)
    version = _state["script"].get("driver_version") or "N/A"
    return {"driver_name": "amdgpu", "driver_version": version, "driver_date": "N/A"}


def amdsmi_get_gpu_activity(processor_handle: Any) -> dict[str, Any]:
    return dict(_answer(_gpu(processor_handle).get("activity")))


def amdsmi_get_temp_metric(
    processor_handle: Any,
    sensor_type: AmdSmiTemperatureType,
    metric: AmdSmiTemperatureMetric,
) -> int:
    if not isinstance(sensor_type, AmdSmiTemperatureType):
        raise AmdSmiParameterException(sensor_type, AmdSmiTemperatureType)
    if not isinstance(metric, AmdSmiTemperatureMetric):
        raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
    sensors = _gpu(processor_handle).get("temperature") or {}
    if metric != AmdSmiTemperatureMetric.CURRENT:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    return int(_answer(sensors.get(_SENSORS.get(sensor_type, ""))))


def amdsmi_get_power_info(processor_handle: Any) -> dict[str, Any]:
    return dict(_answer(_gpu(processor_handle).get("power")))


def amdsmi_get_energy_count(processor_handle: Any) -> dict[str, Any]:
    return dict(_answer(_gpu(processor_handle).get("energy")))


def amdsmi_get_clock_info(processor_handle: Any, clock_type: AmdSmiClkType) -> dict[str, Any]:
    if not isinstance(clock_type, AmdSmiClkType):
        raise AmdSmiParameterException(clock_type, AmdSmiClkType)
    clocks = _gpu(processor_handle).get("clock") or {}
    return dict(_answer(clocks.get(_CLOCKS.get(clock_type, ""))))


def amdsmi_get_gpu_total_ecc_count(processor_handle: Any) -> dict[str, Any]:
    return dict(_answer(_gpu(processor_handle).get("ecc")))


def amdsmi_get_gpu_vram_usage(processor_handle: Any) -> dict[str, Any]:
    return dict(_answer(_gpu(processor_handle).get("vram")))


def amdsmi_get_gpu_process_list(processor_handle: Any) -> list[dict[str, Any]]:
    return [dict(p) for p in _answer(_gpu(processor_handle).get("processes", []))]


__all__ = [
    "AmdSmiClkType",
    "AmdSmiException",
    "AmdSmiInitFlags",
    "AmdSmiLibraryException",
    "AmdSmiParameterException",
    "AmdSmiTemperatureMetric",
    "AmdSmiTemperatureType",
    "amdsmi_get_clock_info",
    "amdsmi_get_energy_count",
    "amdsmi_get_gpu_activity",
    "amdsmi_get_gpu_asic_info",
    "amdsmi_get_gpu_device_bdf",
    "amdsmi_get_gpu_device_uuid",
    "amdsmi_get_gpu_driver_info",
    "amdsmi_get_gpu_process_list",
    "amdsmi_get_gpu_total_ecc_count",
    "amdsmi_get_gpu_vram_usage",
    "amdsmi_get_power_info",
    "amdsmi_get_processor_handles",
    "amdsmi_get_temp_metric",
    "amdsmi_init",
    "amdsmi_shut_down",
]
