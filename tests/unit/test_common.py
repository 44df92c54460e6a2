"""What the CLI commands share (zerotrace_cli/common.py): the stop flag that SIGTERM and
Ctrl-C set, a human line per span, the one-line `zerotrace:` messages, the program text the
hidden --ebpf flag prints, and where the embedded store lives. profile_line's cases are in
test_profile_cmd.py, beside the command it serves."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from zerotrace import names
from zerotrace_cli.common import BPF_DIR, StopFlag, embedded_store_path, probe_text, say, span_line
from zerotrace_correlator.fileio_spans import file_open_span

pytestmark = pytest.mark.unit

RAW = {
    "event_id": "e1",
    "node_id": "n",
    "pid": 42,
    "tid": 43,
    "process_name": "python3",
    "container_id": None,
    "op": "OPEN",
    "path": "/data/train.bin",
    "flags": 0,
    "start_ns": 1_700_000_000_123_456_000,
    "end_ns": 1_700_000_000_123_468_500,
}


@pytest.fixture
def handlers() -> Iterator[None]:
    """StopFlag installs process-wide handlers: put pytest's back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.usefixtures("handlers")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_sets_the_flag(sig: signal.Signals) -> None:
    stop = StopFlag()
    assert not stop and not stop.wait(0)
    os.kill(os.getpid(), sig)
    assert stop.wait(5) and stop and stop.event.is_set()


@pytest.mark.usefixtures("handlers")
def test_set_wakes_a_waiter() -> None:
    stop = StopFlag()
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(stop.wait(30)))
    waiter.start()
    stop.set()
    waiter.join(10)
    assert woke == [True] and stop


def test_a_span_line_says_who_did_what_with_what_outcome() -> None:
    assert span_line(file_open_span({**RAW, "result": 3})) == (
        "22:13:20.123456 python3[42/43] open /data/train.bin -> fd 3 (12.5 µs)"
    )
    failed = file_open_span({**RAW, "result": -2})
    assert failed["attributes"][names.ATTR_ERROR_TYPE] == "ENOENT"
    assert span_line(failed).endswith("open /data/train.bin -> ENOENT (12.5 µs)")
    bare = {**file_open_span({**RAW, "result": 0}), "attributes": None}
    assert span_line(bare).endswith("open /data/train.bin ->  (12.5 µs)")


def test_say_is_one_prefixed_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    say("collector attached")
    assert capsys.readouterr() == ("", "zerotrace: collector attached\n")


def test_the_probe_text_is_the_file_open_program_with_its_filter() -> None:
    assert (BPF_DIR / "fileio.c").is_file()
    text = probe_text(4242)
    assert "-DZT_FILTER_PID=4242" in text
    assert "TRACEPOINT_PROBE(syscalls, sys_enter_openat)" in text
    assert "-DZT_FILTER_PID=0" in probe_text()


def test_the_embedded_store_lives_in_home(tmp_path: Path) -> None:
    home = tmp_path / "not" / "yet"
    assert embedded_store_path(home) == home / "embedded.duckdb"
    assert home.is_dir()
