"""The embedded node (zerotrace_cli/embedded_node.py) over the in-memory feed twin and a DuckDB
file: records go feed -> bus -> steps -> store in one loop, each indexed document is shown as
the output mode says, the run ends at its duration or its child's exit and drains every stage,
the summary counts what was seen, and the APIs serve the store. Attached probes are
tests/kernel/test_embedded_slice.py's."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_collector import file_open
from zerotrace import settings
from zerotrace.cpu_budget import CpuBudget
from zerotrace_cli.common import StopFlag
from zerotrace_cli.embedded_node import (
    CHILD_GRACE_S,
    DRAIN_LIMIT_S,
    INDEX_EVERY_S,
    EmbeddedNode,
    _drained,
    output_mode,
)
from zerotrace_cli.node_feeds import NodeFeeds
from zerotrace_collector.feed_memory import InMemoryFeed
from zerotrace_collector.feeds import RawRecord

pytestmark = pytest.mark.unit


@pytest.fixture
def stop() -> Iterator[StopFlag]:
    """A stop flag, with pytest's own signal handlers put back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield StopFlag()
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def node_with(
    tmp_path: Path,
    records: list[RawRecord],
    output: str = "quiet",
    keep: bool = False,
    env: dict[str, str] | None = None,
) -> tuple[EmbeddedNode, InMemoryFeed]:
    feed = InMemoryFeed("file-open", records)
    feed.attach()
    common = settings.load(
        settings.CommonSettings, {"ZEROTRACE_HOME": str(tmp_path), **(env or {})}
    )
    node = EmbeddedNode(
        NodeFeeds([feed], None, []),
        tmp_path / "embedded.duckdb",
        common,
        keep=(lambda r: r.pid != 8) if keep else None,
        output=output,
    )
    return node, feed


def test_records_become_indexed_spans_shown_a_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node, feed = node_with(tmp_path, [file_open(7, 0), file_open(8, 1)], output="lines")
    try:
        while node.step_once():
            pass
        node.finish()
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 2 and all(" open /data/" in line for line in lines)
        assert node.summary_lines()[:2] == [
            "summary: 2 spans (file.open 2; 0 failed), 0 LLM requests, 0 dead letters",
            "  process python3: 2 spans",
        ]
    finally:
        node.close()
    assert feed.closed


def test_the_summary_shows_each_feeds_losses_and_what_zerotrace_cost(tmp_path: Path) -> None:
    node, feed = node_with(tmp_path, [file_open(7, n) for n in range(4)])
    feed.lose(3)
    node.budget = CpuBudget(0.5, "cgroup v2 cpu.max", "")
    try:
        while node.step_once():
            pass
        node.finish()
        lines = node.summary_lines()
        assert lines[2] == "  file-open: lost 3, shed 0"
        assert lines[3].startswith("  zerotrace itself: ")
        assert " core; budget 0.5 core, cgroup v2 cpu.max)" in lines[3]
        assert re.search(r"; events in [\d.,]+/s, out [\d.,]+/s$", lines[3])
        node.write_summary(tmp_path / "summary.json")
    finally:
        node.close()
    document = json.loads((tmp_path / "summary.json").read_text())
    assert (document["spans"], document["indexed"]) == (4, 4)
    assert document["counters"] == {
        "collector": {
            "published": 4,
            "events": 4,
            "backpressure": 0,
            "cpu_pauses": 0,
            "raw_log_failed": 0,
        },
        "file-open": {"lost": 3},
    }
    assert document["budget"] == {"cores": 0.5, "enforced_by": "cgroup v2 cpu.max"}
    own = document["self"]
    assert 0 < own["rss_bytes"] <= own["peak_rss_bytes"] and own["wall_s"] > 0
    assert own["events_in_per_s"] == pytest.approx(4 / own["wall_s"], abs=0.1, rel=0.01)


def test_the_keep_filter_drops_records_before_the_bus(tmp_path: Path) -> None:
    node, _feed = node_with(tmp_path, [file_open(7, 0), file_open(8, 1)], keep=True)
    try:
        while node.step_once():
            pass
        node.finish()
        assert node.summary.spans == 1
    finally:
        node.close()


