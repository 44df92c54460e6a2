"""The GPU device metrics every vendor adapter fills, named after DCGM's fields (pure data).

A sample's metrics are the fields of ``zerotrace.raw.GpuDeviceMetrics``; this table names each
as dcgm-exporter exports it, so a DCGM user recognises it in every record, window, API answer
and Prometheus series. It lives in the shared library because the collector (which fills the
fields), profiler-agg (which aggregates them per window) and the query service (which exports
them under their DCGM names) all read it, and services never import each other.

Values keep zerotrace's units everywhere (bytes, KiB, mJ, ...); only the Prometheus export
(the query service's /metrics) converts the few whose DCGM unit differs (export_divisor:
framebuffer to MiB, PCIe to KB), so a dashboard built for dcgm-exporter reads them unchanged,
and exports the NVLink counters whose DCGM namesake means something else under zerotrace's
own names (export_name). Every other field's unit is DCGM's: C, W, mJ, MHz, % (the DEV
utilisations), ratios 0..1 (the PROF activities), the last XID, row counts, 0/1 flags.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

__all__ = ["DCGM_FIELDS", "KB", "METRIC_FIELDS", "MIB", "DcgmField"]


MIB = 2**20  # DCGM's framebuffer unit
KB = 1024  # DCGM's PCIe throughput unit (dcgm-exporter's help says KB; NVML's KB are 1024 bytes)


@dataclass(frozen=True)
class DcgmField:
    dcgm: str  # DCGM's field name, as dcgm-exporter exports it
    field: str  # the zerotrace field in GpuDeviceMetrics
    avro: str  # long, double or boolean (always nullable in the schema)
    doc: str  # what it is, with its unit (and DCGM's, where DCGM's differs)
    exporter_default: bool  # in dcgm-exporter's default-counters.csv (uncommented)
    _: KW_ONLY
    # Counts up since the driver loaded (a rate is the difference of two samples); the others
    # are gauges, read as they are at the sample. Its doc says "(counter".
    counter: bool
    # The zerotrace value divided by this is the value in DCGM's unit, as /metrics exports it
    # (fields keep whole units everywhere else: records, windows, API answers).
    export_divisor: int = 1
    # The Prometheus name when it is not DCGM's: a field whose meaning differs from DCGM's
    # field of that name is exported under zerotrace's own name, never DCGM's.
    export_name: str = ""

    @property
    def prometheus_name(self) -> str:
        return self.export_name or self.dcgm


# dcgm-exporter's default counter list (etc/default-counters.csv) is the checklist; the ones it
# lists commented out (ECC totals; SM activity and occupancy, the FP pipes) and a few DCGM
# fields it lacks (FB reserved and total, clock event reasons, row remap pending, MIG mode)
# are read too. Counters stay counters: a rate is the difference of two samples over their
# interval, as Prometheus' rate() takes it.
DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField(
        "DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", "long", "SM clock, MHz.", True, counter=False
    ),
    DcgmField(
        "DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz", "long", "Memory clock, MHz.", True, counter=False
    ),
    DcgmField(
        "DCGM_FI_DEV_MEMORY_TEMP",
        "memory_temp_c",
        "long",
        "Memory temperature, C.",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_GPU_TEMP",
        "temperature_c",
        "double",
        "GPU temperature, C.",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_POWER_USAGE", "power_w", "double", "Power draw, W.", True, counter=False
    ),
    DcgmField(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "total_energy_consumption_mj",
        "long",
        "Energy since the driver loaded, mJ (counter).",
        True,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "pcie_tx_bytes",
        "long",
        "Bytes sent over PCIe (counter; may wrap; DCGM's unit is KB: /metrics divides by 1024).",
        True,
        counter=True,
        export_divisor=KB,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "pcie_rx_bytes",
        "long",
        "Bytes received over PCIe (counter; may wrap; DCGM's unit is KB: /metrics divides by "
        "1024).",
        True,
        counter=True,
        export_divisor=KB,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "pcie_replay_counter",
        "long",
        "PCIe retries (counter).",
        True,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_GPU_UTIL", "gpu_util_pct", "double", "GPU utilisation, %.", True, counter=False
    ),
    DcgmField(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "mem_copy_util_pct",
        "double",
        "Memory (copy engine) utilisation, %.",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_ENC_UTIL",
        "enc_util_pct",
        "double",
        "Encoder utilisation, %.",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_DEC_UTIL",
        "dec_util_pct",
        "double",
        "Decoder utilisation, %.",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_XID_ERRORS",
        "xid_errors",
        "long",
        "The last XID error seen since the collector started (0: none; XIDs are never 0).",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_FREE",
        "fb_free_bytes",
        "long",
        "Framebuffer free, bytes (DCGM's unit is MiB: /metrics divides by 2**20).",
        True,
        counter=False,
        export_divisor=MIB,
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_USED",
        "fb_used_bytes",
        "long",
        "Framebuffer used, bytes (DCGM's unit is MiB: /metrics divides by 2**20).",
        True,
        counter=False,
        export_divisor=MIB,
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_RESERVED",
        "fb_reserved_bytes",
        "long",
        "Framebuffer reserved by the driver and firmware, bytes (DCGM's unit is MiB: /metrics "
        "divides by 2**20).",
        False,
        counter=False,
        export_divisor=MIB,
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_TOTAL",
        "fb_total_bytes",
        "long",
        "Framebuffer in all, bytes (DCGM's unit is MiB: /metrics divides by 2**20).",
        False,
        counter=False,
        export_divisor=MIB,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "ecc_sbe_vol_total",
        "long",
        "Single-bit ECC errors since the driver loaded (counter).",
        False,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "ecc_dbe_vol_total",
        "long",
        "Double-bit ECC errors since the driver loaded (counter).",
        False,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "ecc_sbe_agg_total",
        "long",
        "Single-bit ECC errors over the device's life (counter).",
        False,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "ecc_dbe_agg_total",
        "long",
        "Double-bit ECC errors over the device's life (counter).",
        False,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "nvlink_bandwidth_total_kib",
        "long",
        "NVLink data sent and received over all links, KiB (counter).",
        True,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "nvlink_tx_kib",
        "long",
        "NVLink data sent over all links, KiB (counter; DCGM's field of this name is a rate in "
        "bytes/s: /metrics exports this one as zerotrace_gpu_nvlink_tx_kib_total).",
        False,
        counter=True,
        export_name="zerotrace_gpu_nvlink_tx_kib_total",
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "nvlink_rx_kib",
        "long",
        "NVLink data received over all links, KiB (counter; DCGM's field of this name is a rate "
        "in bytes/s: /metrics exports this one as zerotrace_gpu_nvlink_rx_kib_total).",
        False,
        counter=True,
        export_name="zerotrace_gpu_nvlink_rx_kib_total",
    ),
    DcgmField(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "correctable_remapped_rows",
        "long",
        "Rows remapped for correctable errors.",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "uncorrectable_remapped_rows",
        "long",
        "Rows remapped for uncorrectable errors.",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "row_remap_failure",
        "boolean",
        "A row remapping failed.",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "row_remap_pending",
        "boolean",
        "A remapping waits for the next GPU reset.",
        False,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "clocks_event_reasons",
        "long",
        "Why clocks are below their maximum, a bitmask (formerly CLOCK_THROTTLE_REASONS).",
        False,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_DEV_MIG_MODE",
        "mig_mode",
        "boolean",
        "MIG (Multi-Instance GPU) mode is on now (not the mode pending a reset).",
        False,
        counter=False,
    ),
    # DCGM's profiling fields, read on GPUs with GPM (Hopper and newer) through NVML's GPM
    # metrics, each measured between two samples of the device (the feed's interval). As
    # DCGM gives them, ratios 0..1 of the interval (GPM says 0..100 %: divided by 100).
    DcgmField(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gr_engine_active_ratio",
        "double",
        "Share of the interval the graphics or compute engine was active, 0..1 (NVML GPM "
        "GRAPHICS_UTIL / 100).",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_PROF_SM_ACTIVE",
        "sm_active_ratio",
        "double",
        "Share of SM cycles with at least one warp resident, over all SMs, 0..1 (NVML GPM SM_UTIL "
        "/ 100).",
        False,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "sm_occupancy_ratio",
        "double",
        "Warps resident on the SMs over the most they hold, 0..1 (NVML GPM SM_OCCUPANCY / 100).",
        False,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "pipe_tensor_active_ratio",
        "double",
        "Share of cycles any tensor pipe was active, 0..1 (NVML GPM ANY_TENSOR_UTIL / 100).",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "dram_active_ratio",
        "double",
        "Device memory bandwidth used over its peak, 0..1 (NVML GPM DRAM_BW_UTIL / 100).",
        True,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "pipe_fp64_active_ratio",
        "double",
        "Share of cycles the FP64 pipes (not tensor) were active, 0..1 (NVML GPM FP64_UTIL / 100).",
        False,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "pipe_fp32_active_ratio",
        "double",
        "Share of cycles the FP32 pipes (not tensor) were active, 0..1 (NVML GPM FP32_UTIL / 100).",
        False,
        counter=False,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "pipe_fp16_active_ratio",
        "double",
        "Share of cycles the FP16 pipes (not tensor) were active, 0..1 (NVML GPM FP16_UTIL / 100).",
        False,
        counter=False,
    ),
)
METRIC_FIELDS: tuple[str, ...] = tuple(f.field for f in DCGM_FIELDS)
