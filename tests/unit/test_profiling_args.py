"""The profiling flags `zerotrace run` and `zerotrace collector` share, and the feeds they build
(zerotrace_cli/profiling_args.py): nothing without --profile, the GPU feed first, the rates and
thresholds handed to the probe, bad values refused before anything is built. Nothing is
attached here: building a probe only prepares its program."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from zerotrace_cli.common import BPF_DIR
from zerotrace_cli.profiling_args import (
    add_profiling_arguments,
    follow,
    profiling_feeds,
    profiling_notes,
)
from zerotrace_collector.gpu_feed import GpuFeed
from zerotrace_collector.probes.profile import DEFAULT_OFFCPU_MIN_NS, DEFAULT_RATE_HZ
from zerotrace_collector.profile_feed import ProfileFeed

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_profiling_arguments(parser)
    return parser.parse_args(argv)


def test_profiling_is_off_by_default_with_the_probes_defaults() -> None:
    args = parse()
    assert not args.profile and not args.no_off_cpu and not args.no_gpu
    assert args.sample_hz == DEFAULT_RATE_HZ
    assert args.off_cpu_min_us * 1000 == DEFAULT_OFFCPU_MIN_NS
    assert profiling_feeds(args, BPF_DIR, "node", 0, follows=False) == []


def test_profile_builds_the_gpu_feed_first_then_the_sampler() -> None:
    feeds = profiling_feeds(parse("--profile"), BPF_DIR, "node", 0, follows=False)
    assert [type(feed) for feed in feeds] == [GpuFeed, ProfileFeed]
    assert not any(feed.probe.attached for feed in feeds)
    assert feeds[1].probe.pids is None  # every process but ours


def test_the_flags_reach_the_probe() -> None:
    args = parse("--profile", "--sample-hz", "99", "--off-cpu-min-us", "250", "--no-gpu")
    [feed] = profiling_feeds(args, BPF_DIR, "node", 0, follows=True)
    probe = feed.probe
    assert (probe.rate_hz, probe.off_cpu, probe.off_cpu_min_ns) == (99, True, 250_000)
    assert probe.pids == set()  # follows: only the pids it is told, from none
    assert "-DZT_FOLLOW=1" in probe.cflags()
    [off] = profiling_feeds(parse("--profile", "--no-gpu", "--no-off-cpu"), BPF_DIR, "n", 0, False)
    assert "-DZT_OFFCPU=0" in off.probe.cflags()


@pytest.mark.parametrize("argv", [("--sample-hz", "0"), ("--off-cpu-min-us", "-1")])
def test_bad_values_are_refused(argv: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="--sample-hz must be positive"):
        profiling_feeds(parse("--profile", *argv), BPF_DIR, "node", 0, follows=False)


class Told:
    def __init__(self, notes: list[str]) -> None:
        self.probe = argparse.Namespace(notes=notes)
        self.followed: list[int] = []

    def follow_pid(self, pid: int) -> None:
        self.followed.append(pid)


def test_notes_and_follow_go_to_every_feed() -> None:
    feeds: list[Any] = [Told(["no BTF: Python frames off"]), Told([]), Told(["a", "b"])]
    assert profiling_notes(feeds) == ["no BTF: Python frames off", "a", "b"]
    follow(feeds, 42)
    assert [feed.followed for feed in feeds] == [[42], [42], [42]]
