"""Pieces the CLI commands share: stop signals, where the BPF sources are, record lines."""

from __future__ import annotations

import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zerotrace import names
from zerotrace.settings import REPO_ROOT

BPF_DIR = REPO_ROOT / "bpf"


class StopFlag:
    """Set by SIGTERM or SIGINT; long loops check it between iterations."""

    def __init__(self) -> None:
        self._event = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._event.set())

    @property
    def event(self) -> threading.Event:
        return self._event

    def __bool__(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()

    def wait(self, timeout_s: float) -> bool:
        return self._event.wait(timeout_s)


def span_line(doc: dict[str, Any]) -> str:
    """One human line for a span: time, process, what, outcome, duration."""
    when = datetime.fromtimestamp(doc["start_ns"] / 1e9, UTC).strftime("%H:%M:%S.%f")
    attrs = doc.get("attributes") or {}
    fd = attrs.get(names.ATTR_FILE_FD)
    outcome = attrs.get(names.ATTR_ERROR_TYPE) or (f"fd {fd}" if fd is not None else "")
    micros = (doc["end_ns"] - doc["start_ns"]) / 1000
    return (
        f"{when} {doc['process_name']}[{doc['pid']}/{doc['tid']}] {doc['name']}"
        f" -> {outcome} ({micros:.1f} µs)"
    )


def profile_line(doc: dict[str, Any]) -> str:
    """One human line for a profile window: when, whose, how much in its unit, and where its
    heaviest stack ends: the innermost Python frame when it has one (an off-CPU stack always
    ends in the scheduler), then the leaf."""
    from zerotrace_cli.profile_cmd import format_value
    from zerotrace_query.flame_graph import PROFILE_TYPES

    when = datetime.fromtimestamp(doc["window_start_ns"] / 1e9, UTC).strftime("%H:%M:%S")
    kind = doc["profile_type"]
    stacks = doc.get("stacks") or []
    total = sum(int(s["weight"]) for s in stacks)
    top = max(stacks, key=lambda s: s["weight"], default=None)
    frames = top["stack"].split(";") if top else ["-"]
    python = next((f for f in reversed(frames) if f.startswith("py:")), None)
    where = f"{python} ... {frames[-1]}" if python and python != frames[-1] else frames[-1]
    unit = PROFILE_TYPES.get(kind, ("", "count"))[1]
    amount = format_value(total, unit, kind)
    if unit != "count":  # time or bytes: say over how many events
        amount += f" over {doc['samples']} events"
    return (
        f"{when} profile {kind} {doc['service']}[{doc['pid']}]: {amount}, "
        f"{len(stacks)} stacks, heaviest: {where}"
    )


def say(line: str) -> None:
    print(f"zerotrace: {line}", file=sys.stderr, flush=True)


def probe_text(pid_filter: int = 0) -> str:
    from zerotrace_collector.probes.fileio import FileOpenProbe

    return str(FileOpenProbe(BPF_DIR, pid_filter=pid_filter).program_text())


def embedded_store_path(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    return home / "embedded.duckdb"
