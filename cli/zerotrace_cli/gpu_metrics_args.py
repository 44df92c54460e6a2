"""The GPU device metrics flags `zerotrace run` and `zerotrace collector` share, and the feed
they build: NVIDIA GPUs through NVML into raw.gpumetrics.

Opt-in (--gpu-metrics): on a node without NVML it would only say that it is not there. A node
with NVML but no eBPF work to do runs it alone: `zerotrace collector --no-sockets --no-files
--gpu-metrics`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from zerotrace.errors import ConfigError

if TYPE_CHECKING:
    from zerotrace_collector.service_cache import ServiceCache

DEFAULT_INTERVAL_S = 1.0  # as zerotrace_collector.gpu_metrics_feed's (not imported: startup)


def add_gpu_metrics_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "GPU device metrics",
        "NVIDIA GPUs through NVML (libnvidia-ml.so.1): utilisation, memory, power and energy, "
        "clocks and their event reasons, temperatures, ECC, remapped rows, PCIe and NVLink, "
        "XID errors (at once), and each process's memory and utilisation, named as DCGM names "
        "them, into raw.gpumetrics",
    )
    g.add_argument("--gpu-metrics", action="store_true", help="sample the GPUs through NVML")
    g.add_argument(
        "--gpu-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"sample every GPU this often (default {DEFAULT_INTERVAL_S:g}); an XID error "
        "samples its GPU at once",
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
    from zerotrace_collector.nvml_devices import NvmlDevices

    clock = SystemClock()
    return [
        GpuMetricsFeed(
            NvmlDevices(clock, note=say),
            node_id,
            clock,
            interval_s=args.gpu_interval,
            process_names=ProcessNamer(services),
            note=say,
        )
    ]
