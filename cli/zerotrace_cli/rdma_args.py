"""The RDMA counter flags `zerotrace run` and `zerotrace collector` share, and the feed they
build: each RDMA port's counters from /sys/class/infiniband (mlx5, rxe, ... in one vocabulary,
with rates) and, where `rdma statistic` offers them, each process's QP counters, into raw.rdma.

Opt-in (--rdma), as the GPU device metrics are: a node's device feeds are asked for, so a run
does only what its command line says (and `rdma statistic` is a program started every
interval). Asked on a node without RDMA, the run says so in one line and goes on. A node with
only counters to read runs them alone: `zerotrace collector --no-sockets --no-files --rdma`.

--roce-interface IF adds the live RoCE flows feed: RoCEv2 packets (UDP port 4791) captured on IF,
a raw.rdma record per active queue pair flow every --rdma-interval (throughput, PSN gaps, loss
and retransmission, request-to-ACK latency, NAKs, CNPs). An interface that does not exist, or a
capture not allowed, is one line; the run goes on without it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zerotrace.errors import ConfigError

DEFAULT_INTERVAL_S = 1.0  # as zerotrace_collector.rdma.rdma_feed's (not imported: startup)
SYSFS_ROOT = "/sys/class/infiniband"  # as zerotrace_collector.rdma.sysfs_ports's
MAX_FLOWS = 4096  # as zerotrace_collector.packets.roce_flows.MAX_QPS
LOSS_AFTER_S = 10.0  # as zerotrace_collector.packets.roce_psn.LOSS_AFTER_NS


def add_rdma_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "RDMA counters",
        "each RDMA port's counters from /sys/class/infiniband (bytes, packets, errors, "
        "discards, out-of-sequence, retries and timeouts, ECN and CNP: mlx5 and rxe names "
        "read as one set) as values and rates per second, and each process's QP counters "
        "where `rdma statistic` has them, into raw.rdma",
    )
    g.add_argument(
        "--rdma",
        action="store_true",
        help="read the RDMA counters (off by default; a node without RDMA says so and runs on)",
    )
    g.add_argument(
        "--rdma-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"read them, and report RoCE flows, this often (default {DEFAULT_INTERVAL_S:g})",
    )
    # Where the port counters are read: recorded sysfs trees in tests.
    g.add_argument("--rdma-sysfs", default=SYSFS_ROOT, metavar="ROOT", help=argparse.SUPPRESS)
    g.add_argument(
        "--roce-interface",
        metavar="IF",
        help="capture RoCEv2 packets (UDP port 4791) on this interface: per queue pair "
        "throughput, PSN gaps as loss and retransmission, request-to-ACK latency, NAK and CNP "
        "counts (needs the traffic to pass the kernel: Soft-RoCE, a mirror port, lo)",
    )
    g.add_argument(
        "--roce-max-flows",
        type=int,
        default=MAX_FLOWS,
        metavar="N",
        help=f"queue pair flows tracked at most; past it the least recent is closed and "
        f"counted (default {MAX_FLOWS})",
    )
    # How long a missing PSN waits before it is lost (capture time): short in tests.
    g.add_argument("--roce-loss-after", type=float, default=LOSS_AFTER_S, help=argparse.SUPPRESS)


def rdma_feeds(args: argparse.Namespace, node_id: str) -> list[Any]:
    """The feeds --rdma and --roce-interface ask for (none without them)."""
    if not (args.rdma or args.roce_interface):
        return []
    if not args.rdma_interval > 0:
        raise ConfigError(f"--rdma-interval must be positive, not {args.rdma_interval:g}")
    from zerotrace_cli.common import say

    feeds: list[Any] = []
    if args.rdma:
        from zerotrace_collector.rdma.rdma_feed import RdmaFeed

        feeds.append(
            RdmaFeed(
                node_id,
                interval_ns=int(args.rdma_interval * 1e9),
                root=Path(args.rdma_sysfs),
                note=say,
            )
        )
    if args.roce_interface:
        if args.roce_max_flows < 1:
            raise ConfigError(f"--roce-max-flows must be at least 1, not {args.roce_max_flows}")
        if not args.roce_loss_after > 0:
            raise ConfigError(f"--roce-loss-after must be positive, not {args.roce_loss_after:g}")
        from zerotrace_collector.rdma.roce_live import RoceLiveFeed

        feeds.append(
            RoceLiveFeed(
                node_id,
                args.roce_interface,
                interval_ns=int(args.rdma_interval * 1e9),
                max_flows=args.roce_max_flows,
                loss_after_ns=int(args.roce_loss_after * 1e9),
                note=say,
            )
        )
    return feeds
