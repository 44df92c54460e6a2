"""Background server processes with pid files and logs under one folder: start, probe, stop.

The only module of the infra package that forks or signals; the node modules say what to run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zerotrace.errors import ConfigError, TransientIO

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ServerFiles:
    name: str
    folder: Path  # everything of this server: data, logs, pid file, config

    @property
    def pid_file(self) -> Path:
        return self.folder / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.folder / f"{self.name}.log"


def running_pid(files: ServerFiles) -> int | None:
    """The pid in the pid file if that process is alive and is ours; removes a stale file."""
    try:
        pid = int(files.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        files.pid_file.unlink(missing_ok=True)
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        cmdline = b""
    # A recycled pid belongs to some other program: only trust it if it runs our java class.
    if b"java" not in cmdline or str(files.folder).encode() not in cmdline:
        files.pid_file.unlink(missing_ok=True)
        return None
    return pid


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def require_free_ports(name: str, ports: Sequence[int]) -> None:
    for port in ports:
        if port_open(port):
            raise ConfigError(
                f"cannot start {name}: port 127.0.0.1:{port} is already taken by another "
                f"program (find it with `ss -ltnp 'sport = :{port}'`)"
            )


def spawn(files: ServerFiles, argv: Sequence[str], env: dict[str, str] | None = None) -> int:
    files.folder.mkdir(parents=True, exist_ok=True)
    with open(files.log_file, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=files.folder,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # survives the CLI and is not hit by its Ctrl-C
        )
    files.pid_file.write_text(f"{proc.pid}\n")
    _SPAWNED.append(proc)
    return proc.pid


# The servers outlive the Popen handles that started them (pid files find them again). The
# handles are kept so that Python does not warn, when one is collected, that its process is
# still running: that is the point. One small object per server started.
_SPAWNED: list[subprocess.Popen[bytes]] = []


def wait_ready(
    files: ServerFiles,
    pid: int,
    probe: Callable[[], bool],
    timeout_s: float,
    progress: Progress,
    what: str,
) -> None:
    """Poll `probe` until it answers True; fail early with the log's tail if the process died."""
    start = time.monotonic()
    last_report = start
    while True:
        if probe():
            progress(f"{what} is ready ({time.monotonic() - start:.1f}s)")
            return
        if not _alive(pid):
            files.pid_file.unlink(missing_ok=True)
            raise TransientIO(f"{what} exited during start-up: {last_log_line(files)}")
        now = time.monotonic()
        if now - start > timeout_s:
            raise TransientIO(
                f"{what} did not answer within {timeout_s:.0f}s; see {files.log_file}"
            )
        if now - last_report >= 5:
            progress(f"waiting for {what} to answer ({now - start:.0f}s)")
            last_report = now
        time.sleep(0.5)


def stop(files: ServerFiles, timeout_s: float = 30.0) -> bool:
    """SIGTERM, wait, then SIGKILL. Returns False when nothing was running."""
    pid = running_pid(files)
    if pid is None:
        return False
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
    files.pid_file.unlink(missing_ok=True)
    return True


def _alive(pid: int) -> bool:
    for proc in _SPAWNED:  # started by this process: its handle reaps it and knows
        if proc.pid == pid:
            if proc.poll() is None:
                return True
            _SPAWNED.remove(proc)
            return False
    try:
        # waitpid reaps our own child if it died; for others it raises ChildProcessError.
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def last_log_line(files: ServerFiles) -> str:
    try:
        lines = [ln for ln in files.log_file.read_text(errors="replace").splitlines() if ln.strip()]
    except FileNotFoundError:
        return "no log written"
    interesting = [ln for ln in lines if "ERROR" in ln or "Exception" in ln or "error" in ln]
    return (interesting or lines or ["empty log"])[-1].strip()[:300]
