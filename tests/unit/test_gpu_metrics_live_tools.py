"""The GPU metrics feed reading AMD and Ascend devices live: fake `amd-smi` and `npu-smi`
executables on PATH (tmp dirs) print the recorded outputs of tests/fixtures, and the feed built
as `--gpu-metrics --gpu-vendor ...` builds it runs them through the real subprocess path. The
records carry the fixtures' exact values; npu-smi's Health comes out as the record's health;
a tool that hangs never holds the collector loop: its tick is skipped and counted, it is ended
by its time limit, counted as an error and said once."""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zerotrace.clock import ManualClock
from zerotrace_cli.gpu_metrics_args import add_gpu_metrics_arguments, gpu_metrics_feeds
from zerotrace_collector.amd_smi_devices import AmdSmiDevices
from zerotrace_collector.feeds import RawRecord
from zerotrace_collector.gpu_devices import METRIC_FIELDS
from zerotrace_collector.gpu_metrics_feed import GpuMetricsFeed
from zerotrace_collector.smi_cli import run_tool

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MIB = 1 << 20
# Long enough for a fork and exec of sh and cat on a busy CI machine, short for a test.
WAIT_S = 20.0

AMD_SMI = """#!/bin/sh
case "$1" in
  static|list|metric|process) exec cat "{folder}/$1.json" ;;
esac
echo "amd-smi: unknown command $1" >&2
exit 2
"""
NPU_SMI = """#!/bin/sh
if [ "$#" = 1 ] && [ "$1" = info ]; then exec cat "{folder}/info.txt"; fi
if [ "$1" = info ] && [ "$2" = -t ] && [ -f "{folder}/$3-$5.txt" ]; then
  exec cat "{folder}/$3-$5.txt"
fi
echo "Error: the -t $3 detail of NPU $5 is not supported" >&2
exit 1
"""
# amd-smi that lists its GPUs, then hangs when asked for metrics (a wedged driver).
HUNG_AMD_SMI = """#!/bin/sh
case "$1" in
  static|list) exec cat "{folder}/$1.json" ;;
esac
exec sleep 30
"""


def put_tool(bin_dir: Path, name: str, script: str, folder: Path) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(script.format(folder=folder))
    path.chmod(0o755)


