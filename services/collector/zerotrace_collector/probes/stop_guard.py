"""Never leave a process stopped for the GPU probe: a guard that outlives the collector.

``bpf/gpu_calls.c`` stops (SIGSTOP) a process at the open of an unknown CUDA library, so the
collector can attach its uprobes before the first CUDA call; the collector then sends
SIGCONT. A collector that dies in between (kill -9, the OOM killer) would leave that process
stopped for good. So the GPU probe starts this guard as a child process, in a session of its
own (a terminal's Ctrl-C does not reach it), holding the read end of a pipe whose write end
only the collector has. From the moment the collector is dying (PF_EXITING: it may take
seconds to release its probes and close the pipe) until the pipe closes, the guard continues
every process that is stopped while holding a CUDA library open: the open
that stopped it has returned its fd, and the dynamic loader closes that fd only after the
process goes on, so such a process is one the probe stopped and nobody resumed. A process
stopped otherwise (a job stopped with Ctrl-Z after its libraries loaded) holds no such fd.

Run as ``python -m zerotrace_collector.probes.stop_guard``; it only reads /proc and signals.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["exiting", "held_for_cuda", "main", "release_held", "start", "stop", "stopped"]


def stopped(stat_text: str) -> bool:
    """Whether a /proc/PID/stat text says the process is stopped by a signal (state T)."""
    fields = stat_text.rsplit(")", 1)[-1].split()
    return bool(fields) and fields[0] == "T"


def held_for_cuda(fd_targets: Iterable[str]) -> bool:
    """Whether any of a process's open files (their /proc/PID/fd link targets) is a CUDA
    library by the probe's rule: a basename starting with ``libcudart`` or ``libcuda.``."""
    for target in fd_targets:
        name = target.rsplit("/", 1)[-1]
        if name.startswith(("libcudart", "libcuda.")):
            return True
    return False


def _fd_targets(folder: Path) -> list[str]:
    out = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        try:
            out.append(os.readlink(folder / name))
        except OSError:
            continue
    return out


def release_held(proc: Path = Path("/proc")) -> list[int]:
    """SIGCONT each process stopped with a CUDA library open; the pids it continued."""
    released = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            if not stopped((proc / entry / "stat").read_text()):
                continue
        except OSError:
            continue  # gone
        if held_for_cuda(_fd_targets(proc / entry / "fd")):
            try:
                os.kill(int(entry), signal.SIGCONT)
                released.append(int(entry))
            except ProcessLookupError:
                pass
    return released


def start() -> subprocess.Popen[bytes]:
    """The guard of this process (the collector), until this process ends or `stop`."""
    return subprocess.Popen(
        [sys.executable, "-m", __name__], stdin=subprocess.PIPE, start_new_session=True
    )


def stop(guard: subprocess.Popen[bytes]) -> None:
    """A clean end (every stopped process was resumed): the guard looks once more, exits."""
    if guard.stdin is not None:
        guard.stdin.close()
    try:
        guard.wait(timeout=10)
    except subprocess.TimeoutExpired:
        guard.kill()
        guard.wait()


PF_EXITING = 0x4  # task flag (/proc/PID/stat field 9): the process is exiting
POLL_S = 0.05


def exiting(stat_text: str | None) -> bool:
    """Whether a /proc/PID/stat text (None: the process is gone) shows a dying process: a
    zombie, or PF_EXITING set. A killed collector closes its files (the pipe among them) only
    after releasing its BPF programs and probes, which can take seconds; PF_EXITING is set at
    once."""
    if stat_text is None:
        return True
    fields = stat_text.rsplit(")", 1)[-1].split()
    return len(fields) < 7 or fields[0] in ("Z", "X") or bool(int(fields[6]) & PF_EXITING)


def _stat(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None


def main() -> int:
    # Only the collector's end stops the guard: a terminal's or a process group's signals do not.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    collector = os.getppid()
    released: list[int] = []
    while True:
        ready, _, _ = select.select([sys.stdin.buffer], [], [], POLL_S)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break  # the pipe closed: the collector is gone (or stopped us on purpose)
        if exiting(_stat(collector)):
            # Dying, its probes not released yet: a process may still be stopped meanwhile.
            released += release_held()
    released += release_held()
    if released:
        print(
            f"zerotrace stop guard: the collector exited with {len(set(released))} "
            f"process(es) stopped at a CUDA library open; continued {sorted(set(released))}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
