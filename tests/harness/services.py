"""zerotrace services as child processes (`python -m zerotrace_cli SERVICE`), each with its log
file, for the tests that run the distributed mode; and `reap`, for any test's child processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Service:
    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log = logs / f"{name}.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "zerotrace_cli", *args],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_for(self, text: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log.read_text():
                return
            assert self.proc.poll() is None, f"{self.name} exited: {self.log.read_text()[-2000:]}"
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no {text!r} in {timeout_s}s: {self.log.read_text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            # Detaching eBPF probes waits for RCU grace periods, ~0.1 s per probe on an idle
            # machine and many times that on a loaded one (a collector has dozens).
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def reap(*children: subprocess.Popen[str] | None) -> None:
    """Kills what still runs of *children* (None: never started), waits for each and closes
    its pipes."""
    for child in children:
        if child is None:
            continue
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()
