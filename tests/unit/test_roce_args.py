"""--roce-interface and its options (zerotrace_cli/rdma_args.py) on `zerotrace run` and
`zerotrace collector`: off by default, the live RoCE feed built with the interval, cap and loss
wait given, last in the node's feeds (after --rdma's), bad values refused in one line, and a
missing interface one line at attach, not a crash."""

from __future__ import annotations

import argparse

import pytest

from zerotrace.errors import ConfigError
from zerotrace_cli import build_parser
from zerotrace_cli.node_feeds import node_feeds
from zerotrace_cli.rdma_args import LOSS_AFTER_S, MAX_FLOWS, add_rdma_arguments, rdma_feeds
from zerotrace_collector.packets import roce_flows, roce_psn
from zerotrace_collector.rdma.roce_live import RoceLiveFeed

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_rdma_arguments(parser)
    return parser.parse_args(argv)


def test_off_by_default_with_the_analysis_defaults() -> None:
    args = parse()
    assert args.roce_interface is None and rdma_feeds(args, "node") == []
    assert (args.roce_max_flows, MAX_FLOWS) == (roce_flows.MAX_QPS, roce_flows.MAX_QPS)
    assert args.roce_loss_after * 1e9 == LOSS_AFTER_S * 1e9 == roce_psn.LOSS_AFTER_NS


def test_the_interface_builds_the_live_feed_with_its_options() -> None:
    argv = ("--roce-interface", "eth1", "--rdma-interval", "0.5", "--roce-max-flows", "10")
    [feed] = rdma_feeds(parse(*argv, "--roce-loss-after", "2"), "node")
    assert isinstance(feed, RoceLiveFeed) and feed.interface == "eth1"
    assert (feed._interval_ns, feed._max_flows, feed._loss_after_ns) == (
        500_000_000,
        10,
        2_000_000_000,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--roce-max-flows", "0"), "--roce-max-flows must be at least 1, not 0"),
        (("--roce-loss-after", "0"), "--roce-loss-after must be positive, not 0"),
        (("--rdma-interval", "-1"), "--rdma-interval must be positive, not -1"),
    ],
)
def test_bad_values_are_one_line(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        rdma_feeds(parse("--roce-interface", "lo", *argv), "node")


def test_the_node_reads_roce_last_on_both_commands(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "collector"):
        args = build_parser().parse_args([command, "--rdma", "--roce-interface", "zt-nope0"])
        feeds = node_feeds(args, "node-a", 0, follows=False, sockets=False)
        assert feeds.names == "file-open, rdma, roce"
    alone = build_parser().parse_args(["run", "--no-files", "--roce-interface", "zt-nope0"])
    only = node_feeds(alone, "node-a", 0, follows=False, sockets=False)
    assert only.names == "roce" and only.programs() == []
    only.attach()  # no such interface: one line, and the run goes on
    assert capsys.readouterr().err == (
        "zerotrace: RoCE flows: not capturing on 'zt-nope0': there is no network interface "
        "named 'zt-nope0'; `ip link` lists them\n"
    )
    assert only.feeds[0].poll(0) == []
    only.close()


def test_the_loss_wait_is_hidden_from_help() -> None:
    parser = argparse.ArgumentParser()
    add_rdma_arguments(parser)
    text = parser.format_help()
    assert "--roce-interface" in text and "--roce-max-flows" in text
    assert "--roce-loss-after" not in text
