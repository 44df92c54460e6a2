"""rdma/rdma_feed.py: on its injected clock, a sample every interval (nothing in between,
never blocking), port records and per-process counter-set records for raw.rdma; per-process
counters that cannot be read are turned off with their reason, ports go on; no device, no
feed (ProbeUnavailable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.rdma_trees import T0, write_tree
from zerotrace import names
from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.rdma.rdma_feed import RdmaFeed
from zerotrace_collector.rdma.rdma_statistic import QpCounterSet

pytestmark = pytest.mark.unit

S = 1_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def test_a_sample_per_interval(tmp_path: Path) -> None:
    write_tree(tmp_path, 0)
    clock = Clock()
    counter_set = QpCounterSet("mlx5_0", 1, 4, "RC", 30489, "ib_write_bw", (178,), {})
    feed = RdmaFeed("node-f", clock=clock, root=tmp_path, per_process=lambda: [counter_set])
    feed.attach()
    first = feed.poll(100)
    assert [(r.topic, r.record, r.key) for r in first] == [
        (names.RAW_RDMA.name, names.RAW_RDMA.record, b"node-f")
    ] * 3
    assert [(r.datum["device"], r.datum["source"]) for r in first] == [
        ("mlx5_0", "SYSFS"),
        ("rxe0", "SYSFS"),
        ("mlx5_0", "RDMA_STATISTIC"),
    ]
    clock.now += S - 1
    assert feed.poll(100) == []
    write_tree(tmp_path, 1)
    clock.now += 1
    second = feed.poll(100)
    assert second[0].datum["rates"]["tx_bytes"] == 1_000_000_000.0
    assert feed.counters() == {
        "samples": 2,
        "ports": 4,
        "unreadable": 0,
        "counter_sets": 2,
        "per_process_errors": 0,
    }


def test_per_process_counters_that_cannot_be_read_are_turned_off(tmp_path: Path) -> None:
    write_tree(tmp_path, 0)
    calls = []

    def no_netlink() -> list[QpCounterSet]:
        calls.append(1)
        raise FeatureUnavailable("`rdma -j statistic qp show` failed: no netlink")

    clock = Clock()
    feed = RdmaFeed("n", clock=clock, root=tmp_path, per_process=no_netlink)
    feed.attach()
    assert len(feed.poll(0)) == 2
    clock.now += S
    assert len(feed.poll(0)) == 2
    assert calls == [1] and feed.per_process_off == "`rdma -j statistic qp show` failed: no netlink"
    assert feed.counters()["per_process_errors"] == 1
    assert feed.notes == [
        "RDMA counters: mlx5_0 port 1, rxe0 port 1, every 1 s",
        "RDMA counters: per process off (`rdma -j statistic qp show` failed: no netlink); "
        "ports go on",
    ]


def test_no_rdma_device_is_one_line_and_an_idle_feed(tmp_path: Path) -> None:
    waited: list[float] = []
    feed = RdmaFeed("n", root=tmp_path / "none", per_process=None, wait=waited.append)
    feed.attach()
    assert feed.notes == [f"RDMA counters: no RDMA device under {tmp_path / 'none'}: skipped"]
    assert feed.poll(0) == [] and feed.poll(250) == []
    assert waited == [0.25]  # leading the loop, it waits the loop's timeout, never spins
    empty = RdmaFeed("n", root=tmp_path, per_process=None)
    empty.attach()
    assert empty.ports == [] and empty.poll(0) == []


def test_a_feed_leading_the_loop_waits_for_its_next_sample_not_longer(tmp_path: Path) -> None:
    write_tree(tmp_path, 0)
    clock, waited = Clock(), list[float]()
    feed = RdmaFeed("n", clock=clock, root=tmp_path, per_process=None, wait=waited.append)
    feed.attach()
    assert len(feed.poll(100)) == 2 and waited == []  # due at once: no wait
    clock.now += S - 40_000_000
    assert feed.poll(100) == [] and waited == [0.04]  # 40 ms to the next sample
    assert feed.poll(0) == [] and waited == [0.04]  # drained only: no wait