@pytest.fixture
def path_of(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A PATH of only the fake tools (and sh, cat, sleep for them); no NVML to find."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path / "no-libs"))
    return bin_dir


def feed_for(*argv: str) -> GpuMetricsFeed:
    """The feed `zerotrace run --gpu-metrics ARGV` builds; its lines go to stderr."""
    parser = argparse.ArgumentParser()
    add_gpu_metrics_arguments(parser)
    [feed] = gpu_metrics_feeds(parser.parse_args(["--gpu-metrics", *argv]), "node-g")
    assert isinstance(feed, GpuMetricsFeed)
    return feed


def said(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [ln.removeprefix("zerotrace: ") for ln in capsys.readouterr().err.splitlines()]


def first_tick(feed: GpuMetricsFeed, count: int) -> list[RawRecord]:
    """The records of the first tick: the loop polls (without waiting) until they are in."""
    out: list[RawRecord] = []
    deadline = time.monotonic() + WAIT_S
    while len(out) < count and time.monotonic() < deadline:
        out += feed.poll(50)
    return out


@pytest.fixture
def closing() -> Iterator[list[GpuMetricsFeed]]:
    feeds: list[GpuMetricsFeed] = []
    yield feeds
    for feed in feeds:
        feed.close()


def test_auto_reads_amd_smi_live_with_the_fixtures_exact_values(
    path_of: Path, closing: list[GpuMetricsFeed], capsys: pytest.CaptureFixture[str]
) -> None:
    put_tool(path_of, "amd-smi", AMD_SMI, FIXTURES / "amd_smi" / "rocm-6.4")
    feed = feed_for("--gpu-interval", "0.2")
    closing.append(feed)
    feed.attach()
    assert said(capsys) == [
        f"GPU metrics: AMD GPUs through {path_of}/amd-smi: 2 x AMD Instinct MI300X"
    ]
    d0, d1 = (r.datum for r in first_tick(feed, 2))
    assert (d0["vendor"], d0["node_id"], d0["trigger"]) == ("amd", "node-g", "interval")
    assert d0["device_uuid"] == "8fff74a1-0000-1000-80e9-b6a8f6c62f4f"
    assert d0["model"] == "AMD Instinct MI300X"
    assert d0["fb_used_bytes"] == 4976 * MIB and d0["fb_total_bytes"] == 196592 * MIB
    assert d0["memory_used_bytes"] == 4976 * MIB
    assert d0["power_w"] == 734.0 and d0["clocks_event_reasons"] == 0x4
    assert d0["clocks_event_reason_names"] == ["SwPowerCap"]
    assert d0["processes"][0]["pid"] == 2427396
    assert d0["processes"][0]["used_memory_bytes"] == 4096 * MIB
    assert d0["health"] is None and d0["failed"] == []
    assert d1["device_uuid"] == "c4ff74a1-0000-1000-8046-2d1a6c0b9e33"
    assert (d1["power_w"], d1["sm_clock_mhz"], d1["dec_util_pct"]) == (652.0, 2093, 3.0)
    assert d1["total_energy_consumption_mj"] == 13_877_411_500
    assert feed.counters()["amd_smi_errors"] == 0 and feed.counters()["samples"] == 2


def test_ascend_named_reads_npu_smi_live_with_health(
    path_of: Path, closing: list[GpuMetricsFeed], capsys: pytest.CaptureFixture[str]
) -> None:
    put_tool(path_of, "npu-smi", NPU_SMI, FIXTURES / "npu_smi" / "23.0.rc3-910b")
    put_tool(path_of, "amd-smi", AMD_SMI, FIXTURES / "amd_smi" / "rocm-6.4")  # not asked
    feed = feed_for("--gpu-vendor", "ascend")
    closing.append(feed)
    feed.attach()
    assert said(capsys) == [
        f"GPU metrics: Huawei Ascend NPUs through {path_of}/npu-smi: 2 x Ascend 910B3"
    ]
    d0, d1 = (r.datum for r in first_tick(feed, 2))
    assert (d0["vendor"], d0["device_index"], d0["device_uuid"]) == ("huawei", 0, "0000:C1:00.0")
    assert (d0["health"], d1["health"]) == ("OK", "Warning")
    assert (d0["gpu_util_pct"], d0["mem_copy_util_pct"]) == (87.0, 63.0)  # table, -t usages
    assert (d0["power_w"], d0["temperature_c"]) == (312.4, 47.0)
    assert d0["fb_used_bytes"] == 58712 * MIB and d0["fb_free_bytes"] == (65536 - 58712) * MIB
    assert d0["processes"][0]["pid"] == 2415738
    assert d0["processes"][0]["used_memory_bytes"] == 55293 * MIB
    assert (d1["gpu_util_pct"], d1["power_w"], d1["fb_used_bytes"]) == (0.0, 98.6, 3380 * MIB)
    assert d1["mem_copy_util_pct"] is None  # NPU 1's `-t usages` failed: a gap
    assert feed.counters()["npu_smi_errors"] == 1
    assert said(capsys) == [
        "npu-smi info -t usages failed "
        f"({path_of}/npu-smi info -t usages -i 1: Error: the -t usages detail of NPU 1 is "
        "not supported): its fields are gaps"
    ]


def test_a_named_vendor_not_there_is_one_line_and_an_idle_feed(
    path_of: Path, closing: list[GpuMetricsFeed], capsys: pytest.CaptureFixture[str]
) -> None:
    feed = feed_for("--gpu-vendor", "amd")
    closing.append(feed)
    feed.attach()
    assert said(capsys) == [
        "GPU metrics (--gpu-vendor amd): no amdsmi Python package, "
        "no amd-smi or rocm-smi on PATH: skipped"
    ]
    assert feed.poll(0) == [] and feed.poll(1) == []


def test_auto_with_nothing_there_is_one_line(
    path_of: Path, closing: list[GpuMetricsFeed], capsys: pytest.CaptureFixture[str]
) -> None:
    feed = feed_for()
    closing.append(feed)
    feed.attach()
    assert said(capsys) == [
        "GPU metrics: no NVML library (libnvidia-ml.so.1), no amdsmi Python package, "
        "no amd-smi or rocm-smi on PATH, no npu-smi on PATH: skipped"
    ]


def test_a_hung_tool_never_holds_the_loop(path_of: Path, closing: list[GpuMetricsFeed]) -> None:
    put_tool(path_of, "amd-smi", HUNG_AMD_SMI, FIXTURES / "amd_smi" / "rocm-6.4")
    lines: list[str] = []
    source = AmdSmiDevices(run=functools.partial(run_tool, timeout_s=1.0), note=lines.append)
    feed = GpuMetricsFeed(source, "n", ManualClock(7), interval_s=0.2, note=lines.append)
    closing.append(feed)
    feed.attach()
    started = time.monotonic()
    polls: list[float] = []
    out: list[RawRecord] = []
    while not out and time.monotonic() - started < WAIT_S:
        before = time.monotonic()
        out += feed.poll(100)
        polls.append(time.monotonic() - before)
    assert max(polls) < 0.5  # each turn of the loop: its own timeout, never the tool's
    assert [(r.datum["failed"], r.datum["unsupported"]) for r in out] == [
        (list(METRIC_FIELDS), [])  # every metric a failed gap, none a value or "unsupported"
    ] * 2
    counts = feed.counters()
    assert counts["amd_smi_errors"] == 1 and counts["busy_skips"] >= 3
    assert lines == [
        "GPU metrics: the amd tool is still reading the last tick after the 0.2 s interval: "
        "ticks skipped until it answers (counted in busy_skips)",
        f"AMD GPU metrics not read ({path_of}/amd-smi metric --json: no answer in 1 s)",
    ]
