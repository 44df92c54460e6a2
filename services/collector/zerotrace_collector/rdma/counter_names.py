"""One vocabulary for RDMA port counters, whatever driver named them (pure).

A port's counters come from two folders of /sys/class/infiniband/DEV/ports/N/:

- `counters/`: the InfiniBand PortCounters and PortCountersExtended attributes, the same names
  on every driver that has them (mlx5 fills them for RoCE ports too; SoftRoCE rxe has none).
  port_xmit_data and port_rcv_data count units of 4 bytes ("octets divided by 4", IBA
  16.1.3.5), so their values are multiplied by 4 here. The 32-bit error counters of the basic
  attribute stop at their maximum instead of wrapping (a rate of 0 while they stay there).
- `hw_counters/`: the driver's own. mlx5 reads most of them from a 32-bit queue counter set
  that wraps (the congestion counters np_* and rp_* are 64-bit); rxe's are 64-bit.

Normalised names (tx/rx seen from this port; a requester sends requests and receives ACKs
and NAKs, a responder the reverse), with the raw names they come from:

    normalised             counters/ (IBA)    mlx5 hw_counters                rxe hw_counters
    tx_bytes (x4)          port_xmit_data
    rx_bytes (x4)          port_rcv_data
    tx_packets             port_xmit_packets                                  sent_pkts
    rx_packets             port_rcv_packets                                   rcvd_pkts
    rx_errors              port_rcv_errors
    tx_discards            port_xmit_discards
    symbol_errors          symbol_error
    link_downed            link_downed                                        link_downed
    rx_out_of_sequence                        out_of_sequence                 out_of_seq_request
    rx_duplicate_requests                     duplicate_request               duplicate_request
    rx_nak_seq_errors                         packet_seq_err                  rcvd_seq_err
    rx_rnr_naks                               rnr_nak_retry_err               rcvd_rnr_err
    tx_rnr_naks                                                               send_rnr_err
    rx_out_of_buffer                          out_of_buffer
    implied_nak_seq_errors                    implied_nak_seq_err
    local_ack_timeouts                        local_ack_timeout_err
    requester_retries                                                         completer_retry_err
    retries_exceeded                          req_transport_retries_exceeded  retry_exceeded_err
    rnr_retries_exceeded                      req_rnr_retries_exceeded        retry_rnr_exceeded_err
    cnp_sent                                  np_cnp_sent
    cnp_handled                               rp_cnp_handled
    cnp_ignored                               rp_cnp_ignored
    rx_ecn_marked_packets                     np_ecn_marked_roce_packets
    rx_icrc_errors                            rx_icrc_encapsulated
    tx_errors                                                                 send_err

and the rest of the tables below. A counter no table names keeps its driver's name; one whose name
a mapped counter already took is kept as `hw.NAME`. `lifespan` (mlx5, rxe: how long the
driver caches its values, in ms) is a setting, not a counter, and is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PORT_DIR = "counters"
HW_DIR = "hw_counters"
NOT_COUNTERS = frozenset(("lifespan",))


@dataclass(frozen=True, slots=True)
class Name:
    normal: str
    scale: int = 1  # multiply the raw value by this (4 for the data counters)
    wraps_32: bool = False  # a 32-bit counter that wraps (mlx5 queue counters)


def _table(pairs: Mapping[str, str], wraps_32: bool = False) -> dict[str, Name]:
    return {raw: Name(normal, wraps_32=wraps_32) for raw, normal in pairs.items()}


# counters/: IBA PortCounters and PortCountersExtended.
PORT: dict[str, Name] = {
    "port_xmit_data": Name("tx_bytes", scale=4),
    "port_rcv_data": Name("rx_bytes", scale=4),
    **_table(
        {
            "port_xmit_packets": "tx_packets",
            "port_rcv_packets": "rx_packets",
            "unicast_xmit_packets": "tx_unicast_packets",
            "unicast_rcv_packets": "rx_unicast_packets",
            "multicast_xmit_packets": "tx_multicast_packets",
            "multicast_rcv_packets": "rx_multicast_packets",
            "port_rcv_errors": "rx_errors",
            "port_xmit_discards": "tx_discards",
            "port_rcv_remote_physical_errors": "rx_remote_physical_errors",
            "port_rcv_switch_relay_errors": "rx_switch_relay_errors",
            "port_rcv_constraint_errors": "rx_constraint_errors",
            "port_xmit_constraint_errors": "tx_constraint_errors",
            "port_xmit_wait": "tx_wait",
            "symbol_error": "symbol_errors",
            "link_downed": "link_downed",
            "link_error_recovery": "link_error_recovery",
            "local_link_integrity_errors": "local_link_integrity_errors",
            "excessive_buffer_overrun_errors": "buffer_overrun_errors",
            "VL15_dropped": "vl15_dropped",
        }
    ),
}

# mlx5 hw_counters (drivers/infiniband/hw/mlx5/counters.c): queue counters (32-bit, wrap),
# congestion counters (64-bit), the extended PPCNT ICRC counter (64-bit).
MLX5: dict[str, Name] = {
    **_table(
        {
            "rx_write_requests": "rx_write_requests",
            "rx_read_requests": "rx_read_requests",
            "rx_atomic_requests": "rx_atomic_requests",
            "rx_dct_connect": "rx_dct_connect",
            "out_of_buffer": "rx_out_of_buffer",
            "out_of_sequence": "rx_out_of_sequence",
            "duplicate_request": "rx_duplicate_requests",
            "rnr_nak_retry_err": "rx_rnr_naks",
            "packet_seq_err": "rx_nak_seq_errors",
            "implied_nak_seq_err": "implied_nak_seq_errors",
            "local_ack_timeout_err": "local_ack_timeouts",
            "req_transport_retries_exceeded": "retries_exceeded",
            "req_rnr_retries_exceeded": "rnr_retries_exceeded",
            "resp_local_length_error": "resp_local_length_errors",
            "resp_cqe_error": "resp_cqe_errors",
            "req_cqe_error": "req_cqe_errors",
            "req_remote_invalid_request": "req_remote_invalid_requests",
            "req_remote_access_errors": "req_remote_access_errors",
            "resp_remote_access_errors": "resp_remote_access_errors",
            "resp_cqe_flush_error": "resp_cqe_flush_errors",
            "req_cqe_flush_error": "req_cqe_flush_errors",
            "roce_adp_retrans": "adaptive_retrans",
            "roce_adp_retrans_to": "adaptive_retrans_timeouts",
            "roce_slow_restart": "slow_restart",
            "roce_slow_restart_cnps": "slow_restart_cnps",
            "roce_slow_restart_trans": "slow_restart_trans",
        },
        wraps_32=True,
    ),
    **_table(
        {
            "np_cnp_sent": "cnp_sent",
            "rp_cnp_handled": "cnp_handled",
            "rp_cnp_ignored": "cnp_ignored",
            "np_ecn_marked_roce_packets": "rx_ecn_marked_packets",
            "rx_icrc_encapsulated": "rx_icrc_errors",
        }
    ),
}

# rxe hw_counters (drivers/infiniband/sw/rxe/rxe_hw_counters.c), all 64-bit.
RXE: dict[str, Name] = _table(
    {
        "sent_pkts": "tx_packets",
        "rcvd_pkts": "rx_packets",
        "duplicate_request": "rx_duplicate_requests",
        "out_of_seq_request": "rx_out_of_sequence",
        "rcvd_rnr_err": "rx_rnr_naks",
        "send_rnr_err": "tx_rnr_naks",
        "rcvd_seq_err": "rx_nak_seq_errors",
        "ack_deferred": "ack_deferred",
        "retry_exceeded_err": "retries_exceeded",
        "retry_rnr_exceeded_err": "rnr_retries_exceeded",
        "completer_retry_err": "requester_retries",
        "send_err": "tx_errors",
        "link_downed": "link_downed",
        "rdma_sends": "rdma_sends",
        "rdma_recvs": "rdma_recvs",
    }
)

# Names only one of the two drivers uses tell which named a port's hw_counters.
_MLX5_ONLY = frozenset(MLX5) - frozenset(RXE)
_RXE_ONLY = frozenset(RXE) - frozenset(MLX5)


@dataclass(frozen=True)
class Normalised:
    values: dict[str, int]  # normalised name -> cumulative value, in bytes for the data ones
    wraps_32: frozenset[str]  # the normalised names whose raw counter wraps at 2^32
    naming: str  # "mlx5", "rxe" or "other": whose hw_counters names were read


def naming_of(hw_counters: Mapping[str, int]) -> str:
    if any(name in _MLX5_ONLY for name in hw_counters):
        return "mlx5"
    if any(name in _RXE_ONLY for name in hw_counters):
        return "rxe"
    return "other"


def normalise(port: Mapping[str, int], hw: Mapping[str, int]) -> Normalised:
    """A port's raw counters (by folder) in the one vocabulary."""
    naming = naming_of(hw)
    hw_table = {"mlx5": MLX5, "rxe": RXE}.get(naming, {})
    values: dict[str, int] = {}
    wraps: set[str] = set()
    for raw, table, prefix in [(port, PORT, ""), (hw, hw_table, "hw.")]:
        for name, value in raw.items():
            if name in NOT_COUNTERS:
                continue
            mapped = table.get(name)
            normal = mapped.normal if mapped is not None else name
            if normal in values:
                normal = prefix + name if prefix else normal
                if normal in values:
                    continue
            values[normal] = value * (mapped.scale if mapped is not None else 1)
            if mapped is not None and mapped.wraps_32:
                wraps.add(normal)
    return Normalised(values, frozenset(wraps), naming)
