"""rdma/rdma_sampler.py, the acceptance for port counters: recorded mlx5 and rxe sysfs trees
read one second apart (injected clock) give exact rates per device and port in one
vocabulary: bytes per second with the 4-byte unit applied, packets and errors per second; a
reset gives no rate (never a negative one) and a wrapped 32-bit mlx5 counter its true count.
QP counter sets are rated per (port, counter id, process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.rdma_trees import T0, T1, write_tree
from zerotrace.codec import AvroCodec
from zerotrace_collector.rdma.rdma_records import RDMA_COUNTERS
from zerotrace_collector.rdma.rdma_sampler import RdmaSampler
from zerotrace_collector.rdma.rdma_statistic import QpCounterSet
from zerotrace_collector.rdma.sysfs_ports import read_ports

pytestmark = pytest.mark.unit


def test_two_readings_a_second_apart_give_exact_rates(tmp_path: Path, codec: AvroCodec) -> None:
    sampler = RdmaSampler("node-r")
    write_tree(tmp_path, 0)
    first = sampler.port_records(read_ports(T0, tmp_path))
    assert [(r["device"], r["port"], r["interval_ns"], r["rates"]) for r in first] == [
        ("mlx5_0", 1, 0, {}),
        ("rxe0", 1, 0, {}),
    ]
    write_tree(tmp_path, 1)
    mlx5, rxe = sampler.port_records(read_ports(T1, tmp_path))

    assert mlx5["interval_ns"] == rxe["interval_ns"] == 1_000_000_000
    m = mlx5["rates"]
    assert (m["tx_bytes"], m["rx_bytes"]) == (1_000_000_000.0, 2_000_000_000.0)
    assert (m["tx_packets"], m["rx_packets"], m["rx_errors"]) == (245_000.0, 490_000.0, 2.0)
    assert (m["tx_discards"], m["symbol_errors"], m["link_downed"]) == (0.0, 0.0, 0.0)
    assert (m["rx_out_of_sequence"], m["rx_nak_seq_errors"]) == (496.0, 3.0)  # 496: wrapped
    assert (m["rx_duplicate_requests"], m["cnp_sent"], m["cnp_handled"]) == (2.0, 50.0, 4.0)
    assert (m["rx_ecn_marked_packets"], m["rx_write_requests"]) == (60.0, 250_000.0)
    assert "local_ack_timeouts" not in m  # 5 -> 1: reset, no rate
    assert mlx5["counters"]["local_ack_timeouts"] == 1
    assert mlx5["counters"]["tx_bytes"] == 5_000_000_000  # cumulative, in bytes
    assert all(value >= 0 for value in m.values())

    r = rxe["rates"]
    assert (r["tx_packets"], r["rx_packets"]) == (600.0, 500.0)
    assert (r["rx_out_of_sequence"], r["rx_duplicate_requests"], r["rx_nak_seq_errors"]) == (
        3.0,
        1.0,
        2.0,
    )
    assert (r["requester_retries"], r["rdma_sends"], r["rdma_recvs"]) == (3.0, 40.0, 50.0)
    assert "ack_deferred" not in r and "tx_bytes" not in r  # reset; rxe counts no bytes
    assert rxe["counters"]["ack_deferred"] == 90

    for record in (mlx5, rxe):
        assert record["source"] == "SYSFS"
        assert codec.decode(codec.encode(RDMA_COUNTERS, record)) == (RDMA_COUNTERS, record)
    assert mlx5["event_id"] == f"node-r/rdma/mlx5_0/1/{T1}"


def test_a_port_that_goes_away_starts_again_without_rates(tmp_path: Path) -> None:
    sampler = RdmaSampler("n")
    write_tree(tmp_path, 0)
    sampler.port_records(read_ports(T0, tmp_path))
    sampler.port_records([r for r in read_ports(T1, tmp_path) if r.device == "rxe0"])
    write_tree(tmp_path, 1)
    again = sampler.port_records(read_ports(T1 + 1_000_000_000, tmp_path))
    assert [(r["device"], r["interval_ns"]) for r in again] == [
        ("mlx5_0", 0),
        ("rxe0", 1_000_000_000),
    ]


def test_qp_counter_sets_are_rated_per_process(codec: AvroCodec) -> None:
    sampler = RdmaSampler("n")

    def sets(writes: int, pid: int) -> list[QpCounterSet]:
        counters = {"rx_write_requests": writes, "out_of_sequence": 1}
        return [QpCounterSet("mlx5_0", 1, 4, "RC", pid, "ib_write_bw", (178, 179), counters)]

    assert sampler.counter_set_records(T0, sets(100, 30489))[0]["rates"] == {}
    (record,) = sampler.counter_set_records(T1, sets(400, 30489))
    assert record["rates"] == {"rx_write_requests": 300.0, "rx_out_of_sequence": 0.0}
    assert (record["pid"], record["process_name"]) == (30489, "ib_write_bw")
    assert (record["qpns"], record["source"]) == ([178, 179], "RDMA_STATISTIC")
    assert (record["event_id"], record["counter_id"]) == (f"n/rdma/mlx5_0/1/cntn4/{T1}", 4)
    assert codec.decode(codec.encode(RDMA_COUNTERS, record))[1] == record
    # The counter id now counts another process: its counts start again, no rate.
    assert sampler.counter_set_records(T1 + 1, sets(5, 777))[0]["rates"] == {}