def test_the_run_ends_at_its_duration_drains_and_serves_the_store(
    tmp_path: Path, stop: StopFlag
) -> None:
    node, _feed = node_with(tmp_path, [file_open(7, n) for n in range(5)])
    try:
        node.serve(0, 0)
        http = node._apis[0]
        assert node.run(stop, None, duration_s=0.05) == 0
        with urllib.request.urlopen(f"{http.url}/api/v1/spans?pid=7&limit=10") as response:
            spans = json.load(response)["spans"]
        assert sorted(s["name"] for s in spans) == [f"open /data/{n}.bin" for n in range(5)]
    finally:
        node.close()
    assert (tmp_path / "embedded.duckdb").exists()


def test_the_run_ends_with_its_childs_exit_code(tmp_path: Path, stop: StopFlag) -> None:
    node, _feed = node_with(tmp_path, [file_open(7)])
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    try:
        assert node.run(stop, child, duration_s=0) == 3
        assert node.summary.spans == 1  # what came before the exit is drained
    finally:
        node.close()


def test_a_stop_ends_the_run_at_once(tmp_path: Path, stop: StopFlag) -> None:
    node, _feed = node_with(tmp_path, [])
    stop.set()
    try:
        assert node.run(stop, None, duration_s=0) == 0
    finally:
        node.close()


def test_draining_ends_past_the_grace_when_idle_or_after_the_limit() -> None:
    assert not _drained(None, 100.0, 0)  # not stopping
    assert not _drained(10.0, 10.0 - CHILD_GRACE_S, 0)  # in the grace
    assert not _drained(10.0, 11.0, 5)  # stages still move records
    assert _drained(10.0, 11.0, 0)
    assert _drained(10.0, 10.0 + DRAIN_LIMIT_S, 5)  # moving for too long: stop anyway


def test_the_output_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    assert output_mode(quiet=True, lines=True) == "quiet"
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert output_mode(quiet=False, lines=False) == "live"
    assert output_mode(quiet=False, lines=True) == "lines"
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert output_mode(quiet=False, lines=False) == "lines"


def test_the_store_is_written_at_most_every_index_interval(tmp_path: Path) -> None:
    node, feed = node_with(tmp_path, [file_open(7, 0)])
    clock = [100.0]
    node.monotonic = lambda: clock[0]
    writes: list[int] = []
    upsert = node.store.bulk_upsert

    def counted(index: str, docs: Any) -> Any:
        writes.append(len(docs))
        return upsert(index, docs)

    node.store.bulk_upsert = counted  # type: ignore[method-assign]
    try:
        node.step_once()
        assert writes == [1]  # the first turn writes at once
        for n in range(1, 4):
            clock[0] += INDEX_EVERY_S / 4
            feed.push(file_open(7, n))
            node.step_once()
        assert writes == [1]  # three turns' records wait
        clock[0] += INDEX_EVERY_S / 4
        node.step_once()
        assert writes == [1, 3]  # in one write
        feed.push(file_open(7, 9))
        node.step_once()
        node.finish()
        assert writes == [1, 3, 1] and node.indexer.indexed == 5
    finally:
        node.close()


def test_the_loop_pauses_while_it_keeps_up_and_not_while_it_is_behind(
    tmp_path: Path, stop: StopFlag
) -> None:
    """zerotrace.cpu_slices in the node: every stage's loop calls the node's pause point, and
    the pauses follow the CPU budget's verdict (none while zerotrace catches up)."""
    pieces = {"ZEROTRACE_CPU_SLICE_US": "500"}  # off by default
    node, _feed = node_with(tmp_path, [file_open(7, n) for n in range(5)], env=pieces)
    slept: list[float] = []
    try:
        node.slices._sleep = slept.append
        node.slices._slice_ns = 0  # every point ends a slice
        node.step_once()
        assert len(slept) >= 11  # 5 records published, 5 taken by a step, the store's write
        node.budget = CpuBudget(0.5, None, "test")
        node.budget.steer(behind=True, now=time.monotonic())  # a ring was left full just now
        node.run(stop, None, duration_s=0.05)
        assert node.slices.active is False
        node.budget = CpuBudget(0.5, None, "test")  # never behind
        node.run(stop, None, duration_s=0.05)
        assert node.slices.active is True
    finally:
        node.close()
