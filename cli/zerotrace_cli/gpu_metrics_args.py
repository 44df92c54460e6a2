"""The GPU device metrics flags `zerotrace run` and `zerotrace collector` share, and the feed
they build: NVIDIA GPUs through NVML, AMD GPUs through amd-smi (rocm-smi), Huawei Ascend NPUs
through npu-smi, into raw.gpumetrics.

Opt-in (--gpu-metrics): on a node without a GPU it would only say that none is there.
--gpu-vendor picks the adapter (auto: the first of NVML, amd-smi, npu-smi that opens); the
node says in one line which one it reads, or why none. A node with GPUs but no eBPF work to
do runs it alone: `zerotrace collector --no-sockets --no-files --gpu-metrics`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from zerotrace.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from zerotrace.clock import Clock
    from zerotrace_collector.gpu_vendor import Candidate
    from zerotrace_collector.service_cache import ServiceCache

DEFAULT_INTERVAL_S = 1.0  # as zerotrace_collector.gpu_metrics_feed's (not imported: startup)
VENDOR_CHOICES = ("auto", "nvidia", "amd", "ascend")  # as zerotrace_collector.gpu_vendor's


def add_gpu_metrics_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "GPU device metrics",
        "NVIDIA GPUs through NVML (libnvidia-ml.so.1): utilisation, memory, power and energy, "
        "clocks and their event reasons, temperatures, ECC, remapped rows, PCIe and NVLink, "
        "XID errors (at once), each process's memory and utilisation, and on Hopper and newer "
        "GPM's SM, tensor and DRAM activity; AMD GPUs through ROCm's amdsmi package or "
        "amd-smi (rocm-smi where only it is installed) and Huawei Ascend NPUs through npu-smi "
        "(with its Health verdict), each giving what its tool prints; named as DCGM names "
        "them, into raw.gpumetrics",
    )
    g.add_argument("--gpu-metrics", action="store_true", help="sample the GPUs")
    g.add_argument(
        "--gpu-vendor",
        choices=VENDOR_CHOICES,
        default="auto",
        help="whose GPUs: auto (default) reads the first of NVML, amdsmi/amd-smi, npu-smi that is "
        "there and says which; a vendor named that is not there is said in one line and the "
        "run goes on without GPU metrics",
    )
    g.add_argument(
        "--gpu-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"sample every GPU this often (default {DEFAULT_INTERVAL_S:g}); an XID error "
        "samples its GPU at once; amd-smi and npu-smi run off the collector loop, a tick "
        "that comes while the last still runs is skipped and counted",
    )


def gpu_metrics_feeds(
    args: argparse.Namespace, node_id: str, services: ServiceCache | None = None
) -> list[Any]:
    """The feed --gpu-metrics asks for (none without it). services: the node's ServiceCache,
    so a GPU process is named as the node's other records name it."""
    if not args.gpu_metrics:
        return []
    if not args.gpu_interval > 0:
        raise ConfigError(f"--gpu-interval must be positive, not {args.gpu_interval:g}")
    from zerotrace.clock import SystemClock
    from zerotrace_cli.common import say
    from zerotrace_collector.gpu_metrics_feed import GpuMetricsFeed, ProcessNamer
    from zerotrace_collector.gpu_vendor import VendorChoice

    clock = SystemClock()
    return [
        GpuMetricsFeed(
            VendorChoice(args.gpu_vendor, vendor_candidates(clock, say), note=say),
            node_id,
            clock,
            interval_s=args.gpu_interval,
            process_names=ProcessNamer(services),
            note=say,
        )
    ]


def vendor_candidates(clock: Clock, note: Callable[[str], None]) -> list[Candidate]:
    """Every vendor's adapter, unopened (opening one loads its library or runs its tool)."""
    from zerotrace_collector.amd_smi_devices import NO_AMD_SMI, AmdSmiDevices
    from zerotrace_collector.amdsmi_devices import NO_AMDSMI, AmdSmiPackageDevices
    from zerotrace_collector.gpu_vendor import Candidate
    from zerotrace_collector.npu_smi_devices import NO_NPU_SMI, NpuSmiDevices
    from zerotrace_collector.nvml_devices import NO_NVML, NvmlDevices

    return [
        Candidate(
            "nvidia",
            "NVIDIA GPUs through NVML",
            NO_NVML,
            "no NVML library (libnvidia-ml.so.1)",
            lambda: NvmlDevices(clock, note=note),
        ),
        # In-process library calls first; the CLI (a process per reading) where the package
        # is not installed or cannot start.
        Candidate(
            "amd",
            "AMD GPUs through the amdsmi package",
            NO_AMDSMI,
            "no amdsmi Python package",
            lambda: AmdSmiPackageDevices(note=note),
        ),
        Candidate(
            "amd",
            "AMD GPUs through",
            NO_AMD_SMI,
            "no amd-smi or rocm-smi on PATH",
            lambda: AmdSmiDevices(note=note),
        ),
        Candidate(
            "ascend",
            "Huawei Ascend NPUs through",
            NO_NPU_SMI,
            "no npu-smi on PATH",
            lambda: NpuSmiDevices(note=note),
        ),
    ]
