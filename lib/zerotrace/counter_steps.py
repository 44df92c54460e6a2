"""The step of a cumulative counter between two readings (pure), as Prometheus' increase()
takes it: a step up counts the difference; a step down is a reset or a wrap (the counter
started again from zero), so the new value is what it counted since.

One rule for every reader of device counters: profiler-agg's windows (device_windows.py), the
chip comparison across windows (zerotrace_query/chip_compare.py) and `zerotrace run`'s RDMA
lines (zerotrace_cli/device_view.py).
"""

from __future__ import annotations

__all__ = ["counter_step"]


def counter_step(previous: int, current: int) -> int:
    """What the counter counted from *previous* to *current* (never negative for counters
    that never go below zero)."""
    return current - previous if current >= previous else current
