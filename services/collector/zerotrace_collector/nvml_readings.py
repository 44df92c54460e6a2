"""NVML's rules, apart from the calls (pure): which error is a gap, which fields one
``nvmlDeviceGetFieldValues`` call reads, how a field value is decoded, the clock event reasons'
names, a device's processes joined with their utilisation samples, and which GPM metrics give
DCGM's profiling fields.

Numbers are NVML's (nvml.h, the same in pynvml); this module imports nothing of NVML, so its
rules are tested without a driver.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from zerotrace_collector.gpu_devices import ProcessGpuUse

__all__ = [
    "CLOCKS_EVENT_REASONS",
    "FIELD_READS",
    "FIELD_VALUE_MEMBERS",
    "GPM_FIELDS",
    "GPM_READS",
    "FieldRead",
    "GpmRead",
    "UtilSample",
    "gpm_ratio",
    "is_gap",
    "is_older_driver",
    "merge_processes",
    "no_gpm_line",
    "not_available",
    "nvlink_total",
    "reason_names",
]

NVML_SUCCESS: Final = 0
NVML_ERROR_NOT_SUPPORTED: Final = 3
NVML_ERROR_NO_PERMISSION: Final = 4
NVML_ERROR_NOT_FOUND: Final = 6
NVML_ERROR_TIMEOUT: Final = 10
NVML_ERROR_LIBRARY_NOT_FOUND: Final = 12
NVML_ERROR_FUNCTION_NOT_FOUND: Final = 13
NVML_ERROR_ARGUMENT_VERSION_MISMATCH: Final = 25
# NVML_VALUE_NOT_AVAILABLE as an unsigned long long: a process's memory under WDDM.
NOT_AVAILABLE_ULL: Final = (1 << 64) - 1
# nvmlFieldValue_t.scopeId: for the NVLink throughput fields, the link; UINT_MAX sums all links.
ALL_LINKS: Final = 0xFFFFFFFF


def is_gap(code: int) -> bool:
    """The device (or this driver: a function it does not export) does not give the metric:
    a gap, not an error. Anything else is an error: counted, and said once."""
    return code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)


def is_older_driver(code: int) -> bool:
    """A versioned call this driver lacks: try the older one."""
    return code in (NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH)


@dataclass(frozen=True)
class FieldRead:
    field_id: int  # NVML_FI_*
    scope_id: int
    name: str  # the GpuDeviceMetrics field


# One nvmlDeviceGetFieldValues call per device reads these: each value carries its own return
# code, so an ECC count NOT_SUPPORTED on a device without ECC is a gap of that field only.
# The PCIe byte counters (NVML_FI_DEV_PCIE_COUNT_*) stand for nvmlDeviceGetPcieThroughput,
# which measures over a 20 ms window each call (NVML's documentation): two of them per device
# would make a sample take 40 ms of waiting.
FIELD_READS: tuple[FieldRead, ...] = (
    FieldRead(82, 0, "memory_temp_c"),  # NVML_FI_DEV_MEMORY_TEMP
    FieldRead(3, 0, "ecc_sbe_vol_total"),  # NVML_FI_DEV_ECC_SBE_VOL_TOTAL
    FieldRead(4, 0, "ecc_dbe_vol_total"),
    FieldRead(5, 0, "ecc_sbe_agg_total"),
    FieldRead(6, 0, "ecc_dbe_agg_total"),
    FieldRead(94, 0, "pcie_replay_counter"),  # NVML_FI_DEV_PCIE_REPLAY_COUNTER
    FieldRead(138, ALL_LINKS, "nvlink_tx_kib"),  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    FieldRead(139, ALL_LINKS, "nvlink_rx_kib"),  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    FieldRead(197, 0, "pcie_tx_bytes"),  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES
    FieldRead(198, 0, "pcie_rx_bytes"),  # NVML_FI_DEV_PCIE_COUNT_RX_BYTES
)

# nvmlValueType_t -> the member of the nvmlValue_t union that holds the value.
FIELD_VALUE_MEMBERS: Mapping[int, str] = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}

# nvmlClocksEventReason* bits (formerly nvmlClocksThrottleReason*), by NVML's names.
CLOCKS_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "GpuIdle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
)


def reason_names(mask: int) -> tuple[str, ...]:
    """The named bits of a clocks event reasons mask; a bit NVML adds later is ``0x...``."""
    named = [name for bit, name in CLOCKS_EVENT_REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in CLOCKS_EVENT_REASONS)
    return (*named, f"{rest:#x}") if rest else tuple(named)


def nvlink_total(
    tx_kib: int | float | bool | None, rx_kib: int | float | bool | None
) -> int | None:
    """DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL: sent and received, when both are known."""
    if tx_kib is None or rx_kib is None:
        return None
    return int(tx_kib) + int(rx_kib)


def not_available(value: int | None) -> int | None:
    """NVML_VALUE_NOT_AVAILABLE is no value."""
    return None if value is None or value == NOT_AVAILABLE_ULL else value


@dataclass(frozen=True)
class GpmRead:
    metric_id: int  # NVML_GPM_METRIC_*
    name: str  # the GpuDeviceMetrics field (a DCGM_FI_PROF_* field)


# One nvmlGpmMetricsGet call per device and interval computes these from two GPM samples; each
# metric carries its own return code, as field values do. DCGM's PIPE_TENSOR_ACTIVE is any
# tensor pipe on Hopper, what GPM calls ANY_TENSOR_UTIL; its FP pipes are the non-tensor ones.
GPM_READS: tuple[GpmRead, ...] = (
    GpmRead(1, "gr_engine_active_ratio"),  # NVML_GPM_METRIC_GRAPHICS_UTIL
    GpmRead(2, "sm_active_ratio"),  # NVML_GPM_METRIC_SM_UTIL
    GpmRead(3, "sm_occupancy_ratio"),  # NVML_GPM_METRIC_SM_OCCUPANCY
    GpmRead(5, "pipe_tensor_active_ratio"),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    GpmRead(10, "dram_active_ratio"),  # NVML_GPM_METRIC_DRAM_BW_UTIL
    GpmRead(11, "pipe_fp64_active_ratio"),  # NVML_GPM_METRIC_FP64_UTIL
    GpmRead(12, "pipe_fp32_active_ratio"),  # NVML_GPM_METRIC_FP32_UTIL
    GpmRead(13, "pipe_fp16_active_ratio"),  # NVML_GPM_METRIC_FP16_UTIL
)
GPM_FIELDS: tuple[str, ...] = tuple(r.name for r in GPM_READS)


def gpm_ratio(pct: float) -> float | None:
    """A GPM percentage (0..100) as DCGM gives its profiling fields, a ratio 0..1; NaN or an
    infinity is no value."""
    return pct / 100 if math.isfinite(pct) else None


def no_gpm_line(index: int, model: str, why: str) -> str:
    """The one line said for a device whose GPM metrics are not read."""
    return f"GPU {index} ({model}): {why}: SM activity, occupancy and tensor activity not read"


UtilSample = tuple[int, int, int, int, int, int]  # pid, timeStamp (us), sm, mem, enc, dec


def merge_processes(
    compute: Iterable[tuple[int, int | None]], utilization: Iterable[UtilSample]
) -> tuple[ProcessGpuUse, ...]:
    """A device's processes, by pid: *compute* gives (pid, used memory bytes or None),
    *utilization* the samples NVML kept since the last read (several per process: it samples
    every 1/6 s or so). A process's utilisation is the mean of its samples; one with samples
    but no compute entry (a graphics process) has no memory. Percentages NVML gives as
    integers stay exact."""
    memory: dict[int, int | None] = {}
    for pid, used in compute:
        memory[pid] = not_available(used)
    sums: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for pid, _ts, sm, mem, enc, dec in utilization:
        acc = sums[pid]
        acc[0] += 1
        acc[1] += sm
        acc[2] += mem
        acc[3] += enc
        acc[4] += dec
    out = []
    for pid in sorted(memory.keys() | sums.keys()):
        if pid not in sums:
            out.append(ProcessGpuUse(pid, memory.get(pid)))
            continue
        acc = sums[pid]
        n = acc[0]
        out.append(
            ProcessGpuUse(
                pid,
                memory.get(pid),
                acc[1] / n,
                acc[2] / n,
                acc[3] / n,
                acc[4] / n,
            )
        )
    return tuple(out)
