"""The RDMA counter flags `zerotrace run` and `zerotrace collector` share, and the feed they
build: each RDMA port's counters from /sys/class/infiniband (mlx5, rxe, ... in one vocabulary,
with rates) and, where `rdma statistic` offers them, each process's QP counters, into raw.rdma.

Opt-in (--rdma), as the GPU device metrics are: a node's device feeds are asked for, so a run
does only what its command line says (and `rdma statistic` is a program started every
interval). Asked on a node without RDMA, the run says so in one line and goes on. A node with
only counters to read runs them alone: `zerotrace collector --no-sockets --no-files --rdma`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zerotrace.errors import ConfigError

DEFAULT_INTERVAL_S = 1.0  # as zerotrace_collector.rdma.rdma_feed's (not imported: startup)
SYSFS_ROOT = "/sys/class/infiniband"  # as zerotrace_collector.rdma.sysfs_ports's


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
        help=f"read them this often (default {DEFAULT_INTERVAL_S:g})",
    )
    # Where the port counters are read: recorded sysfs trees in tests.
    g.add_argument("--rdma-sysfs", default=SYSFS_ROOT, metavar="ROOT", help=argparse.SUPPRESS)


def rdma_feeds(args: argparse.Namespace, node_id: str) -> list[Any]:
    """The feed --rdma asks for (none without it)."""
    if not args.rdma:
        return []
    if not args.rdma_interval > 0:
        raise ConfigError(f"--rdma-interval must be positive, not {args.rdma_interval:g}")
    from zerotrace_cli.common import say
    from zerotrace_collector.rdma.rdma_feed import RdmaFeed

    return [
        RdmaFeed(
            node_id,
            interval_ns=int(args.rdma_interval * 1e9),
            root=Path(args.rdma_sysfs),
            note=say,
        )
    ]
