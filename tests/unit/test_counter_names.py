"""rdma/counter_names.py: mlx5, rxe and IBA port counter names in one vocabulary; data
counters from 4-byte units to bytes; mlx5 queue counters marked as 32-bit wrapping; names no
table knows kept; lifespan left out."""

from __future__ import annotations

import pytest

from tests.unit.rdma_trees import MLX5_COUNTERS_0, MLX5_HW_0, RXE_HW_0
from zerotrace_collector.rdma.counter_names import MLX5, PORT, RXE, naming_of, normalise

pytestmark = pytest.mark.unit


def test_mlx5_port_in_the_vocabulary() -> None:
    n = normalise(MLX5_COUNTERS_0, MLX5_HW_0)
    assert n.naming == "mlx5"
    v = n.values
    assert (v["tx_bytes"], v["rx_bytes"]) == (4_000_000_000, 8_000_000_000)
    assert (v["tx_packets"], v["rx_packets"], v["rx_errors"]) == (10_000_000, 20_000_000, 3)
    assert (v["rx_out_of_sequence"], v["rx_nak_seq_errors"], v["cnp_sent"]) == (
        4_294_967_000,
        17,
        100,
    )
    assert (v["cnp_handled"], v["rx_ecn_marked_packets"], v["local_ack_timeouts"]) == (40, 120, 5)
    assert "lifespan" not in v and "port_xmit_data" not in v
    assert "rx_out_of_sequence" in n.wraps_32 and "cnp_sent" not in n.wraps_32
    assert "tx_bytes" not in n.wraps_32


def test_rxe_port_in_the_same_vocabulary() -> None:
    n = normalise({}, RXE_HW_0)
    assert n.naming == "rxe" and n.wraps_32 == frozenset()
    v = n.values
    assert (v["tx_packets"], v["rx_packets"]) == (5_000, 4_800)
    assert (v["rx_out_of_sequence"], v["rx_duplicate_requests"], v["rx_nak_seq_errors"]) == (
        1,
        2,
        7,
    )
    assert (v["requester_retries"], v["tx_rnr_naks"], v["link_downed"]) == (12, 0, 1)
    assert set(v) == {RXE[name].normal for name in RXE_HW_0 if name != "lifespan"}


def test_the_same_meaning_has_the_same_name_in_both_drivers() -> None:
    for raw_mlx5, raw_rxe in [
        ("out_of_sequence", "out_of_seq_request"),
        ("packet_seq_err", "rcvd_seq_err"),
        ("rnr_nak_retry_err", "rcvd_rnr_err"),
        ("req_transport_retries_exceeded", "retry_exceeded_err"),
        ("req_rnr_retries_exceeded", "retry_rnr_exceeded_err"),
        ("duplicate_request", "duplicate_request"),
    ]:
        assert MLX5[raw_mlx5].normal == RXE[raw_rxe].normal
    assert PORT["port_xmit_packets"].normal == RXE["sent_pkts"].normal


def test_unknown_names_are_kept_and_a_taken_name_is_prefixed() -> None:
    n = normalise({"link_downed": 2}, {"sent_pkts": 1, "link_downed": 3, "new_thing": 9})
    assert n.values == {"link_downed": 2, "tx_packets": 1, "hw.link_downed": 3, "new_thing": 9}
    assert naming_of({"port_xmit_data": 1}) == "other"
    assert normalise({}, {"custom": 1}).values == {"custom": 1}
