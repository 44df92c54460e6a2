"""Runs iproute2's `rdma` for per-process (QP counter set) and per-port statistics: a thin
shell over rdma_statistic.py, which parses what it prints.

`rdma` talks netlink (NETLINK_RDMA) to ib_core; without it, or without any RDMA device, it
fails with one line on stderr, and that line becomes the FeatureUnavailable message. Per
process counters exist only where QPs are bound to counter sets: `rdma statistic qp set link
DEV/PORT auto pid on` (root) makes one set per process; this module only reads.
"""

from __future__ import annotations

import shutil
import subprocess

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.rdma.rdma_statistic import (
    PortStatistic,
    QpCounterSet,
    parse_port_statistic,
    parse_qp_statistic,
)

TIMEOUT_S = 5.0  # a netlink dump of every counter set answers in milliseconds
QP_ARGS = ("-j", "statistic", "qp", "show")
PORT_ARGS = ("-j", "statistic", "show")


def qp_counter_sets(program: str = "rdma") -> list[QpCounterSet]:
    """Every QP counter set, with its process. Raises FeatureUnavailable (no `rdma`, no RDMA
    netlink) or ValueError (output not understood)."""
    return parse_qp_statistic(run_rdma(QP_ARGS, program))


def port_statistics(program: str = "rdma") -> list[PortStatistic]:
    """Each port's default counters, as `rdma statistic show` gives them."""
    return parse_port_statistic(run_rdma(PORT_ARGS, program))


def run_rdma(args: tuple[str, ...], program: str = "rdma") -> str:
    path = shutil.which(program)
    if path is None:
        raise FeatureUnavailable(
            f"per-process RDMA counters need iproute2's {program!r} program, not found on PATH"
        )
    try:
        done = subprocess.run(
            [path, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise FeatureUnavailable(f"`{program} {' '.join(args)}` did not answer in time") from None
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise FeatureUnavailable(f"`{program} {' '.join(args)}` failed: {reason}")
    return done.stdout
