"""The profiling flags `zerotrace run` and `zerotrace collector` share, and the feeds they build.

Profiling is opt-in (--profile): its eBPF programs take a few more seconds to compile, and the
off-CPU probe runs at every context switch of the profiled threads.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerotrace_collector.probes.profile import DEFAULT_OFFCPU_MIN_NS, DEFAULT_RATE_HZ

if TYPE_CHECKING:
    from zerotrace_collector.service_cache import ServiceCache


def add_profiling_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "profiling",
        "flame graphs: on-CPU samples, off-CPU time, GPU memory and launches, with Python "
        "frames (CPython 3.10-3.13), native and kernel frames",
    )
    g.add_argument(
        "--profile",
        action="store_true",
        help="sample stacks (on-CPU and off-CPU) and trace CUDA allocations and launches",
    )
    g.add_argument(
        "--sample-hz",
        type=int,
        default=DEFAULT_RATE_HZ,
        help=f"on-CPU samples per second per CPU (default {DEFAULT_RATE_HZ})",
    )
    g.add_argument(
        "--off-cpu-min-us",
        type=int,
        default=DEFAULT_OFFCPU_MIN_NS // 1000,
        help="report a thread's blocked time only from this many microseconds "
        f"(default {DEFAULT_OFFCPU_MIN_NS // 1000})",
    )
    g.add_argument("--no-off-cpu", action="store_true", help="on-CPU samples only")
    g.add_argument("--no-gpu", action="store_true", help="do not attach the CUDA uprobes")


def profiling_feeds(
    args: argparse.Namespace,
    bpf_dir: Path,
    node_id: str,
    mono_to_epoch_ns: int,
    follows: bool,
    services: ServiceCache | None = None,
) -> list[Any]:
    """The feeds --profile asks for (none without it). follows: only the processes given to
    `follow` after attaching (and their children); otherwise every process but ours;
    services: the node's ServiceCache (None: records name no service)."""
    if not args.profile:
        return []
    from zerotrace_collector.gpu_feed import GpuFeed
    from zerotrace_collector.probes.gpu import GpuProbe
    from zerotrace_collector.probes.profile import ProfileProbe
    from zerotrace_collector.profile_feed import ProfileFeed
    from zerotrace_collector.symbols import Symbolizer

    if args.sample_hz <= 0 or args.off_cpu_min_us < 0:
        raise ValueError("--sample-hz must be positive and --off-cpu-min-us not negative")
    pids: set[int] | None = set() if follows else None
    symbolizer = Symbolizer()  # one for every feed: ELF tables are read once per file
    probe = ProfileProbe(
        bpf_dir,
        rate_hz=args.sample_hz,
        off_cpu=not args.no_off_cpu,
        off_cpu_min_ns=args.off_cpu_min_us * 1000,
        pids=pids,
    )
    feeds: list[Any] = [
        ProfileFeed(probe, node_id, mono_to_epoch_ns, symbolizer, services=services)
    ]
    if not args.no_gpu:
        # First: the collector loop waits on its first feed, and a process stopped at a CUDA
        # library open waits for this feed's poll to be resumed.
        gpu = GpuProbe(bpf_dir, follow=follows)
        feeds.insert(0, GpuFeed(gpu, node_id, mono_to_epoch_ns, symbolizer, services=services))
    return feeds


def profiling_notes(feeds: list[Any]) -> list[str]:
    """After attaching: one line for each part of profiling this kernel cannot do."""
    return [note for feed in feeds for note in feed.probe.notes]


def follow(feeds: list[Any], pid: int) -> None:
    """After attaching: profile pid and what it starts from now on."""
    for feed in feeds:
        feed.follow_pid(pid)
