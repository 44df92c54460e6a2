"""rdma/rdma_records.py: the three kinds of RdmaCounters record (a port, a QP counter set, a
RoCE flow) encode with the schema, with deterministic event ids, cumulative counters and
rates only where an interval exists."""

from __future__ import annotations

import pytest

from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace_collector.packets.roce_flows import COUNTERS, QpFigures, QpKey
from zerotrace_collector.rdma.port_rates import Rates
from zerotrace_collector.rdma.rdma_records import (
    RDMA_COUNTERS,
    counter_set_record,
    flow_record,
    port_record,
)
from zerotrace_collector.rdma.rdma_statistic import QpCounterSet
from zerotrace_collector.rdma.sysfs_ports import PortReading

pytestmark = pytest.mark.unit


def test_the_record_is_the_raw_rdma_topics() -> None:
    assert names.RAW_RDMA.record == RDMA_COUNTERS


def test_a_port_record(codec: AvroCodec) -> None:
    reading = PortReading("mlx5_0", 1, 77, {"port_xmit_data": 1}, {})
    first = port_record("n", reading, {"tx_bytes": 4}, None)
    later = port_record("n", reading, {"tx_bytes": 4}, Rates(10, {"tx_bytes": 2.5}, ("x",)))
    assert (first["event_id"], first["interval_ns"], first["rates"], first["flow"]) == (
        "n/rdma/mlx5_0/1/77",
        0,
        {},
        None,
    )
    assert (later["interval_ns"], later["source"], later["counter_id"]) == (10, "SYSFS", None)
    assert later["rates"] == {"tx_bytes": 2.5}
    for record in (first, later):
        assert codec.decode(codec.encode(RDMA_COUNTERS, record)) == (RDMA_COUNTERS, record)


def test_a_counter_set_record_of_a_kernel_consumer(codec: AvroCodec) -> None:
    kernel = QpCounterSet("rxe0", 1, 2, "UD", None, "ib_core", (1,), {"sent_pkts": 3})
    record = counter_set_record("n", 5, kernel, {"tx_packets": 3}, None)
    assert (record["pid"], record["process_name"], record["qpns"]) == (None, "ib_core", [1])
    assert record["counter_id"] == 2  # without a pid, the set is known by its counter id
    assert record["counters"] == {"tx_packets": 3}
    assert codec.decode(codec.encode(RDMA_COUNTERS, record))[1] == record


def test_a_flow_of_one_packet_has_no_rates(codec: AvroCodec) -> None:
    figures = QpFigures(
        QpKey("fd00::1", "fd00::2", 9), "UD", None, 50, 50, None, dict.fromkeys(COUNTERS, 0), ()
    )
    record = flow_record("n", figures)
    assert (record["interval_ns"], record["rates"], record["ts_ns"]) == (0, {}, 50)
    assert record["event_id"] == "n/roce/fd00::1-fd00::2/qp9/50"
    assert (record["device"], record["port"], record["source"]) == ("", 0, "PACKETS")
    assert codec.decode(codec.encode(RDMA_COUNTERS, record))[1] == record
