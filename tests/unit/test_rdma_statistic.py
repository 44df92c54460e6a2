"""rdma/rdma_statistic.py: recorded `rdma statistic` outputs (JSON, text, pretty text; the
shapes iproute2's rdma/stat.c prints) parse to QP counter sets with their process and QP
numbers, and to per-port counters; input of another shape is one ValueError line."""

from __future__ import annotations

import pytest

from zerotrace_collector.rdma.rdma_statistic import (
    PortStatistic,
    QpCounterSet,
    parse_port_statistic,
    parse_qp_statistic,
)

pytestmark = pytest.mark.unit

MLX5_QP_COUNTERS = {
    "rx_write_requests": 41_272,
    "rx_read_requests": 0,
    "rx_atomic_requests": 0,
    "out_of_buffer": 0,
    "out_of_sequence": 3,
    "duplicate_request": 1,
    "rnr_nak_retry_err": 0,
    "packet_seq_err": 2,
    "implied_nak_seq_err": 0,
    "local_ack_timeout_err": 0,
}

# `rdma -j statistic qp show` with auto mode per pid on mlx5_2/1: a perftest process with two
# QPs, and a kernel consumer (no pid, its name as comm).
QP_JSON = (
    '[{"ifindex":2,"port":1,"ifname":"mlx5_2","cntn":4,"qp-type":"RC","pid":30489,'
    '"comm":"ib_write_bw",'
    + ",".join(f'"{k}":{v}' for k, v in MLX5_QP_COUNTERS.items())
    + ',"lqpn":[178,179]},'
    '{"ifindex":2,"port":1,"ifname":"mlx5_2","cntn":5,"qp-type":"RC","comm":"rdma-ndd",'
    '"rx_write_requests":0,"out_of_sequence":0,"lqpn":[12]}]\n'
)
QP_TEXT = (
    "link mlx5_2/1 cntn 4 qp-type RC pid 30489 comm ib_write_bw "
    + " ".join(f"{k} {v}" for k, v in MLX5_QP_COUNTERS.items())
    + " \n    LQPN: <178,179>\n"
    "link mlx5_2/1 cntn 5 qp-type RC comm [rdma-ndd] rx_write_requests 0 out_of_sequence 0 \n"
    "    LQPN: <12>\n"
)
QP_PRETTY = (
    "link mlx5_2/1 cntn 4 qp-type RC pid 30489 comm ib_write_bw \n"
    + "".join(f"    {k} {v} \n" for k, v in MLX5_QP_COUNTERS.items())
    + "    LQPN: <178,179>\n"
    "link mlx5_2/1 cntn 5 qp-type RC comm [rdma-ndd] \n"
    "    rx_write_requests 0 \n    out_of_sequence 0 \n    LQPN: <12>\n"
)
KERNEL_COUNTERS = {"rx_write_requests": 0, "out_of_sequence": 0}
WANT = [
    QpCounterSet("mlx5_2", 1, 4, "RC", 30489, "ib_write_bw", (178, 179), MLX5_QP_COUNTERS),
    QpCounterSet("mlx5_2", 1, 5, "RC", None, "rdma-ndd", (12,), KERNEL_COUNTERS),
]


@pytest.mark.parametrize("text", [QP_JSON, QP_TEXT, QP_PRETTY], ids=["json", "text", "pretty"])
def test_qp_counter_sets_in_every_form(text: str) -> None:
    assert parse_qp_statistic(text) == WANT


def test_port_statistic_of_rxe_in_json_and_text() -> None:
    json_out = '[{"ifname":"rxe0","port":1,"sent_pkts":5600,"rcvd_pkts":5300,"lifespan":10}]'
    text_out = "link rxe0/1 sent_pkts 5600 rcvd_pkts 5300 lifespan 10 \n"
    want = [PortStatistic("rxe0", 1, {"sent_pkts": 5600, "rcvd_pkts": 5300, "lifespan": 10})]
    assert parse_port_statistic(json_out) == parse_port_statistic(text_out) == want


def test_no_counter_sets_is_no_output() -> None:
    assert parse_qp_statistic("") == parse_qp_statistic("[]\n") == []


@pytest.mark.parametrize(
    "text",
    [
        "[{",
        '[{"ifname": "mlx5_0", "port": 1, "cntn": "x"}]',
        '[{"port": 1}]',
        "[1, 2]",
        "cntn 4 link mlx5_0/1",
        "link mlx5_0/1 rx_write_requests",
        "link mlx5_0/1 rx_write_requests many",
    ],
)
def test_other_shapes_are_one_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="rdma statistic") as caught:
        parse_qp_statistic(text)
    assert "\n" not in str(caught.value)
