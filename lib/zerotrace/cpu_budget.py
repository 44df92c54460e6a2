"""How much CPU zerotrace's own user-space work may take: a budget in cores, held by the kernel.

The probes run in the kernel, in the observed threads, whatever this says. What follows them
(reading the ring buffers, decoding, symbolizing, correlating, indexing, serving) is Python that
competes with the observed programs for the same cores. It used to run under SCHED_IDLE, which
kept it out of their way on a quiet machine and starved it on a busy one: the rings filled and
events were lost at random, short-lived processes were gone before their stacks were named.

Now it runs at normal priority inside its own cgroup with a CPU limit, the way a fleet agent is
held (DeepFlow's agent: 1 core by default): cgroup v2 ``cpu.max`` where the v2 hierarchy has
the cpu controller, else cgroup v1 ``cpu.cfs_quota_us`` on hosts that still mount the v1 cpu
controller (a hybrid layout, like Debian 11/12 hosts with systemd's legacy mode). It never gets
more than the budget. Where neither is writable (a container without its cgroup delegated, no
root), it runs unlimited and says so in one line.

Within the limit, how hard it competes is its cgroup's weight, steered by whether it keeps up
(:meth:`CpuBudget.steer`): while it does, a light weight (an eighth of a normal task's), so that
a server woken with a request is not made to wait behind a batch of zerotrace's work (at full
weight that added ~35 ms to a streaming server's p99 TTFT on 2 cores); still a floor (an eighth
of a core against one busy task per core), never SCHED_IDLE's starvation. While it falls
behind (its ring left events after a poll), a normal task's weight, up to the budget, until it
has kept up for a while.

The cgroup is ``zerotrace-budget-<pid>`` directly under the hierarchy's root: a cgroup v2 child may
take the cpu controller only if its parent holds no processes, which only the root may. It is
left (and removed) when the budget is released; an older one whose process is gone (killed)
is removed on the next start.

Parsing is pure (:func:`v2_cpu_root`, :func:`v1_cpu_root`, :func:`cgroup_path_in`,
:func:`cpu_max_line`); the file writes are in :func:`apply_cpu_budget` and the methods of
:class:`CpuBudget`.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_CPU_BUDGET",
    "PERIOD_US",
    "CpuBudget",
    "apply_cpu_budget",
    "cgroup_path_in",
    "cpu_max_line",
    "v1_cpu_root",
    "v2_cpu_root",
]

DEFAULT_CPU_BUDGET: Final = 0.5
# The quota is spread over short periods: with 100 ms (the kernel's default) a burst could run
# 50 ms at once and then wait 50 ms; with 20 ms neither stall exceeds 10 ms at 0.5 core.
PERIOD_US: Final = 20_000
_MIN_QUOTA_US: Final = 1_000  # the kernel refuses less
# Weights in cgroup v1 cpu.shares units (a nice-0 task is 1024; v2 cpu.weight 100 is the same).
WEIGHT_KEEPING_UP: Final = 128
WEIGHT_BEHIND: Final = 1024
CALM_AFTER_S: Final = 1.0  # kept up this long after falling behind: light again
GROUP_PREFIX: Final = "zerotrace-budget-"  # then the pid
V2: Final = "cgroup v2 cpu.max"
V1: Final = "cgroup v1 cpu.cfs_quota_us"


@dataclass
class CpuBudget:
    """cores: the budget asked for (0 = none); enforced_by: how the kernel holds it
    ("cgroup v2 cpu.max" / "cgroup v1 cpu.cfs_quota_us"), None when it does not; note: one line
    for a person, saying which, or why not."""

    cores: float
    enforced_by: str | None
    note: str
    cgroup: Path | None = None
    _home: Path | None = field(default=None, repr=False)
    weight: int = WEIGHT_BEHIND
    keeping_up: bool = True  # as steer() last found it: no ring left behind for a while
    _behind_at: float | None = field(default=None, repr=False)

    def steer(self, behind: bool, now: float) -> None:
        """Called once per turn of the loop: *behind* when a poll left events in a ring.
        Writes the weight only when it changes (a file write, not per turn)."""
        if behind:
            self._behind_at = now
        calm = self._behind_at is None or now - self._behind_at >= CALM_AFTER_S
        self.keeping_up = calm
        self.set_weight(WEIGHT_KEEPING_UP if calm else WEIGHT_BEHIND)

    def set_weight(self, weight: int) -> None:
        """The cgroup's CPU weight in cpu.shares units (best effort: a refused write keeps the
        weight it had)."""
        if self.cgroup is None or weight == self.weight:
            return
        v2 = self.enforced_by == V2
        name, value = ("cpu.weight", max(1, weight * 100 // 1024)) if v2 else ("cpu.shares", weight)
        with contextlib.suppress(OSError):
            (self.cgroup / name).write_text(f"{value}\n")
            self.weight = weight

    def exempt(self, pid: int) -> str | None:
        """Put *pid* back where zerotrace was before its budget: a command zerotrace started
        (``run -- CMD``) is observed, not part of zerotrace's own work, and must not share its
        limit. Returns None, or one line saying why the kernel refused."""
        if self._home is None:
            return None
        try:
            (self._home / "cgroup.procs").write_text(f"{pid}\n")
        except OSError as exc:
            return f"pid {pid} stays inside zerotrace's CPU budget: {exc.strerror or exc}"
        return None

    def release(self) -> None:
        """Leave the budget's cgroup and remove it (safe to call twice; best effort: a cgroup
        left behind is removed by the next start)."""
        if self.cgroup is None or self._home is None:
            return
        with contextlib.suppress(OSError):
            (self._home / "cgroup.procs").write_text(f"{os.getpid()}\n")
        with contextlib.suppress(OSError):
            self.cgroup.rmdir()
        self.cgroup = None


def v2_cpu_root(mounts: str) -> Path | None:
    """The cgroup v2 mount point from /proc/mounts text, or None."""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2":
            return Path(parts[1])
    return None


def v1_cpu_root(mounts: str) -> Path | None:
    """The mount point of the cgroup v1 hierarchy that holds the cpu controller, or None
    (mounted alone as "cpu" or together as "cpu,cpuacct")."""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "cgroup" and "cpu" in parts[3].split(","):
            return Path(parts[1])
    return None


def cpu_max_line(cores: float, period_us: int = PERIOD_US) -> str:
    """cgroup v2 ``cpu.max`` content: quota and period in microseconds."""
    quota = max(_MIN_QUOTA_US, round(cores * period_us))
    return f"{quota} {period_us}"


def apply_cpu_budget(
    cores: float, *, mounts_file: Path = Path("/proc/mounts"), pid: int | None = None
) -> CpuBudget:
    """Hold this process (every thread, and whatever it starts from now on) to *cores* CPUs.
    Never raises for a host that does not allow it: the result says so (``enforced_by`` None).
    Call it before starting threads that should count, and :meth:`CpuBudget.exempt` a command
    started for observation."""
    if cores < 0:
        raise ValueError(f"a CPU budget is a number of cores >= 0, not {cores}")
    if cores == 0:
        return CpuBudget(0, None, "CPU budget: none (--cpu-budget 0): zerotrace is not limited")
    pid = os.getpid() if pid is None else pid
    try:
        mounts = mounts_file.read_text()
    except OSError as exc:
        return _unlimited(cores, f"cannot read {mounts_file}: {exc.strerror}")
    reasons = []
    v2 = v2_cpu_root(mounts)
    if v2 is not None:
        try:
            return _hold_v2(cores, v2, pid)
        except OSError as exc:
            reasons.append(f"cgroup v2 at {v2}: {exc.strerror or exc}")
    v1 = v1_cpu_root(mounts)
    if v1 is not None:
        try:
            return _hold_v1(cores, v1, pid)
        except OSError as exc:
            reasons.append(f"cgroup v1 cpu at {v1}: {exc.strerror or exc}")
    return _unlimited(cores, "; ".join(reasons) or "no cgroup cpu controller is mounted")


def _unlimited(cores: float, why: str) -> CpuBudget:
    return CpuBudget(
        cores, None, f"CPU budget {cores:g} core not enforced ({why}): zerotrace runs unlimited"
    )


def _sweep_stale(root: Path) -> None:
    for old in root.glob(f"{GROUP_PREFIX}*"):
        with contextlib.suppress(OSError, ValueError):
            if not (old / "cgroup.procs").read_text().strip():
                old.rmdir()  # refused while it holds a process: then it is not stale


def cgroup_path_in(proc_cgroup: str, v1: bool) -> str:
    """A process's cgroup path (without the leading /) from /proc/<pid>/cgroup text: the v2
    line ("0::/path"), or the v1 line listing the cpu controller ("4:cpu,cpuacct:/path")."""
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if (controllers == "") if not v1 else ("cpu" in controllers.split(",")):
            return path.lstrip("/")
    return ""


def _enter(cores: float, how: str, root: Path, pid: int, limits: dict[str, str]) -> CpuBudget:
    """Make the budget cgroup under *root*, write its *limits* and move *pid* into it."""
    _sweep_stale(root)
    home = root / cgroup_path_in(Path(f"/proc/{pid}/cgroup").read_text(), v1=how == V1)
    cgroup = root / f"{GROUP_PREFIX}{pid}"
    cgroup.mkdir(exist_ok=True)
    try:
        for name, value in limits.items():
            (cgroup / name).write_text(value + "\n")
        (cgroup / "cgroup.procs").write_text(f"{pid}\n")  # every thread of the process
    except OSError:
        with contextlib.suppress(OSError):
            cgroup.rmdir()
        raise
    return _held(cores, how, cgroup, home)


def _hold_v2(cores: float, root: Path, pid: int) -> CpuBudget:
    if "cpu" not in (root / "cgroup.controllers").read_text().split():
        raise OSError(0, "the cpu controller is not in the v2 hierarchy")
    if "cpu" not in (root / "cgroup.subtree_control").read_text().split():
        (root / "cgroup.subtree_control").write_text("+cpu\n")
    return _enter(cores, V2, root, pid, {"cpu.max": cpu_max_line(cores)})


def _hold_v1(cores: float, root: Path, pid: int) -> CpuBudget:
    quota, period = cpu_max_line(cores).split()
    limits = {"cpu.cfs_period_us": period, "cpu.cfs_quota_us": quota}
    return _enter(cores, V1, root, pid, limits)


def _held(cores: float, how: str, cgroup: Path, home: Path) -> CpuBudget:
    budget = CpuBudget(cores, how, f"CPU budget {cores:g} core ({how}, {cgroup})", cgroup, home)
    budget.set_weight(WEIGHT_KEEPING_UP)
    return budget
