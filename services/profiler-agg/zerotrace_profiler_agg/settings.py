"""profiler-agg's settings: window widths, lateness and the memory bounds, from the environment."""

from __future__ import annotations

import dataclasses

from zerotrace import names
from zerotrace.settings import setting
from zerotrace_profiler_agg.gpu_fold import DEFAULT_QUIET_WINDOWS
from zerotrace_profiler_agg.gpu_memory import DEFAULT_CAPACITY

MS = 1_000_000


@dataclasses.dataclass(frozen=True)
class ProfilerAggSettings:
    group: str = setting(
        "ZEROTRACE_PROFILE_GROUP",
        names.GROUP_PROFILER_AGG,
        "Consumer group and faust app id; another one runs a replay beside the live worker.",
    )
    window_ms: int = setting(
        "ZEROTRACE_PROFILE_WINDOW_MS", 10_000, "Width of a profile window (tumbling, event time)."
    )
    lateness_ms: int = setting(
        "ZEROTRACE_PROFILE_LATENESS_MS",
        2_000,
        "How long after its end a window still takes records; later ones count as dropped.",
    )
    tick_lag_ms: int = setting(
        "ZEROTRACE_PROFILE_TICK_LAG_MS",
        5_000,
        "On a quiet input, event time is moved to the clock minus this (collector delay).",
    )
    live_allocations: int = setting(
        "ZEROTRACE_PROFILE_LIVE_ALLOCATIONS",
        DEFAULT_CAPACITY,
        "Most live GPU allocations remembered; past it the oldest is evicted and counted.",
    )
    device_window_ms: int = setting(
        "ZEROTRACE_PROFILE_DEVICE_WINDOW_MS",
        5_000,
        "Width of a GPU or RDMA device window (tumbling, event time, aligned to the epoch).",
    )
    quiet_windows: int = setting(
        "ZEROTRACE_PROFILE_QUIET_WINDOWS",
        DEFAULT_QUIET_WINDOWS,
        "Windows an idle process keeps getting GPU in-use snapshots after its last call.",
    )
