"""The GPU device metrics flags `zerotrace run` and `zerotrace collector` share, and the feed
they build (zerotrace_cli/gpu_metrics_args.py): nothing without --gpu-metrics, the interval
handed to the feed, a bad interval refused in one line, the feed last in the node's feeds and
without an eBPF program. Nothing is attached (NVML is not loaded) here."""

from __future__ import annotations

import argparse

import pytest

from zerotrace.errors import ConfigError
from zerotrace_cli import build_parser
from zerotrace_cli.gpu_metrics_args import (
    DEFAULT_INTERVAL_S,
    VENDOR_CHOICES,
    add_gpu_metrics_arguments,
    gpu_metrics_feeds,
)
from zerotrace_cli.node_feeds import node_feeds
from zerotrace_collector import gpu_metrics_feed, gpu_vendor
from zerotrace_collector.amd_smi_devices import AmdSmiDevices
from zerotrace_collector.amdsmi_devices import AmdSmiPackageDevices
from zerotrace_collector.gpu_metrics_feed import GpuMetricsFeed
from zerotrace_collector.gpu_vendor import VendorChoice
from zerotrace_collector.npu_smi_devices import NpuSmiDevices
from zerotrace_collector.nvml_devices import NvmlDevices

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_gpu_metrics_arguments(parser)
    return parser.parse_args(argv)


def test_off_by_default_with_the_feeds_default_interval() -> None:
    args = parse()
    assert not args.gpu_metrics and args.gpu_interval == DEFAULT_INTERVAL_S
    assert DEFAULT_INTERVAL_S == gpu_metrics_feed.DEFAULT_INTERVAL_S
    assert gpu_metrics_feeds(args, "node") == []


def test_gpu_metrics_builds_one_feed_at_the_interval_choosing_the_vendor_at_attach() -> None:
    [feed] = gpu_metrics_feeds(parse("--gpu-metrics", "--gpu-interval", "0.25"), "node")
    assert isinstance(feed, GpuMetricsFeed) and isinstance(feed.source, VendorChoice)
    assert feed.source.choice == "auto" and feed.source.chosen is None  # nothing opened yet
    assert feed._schedule.interval_s == 0.25
    assert [c.choice for c in feed.source._tried] == ["nvidia", "amd", "amd", "ascend"]


@pytest.mark.parametrize(
    ("vendor", "adapter"),
    [
        ("nvidia", [NvmlDevices]),
        ("amd", [AmdSmiPackageDevices, AmdSmiDevices]),  # the package first, then the CLI
        ("ascend", [NpuSmiDevices]),
    ],
)
def test_a_named_vendor_tries_its_adapters_alone(vendor: str, adapter: list[type]) -> None:
    [feed] = gpu_metrics_feeds(parse("--gpu-metrics", "--gpu-vendor", vendor), "node")
    tried = feed.source._tried
    assert [c.choice for c in tried] == [vendor] * len(adapter)
    assert [type(c.make()) for c in tried] == adapter


def test_the_cli_choices_are_the_collectors() -> None:
    assert VENDOR_CHOICES == gpu_vendor.VENDOR_CHOICES
    assert parse().gpu_vendor == "auto"
    with pytest.raises(SystemExit):
        parse("--gpu-vendor", "intel")


@pytest.mark.parametrize("interval", ["0", "-1", "nan"])
def test_a_bad_interval_is_one_line(interval: str) -> None:
    with pytest.raises(ConfigError, match="--gpu-interval must be positive"):
        gpu_metrics_feeds(parse("--gpu-metrics", "--gpu-interval", interval), "node")


def test_the_node_reads_gpus_last_and_alone_when_asked() -> None:
    args = build_parser().parse_args(["collector", "--pid", "4", "--gpu-metrics"])
    feeds = node_feeds(args, "node-a", 0, follows=True)
    assert feeds.names == "socket, file-open, gpu-metrics"
    assert len(feeds.programs()) == 2  # NVML is no eBPF program
    alone = build_parser().parse_args(["collector", "--no-files", "--gpu-metrics"])
    only = node_feeds(alone, "node-a", 0, follows=False, sockets=False)
    assert only.names == "gpu-metrics" and only.programs() == []
