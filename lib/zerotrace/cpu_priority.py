"""How much CPU zerotrace's own user-space work may take from the programs it observes.

The probes run in the kernel, in the observed threads, whatever this says. What follows them
(reading the ring buffers, decoding, correlating, indexing, serving) is Python that competes
with the observed server for the same cores: on a 2-core machine at normal priority it added
~35 ms to a streaming server's p99 TTFT (bench/llm_overhead.py). Under SCHED_IDLE it runs only
on CPU time nobody else wants, and the events wait in the ring buffers (16 MiB) meanwhile; if a
machine stays saturated long enough for them to fill, the loss is counted (socket.lost).
"""

from __future__ import annotations

import os
from pathlib import Path

POLICIES = ("idle", "normal")


def set_cpu_priority(policy: str, task_dir: Path = Path("/proc/self/task")) -> int:
    """Applies the policy to every thread of this process (a policy is per thread; threads
    started later inherit it from the one that starts them). Returns how many were set.
    Raises ValueError for an unknown policy, OSError when the kernel refuses."""
    if policy not in POLICIES:
        raise ValueError(f"cpu priority must be one of {', '.join(POLICIES)}, not {policy!r}")
    kind = os.SCHED_IDLE if policy == "idle" else os.SCHED_OTHER
    done = 0
    for task in task_dir.iterdir():
        try:
            os.sched_setscheduler(int(task.name), kind, os.sched_param(0))
        except ProcessLookupError:
            continue  # the thread ended meanwhile
        done += 1
    return done


def current_policy(tid: int = 0) -> str:
    return "idle" if os.sched_getscheduler(tid) == os.SCHED_IDLE else "normal"
