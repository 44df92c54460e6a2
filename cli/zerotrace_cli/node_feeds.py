"""The probes and feeds of one node, assembled from the command line: one function for both
`zerotrace run` (embedded) and `zerotrace collector` (distributed), so the two cannot drift."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zerotrace.cpu_slices import CpuSlices
from zerotrace_cli.common import BPF_DIR
from zerotrace_cli.gpu_metrics_args import add_gpu_metrics_arguments, gpu_metrics_feeds
from zerotrace_cli.profiling_args import (
    add_profiling_arguments,
    profiling_feeds,
    profiling_notes,
)
from zerotrace_cli.profiling_args import follow as follow_profiled
from zerotrace_cli.rdma_args import add_rdma_arguments, rdma_feeds
from zerotrace_cli.socket_args import add_socket_arguments, redactor, socket_options

if TYPE_CHECKING:
    from zerotrace_collector.feeds import Feed
    from zerotrace_collector.probes.socket import SocketProbe

NO_SOCKET_FILTER = (
    "socket capture off: give --pid, --port, --process or --cgroup "
    "(unfiltered it would see Kafka's traffic)"
)


@dataclass
class NodeFeeds:
    """Every feed of the node, GPU first (see profiling_feeds), and the socket probe when
    TCP traffic is captured (its ring's backlog steers zerotrace's CPU weight)."""

    feeds: list[Feed]
    socket_probe: SocketProbe | None
    profiling: list[Any]

    @property
    def names(self) -> str:
        return ", ".join(feed.name for feed in self.feeds)

    @property
    def behind(self) -> bool:
        """The last poll left events in the socket ring, or the profiler found much waiting
        or new processes: the reader is behind (the CPU budget's weight goes up until it
        keeps up; see zerotrace.cpu_budget)."""
        if self.socket_probe is not None and self.socket_probe.backlog:
            return True
        return any(getattr(feed, "behind", False) for feed in self.profiling)

    def paced(self, slice_us: int) -> CpuSlices:
        """The pause point of the node's loop (zerotrace.cpu_slices: its work in pieces of at
        most *slice_us* of CPU on a busy node; 0: none), also set inside the socket probe's
        decoding of a poll."""
        slices = CpuSlices(slice_us)
        if self.socket_probe is not None:
            self.socket_probe.pause = slices.point
        return slices

    def programs(self) -> list[str]:
        """The final eBPF programs, for the hidden --ebpf flag (of the feeds that have one:
        GPU device metrics and RDMA counters are read without one)."""
        probes: list[Any] = [getattr(feed, "probe", None) for feed in self.feeds]
        return [str(p.program_text()) for p in probes if p is not None]

    def attach(self) -> list[str]:
        """Compile and attach every probe (ProbeUnavailable says in one line what could not);
        returns one line for each part this kernel cannot do."""
        for feed in self.feeds:
            feed.attach()
        socket_notes = self.socket_probe.notes if self.socket_probe is not None else []
        return [*socket_notes, *profiling_notes(self.profiling)]

    def follow(self, pid: int) -> None:
        """Observe pid and what it starts from now on (after attach)."""
        if self.socket_probe is not None:
            self.socket_probe.follow_pid(pid)
        for feed in self.feeds:
            if feed.name == "file-open" and feed.follows:  # a FileOpenFeed that follows
                feed.follow_pid(pid)  # type: ignore[attr-defined]
        follow_profiled(self.profiling, pid)

    def close(self) -> None:
        for feed in self.feeds:
            feed.close()


def add_node_arguments(p: argparse.ArgumentParser) -> None:
    """The options `node_feeds` reads: which processes and traffic, which probes."""
    p.add_argument(
        "--pid", type=int, default=0, help="observe only this process and the processes it starts"
    )
    p.add_argument(
        "--port",
        type=int,
        action="append",
        default=[],
        help="only TCP traffic on this port (repeatable)",
    )
    add_socket_arguments(p)
    p.add_argument("--no-files", action="store_true", help="do not trace file opens")
    p.add_argument("--no-tls", action="store_true", help="do not attach the TLS uprobes")
    add_profiling_arguments(p)
    add_gpu_metrics_arguments(p)
    add_rdma_arguments(p)


def node_feeds(
    args: argparse.Namespace,
    node_id: str,
    mono_to_epoch_ns: int,
    *,
    follows: bool,
    sockets: bool = True,
    file_rw: bool = True,
    service_names: str = "",
) -> NodeFeeds:
    """Feeds for the options `args` carries (--pid, --port, socket filters, --no-files,
    --no-tls, profiling). follows: only processes given to `follow` (and their children) are
    captured in the kernel; sockets: capture TCP traffic at all; file_rw: file reads and
    writes too, not only opens (ZEROTRACE_FILE_RW); service_names: ZEROTRACE_SERVICE_NAMES
    (raises ConfigError with one line). One service cache names the processes of every feed."""
    from zerotrace.service_identity import parse_service_names
    from zerotrace_collector.feeds import FileOpenFeed, SocketFeed
    from zerotrace_collector.probes.fileio import FileOpenProbe
    from zerotrace_collector.probes.socket import SocketProbe
    from zerotrace_collector.probes.tls import find_libssl
    from zerotrace_collector.service_cache import ServiceCache

    services = ServiceCache(parse_service_names(service_names))
    feeds: list[Any] = []
    socket_probe = None
    if sockets:
        socket_probe = SocketProbe(
            BPF_DIR,
            follow=follows,
            ports=args.port,
            tls=not args.no_tls,
            libssl=None if args.no_tls else find_libssl(),
            **socket_options(args),
        )
        feeds.append(
            SocketFeed(socket_probe, node_id, mono_to_epoch_ns, redactor(args), services=services)
        )
    if not args.no_files:
        # Reads and writes only of the processes observed: the host's all would flood the ring.
        probe = FileOpenProbe(
            BPF_DIR, pid_filter=args.pid, rw=file_rw and follows, follow=follows and file_rw
        )
        feeds.append(FileOpenFeed(probe, node_id, mono_to_epoch_ns, services))
    profiling = profiling_feeds(
        args, BPF_DIR, node_id, mono_to_epoch_ns, follows=follows, services=services
    )
    # Last: polled without waiting while an eBPF feed leads the loop (an XID still comes out
    # within one turn of it); alone, it leads and waits for its interval or an XID.
    gpu = gpu_metrics_feeds(args, node_id, services)
    rdma = rdma_feeds(args, node_id)  # as the GPU's: polled last, leads only when alone
    return NodeFeeds(profiling + feeds + gpu + rdma, socket_probe, profiling)
