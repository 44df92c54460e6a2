"""The RDMA counter flags `zerotrace run` and `zerotrace collector` share
(zerotrace_cli/rdma_args.py): nothing without --rdma, the interval and the sysfs root handed to
the feed, a bad interval refused in one line, the feed last in the node's feeds and without an
eBPF program, and what it found said in one line at attach."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.unit.rdma_trees import write_tree
from zerotrace.errors import ConfigError
from zerotrace_cli import build_parser
from zerotrace_cli.node_feeds import node_feeds
from zerotrace_cli.rdma_args import (
    DEFAULT_INTERVAL_S,
    SYSFS_ROOT,
    add_rdma_arguments,
    rdma_feeds,
)
from zerotrace_collector.rdma import rdma_feed, sysfs_ports
from zerotrace_collector.rdma.rdma_feed import RdmaFeed

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_rdma_arguments(parser)
    return parser.parse_args(argv)


def test_off_by_default_with_the_feeds_interval_and_root() -> None:
    args = parse()
    assert not args.rdma and args.rdma_interval == DEFAULT_INTERVAL_S
    assert DEFAULT_INTERVAL_S * 1e9 == rdma_feed.INTERVAL_NS
    assert Path(SYSFS_ROOT) == sysfs_ports.DEFAULT_ROOT == Path(args.rdma_sysfs)
    assert rdma_feeds(args, "node") == []


def test_rdma_builds_one_feed_at_the_interval_on_the_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(tmp_path, 0)
    argv = ("--rdma", "--rdma-interval", "0.5", "--rdma-sysfs", str(tmp_path))
    [feed] = rdma_feeds(parse(*argv), "node")
    assert isinstance(feed, RdmaFeed) and feed._interval_ns == 500_000_000
    feed.attach()
    assert capsys.readouterr().err == (
        "zerotrace: RDMA counters: mlx5_0 port 1, rxe0 port 1, every 0.5 s\n"
    )


def test_no_rdma_device_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [feed] = rdma_feeds(parse("--rdma", "--rdma-sysfs", str(tmp_path / "none")), "node")
    feed.attach()
    assert capsys.readouterr().err == (
        f"zerotrace: RDMA counters: no RDMA device under {tmp_path / 'none'}: skipped\n"
    )


@pytest.mark.parametrize("interval", ["0", "-1", "nan"])
def test_a_bad_interval_is_one_line(interval: str) -> None:
    with pytest.raises(ConfigError, match="--rdma-interval must be positive"):
        rdma_feeds(parse("--rdma", "--rdma-interval", interval), "node")


def test_the_node_reads_rdma_last_and_alone_when_asked() -> None:
    args = build_parser().parse_args(["collector", "--pid", "4", "--gpu-metrics", "--rdma"])
    feeds = node_feeds(args, "node-a", 0, follows=True)
    assert feeds.names == "socket, file-open, gpu-metrics, rdma"
    assert len(feeds.programs()) == 2  # the counters are no eBPF program
    alone = build_parser().parse_args(["run", "--no-files", "--rdma"])
    only = node_feeds(alone, "node-a", 0, follows=False, sockets=False)
    assert only.names == "rdma" and only.programs() == []


def test_the_sysfs_root_is_hidden_from_help() -> None:
    text = build_parser().parse_args(["run", "--rdma"])  # parses on both commands
    assert text.rdma and build_parser().parse_args(["collector", "--rdma"]).rdma
    parser = argparse.ArgumentParser()
    add_rdma_arguments(parser)
    assert "--rdma-sysfs" not in parser.format_help()
    assert "--rdma-interval" in parser.format_help()
