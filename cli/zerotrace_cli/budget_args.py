"""`--cpu-budget`: how many cores zerotrace's own work on a node may use (run and collector).

The kernel holds the limit (lib/zerotrace/cpu_budget.py); this only reads the option or the
setting, applies it and says in one line how it is held, or that this host does not allow it.
"""

from __future__ import annotations

import argparse

from zerotrace import settings
from zerotrace.cpu_budget import CpuBudget, apply_cpu_budget
from zerotrace.errors import ConfigError
from zerotrace_cli.common import say


def add_budget_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cpu-budget",
        type=_cores,
        metavar="CORES",
        help="cores zerotrace's own work may use, held by a cgroup CPU limit; it runs at normal "
        "priority inside it, so a node whose cores are all busy cannot starve it "
        "(default: $ZEROTRACE_CPU_BUDGET or 0.5; 0 = no limit). Past it, load is shed "
        "and counted",
    )


def _cores(text: str) -> float:
    try:
        cores = float(text)
    except ValueError:
        cores = -1.0
    if not 0 <= cores < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"a number of cores >= 0, like 0.5, not {text!r}")
    return cores


def hold_budget(args: argparse.Namespace, common: settings.CommonSettings) -> CpuBudget:
    """Apply the option (else the setting) to this process and say how it is held."""
    if args.cpu_budget is not None:
        cores = args.cpu_budget
    else:
        try:
            cores = _cores(str(common.cpu_budget))
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(f"ZEROTRACE_CPU_BUDGET: {exc}") from None
    budget = apply_cpu_budget(cores)
    say(budget.note)
    return budget
