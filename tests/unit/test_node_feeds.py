"""The probes and feeds of one node from the command line (zerotrace_cli/node_feeds.py), the
one assembly `zerotrace run` and `zerotrace collector` share: which feeds each flag gives, in
which order, filtered how; then the node's feeds attached, followed and closed together. The
feeds are built, never attached, here; the in-memory twin stands in for attached ones."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from zerotrace_cli import build_parser
from zerotrace_cli.node_feeds import NodeFeeds, node_feeds
from zerotrace_collector.feed_memory import InMemoryFeed

pytestmark = pytest.mark.unit


def built(*argv: str, follows: bool = False, sockets: bool = True) -> NodeFeeds:
    return node_feeds(
        build_parser().parse_args(argv), "node-a", 0, follows=follows, sockets=sockets
    )


def flags(feed: Any, *names: str) -> list[str]:
    return [flag for flag in feed.probe.cflags() if flag.split("=")[0] in names]


def test_by_default_sockets_then_file_opens() -> None:
    feeds = built("collector", "--pid", "42", follows=True)
    assert feeds.names == "socket, file-open"
    socket, files = cast(list[Any], feeds.feeds)
    assert feeds.socket_probe is socket.probe and feeds.profiling == []
    assert flags(socket, "-DZT_FOLLOW", "-DZT_CAPTURE_TLS") == [
        "-DZT_FOLLOW=1",
        "-DZT_CAPTURE_TLS=1",
    ]
    assert flags(files, "-DZT_FILTER_PID") == ["-DZT_FILTER_PID=42"]
    assert feeds.socket_probe is not None and not feeds.socket_probe.attached
    assert not files.probe.attached


def test_flags_leave_feeds_out() -> None:
    feeds = built("collector", "--no-files", "--no-tls", "--port", "8000")
    assert feeds.names == "socket"
    assert flags(feeds.feeds[0], "-DZT_CAPTURE_TLS", "-DZT_FOLLOW") == [
        "-DZT_FOLLOW=0",
        "-DZT_CAPTURE_TLS=0",
    ]
    nothing = built("collector", "--no-files", sockets=False)
    assert nothing.feeds == [] and nothing.socket_probe is None


def test_profiling_feeds_come_first_gpu_before_all() -> None:
    feeds = built("run", "--profile", "--pid", "3", follows=True)
    assert feeds.names == "gpu, profile, socket, file-open"
    assert feeds.profiling == feeds.feeds[:2]


def test_the_programs_are_each_feeds_final_text() -> None:
    feeds = built("collector", "--pid", "42")
    programs = feeds.programs()
    assert len(programs) == 2
    assert all(text.startswith("/* bcc cflags: ") for text in programs)
    assert "TRACEPOINT_PROBE(syscalls, sys_enter_openat)" in programs[1]


class Probe:
    def __init__(self, notes: list[str]) -> None:
        self.notes = notes
        self.followed: list[int] = []

    def follow_pid(self, pid: int) -> None:
        self.followed.append(pid)


class Profiled(InMemoryFeed):
    def __init__(self, name: str, notes: list[str]) -> None:
        super().__init__(name)
        self.probe = Probe(notes)
        self.followed: list[int] = []

    def follow_pid(self, pid: int) -> None:
        self.followed.append(pid)


def test_attach_follow_and_close_reach_every_feed() -> None:
    profiled = Profiled("profile", ["no BTF: Python frames off"])
    plain = InMemoryFeed("file-open")
    socket = Probe(["TLS: no libssl found"])
    node = NodeFeeds([profiled, plain], socket, [profiled])  # type: ignore[arg-type]
    assert node.attach() == ["TLS: no libssl found", "no BTF: Python frames off"]
    assert profiled.attached and plain.attached
    node.follow(77)
    assert socket.followed == [77] and profiled.followed == [77]
    node.close()
    assert profiled.closed and plain.closed


def test_without_sockets_follow_reaches_the_profilers_only() -> None:
    profiled = Profiled("profile", [])
    node = NodeFeeds([profiled], None, [profiled])
    assert node.attach() == []
    node.follow(5)
    assert profiled.followed == [5]


def test_the_node_is_behind_when_a_ring_was_left_full_or_the_profiler_has_news() -> None:
    socket = SimpleNamespace(backlog=False)
    profiler, gpu = SimpleNamespace(behind=False), SimpleNamespace()
    node = NodeFeeds([], socket, [gpu, profiler])  # type: ignore[arg-type]
    assert not node.behind
    profiler.behind = True
    assert node.behind
    profiler.behind, socket.backlog = False, True
    assert node.behind
    assert not NodeFeeds([], None, []).behind


def test_the_pause_point_reaches_into_the_socket_probe_s_decoding() -> None:
    """NodeFeeds.paced: the loop's pause point is also called between pieces of a poll's
    decoding (a 100 ms take of a busy ring is thousands of records)."""
    probe = SimpleNamespace(pause=None)
    slices = NodeFeeds([], probe, []).paced(500)  # type: ignore[arg-type]
    assert probe.pause == slices.point and slices.enabled
    assert not NodeFeeds([], None, []).paced(0).enabled
