"""Recorded sysfs trees of RDMA ports, written by the tests into tmp dirs: an mlx5 RoCE port
(ConnectX-6: IBA counters/ and the mlx5 hw_counters) and a SoftRoCE rxe port (hw_counters
only), each at two moments one second apart, with the values of a busy port."""

from __future__ import annotations

from pathlib import Path

T0 = 1_760_000_000_000_000_000
T1 = T0 + 1_000_000_000

MLX5_COUNTERS_0 = {
    "excessive_buffer_overrun_errors": 0,
    "link_downed": 0,
    "link_error_recovery": 0,
    "local_link_integrity_errors": 0,
    "multicast_rcv_packets": 0,
    "multicast_xmit_packets": 0,
    "port_rcv_constraint_errors": 0,
    "port_rcv_data": 2_000_000_000,
    "port_rcv_errors": 3,
    "port_rcv_packets": 20_000_000,
    "port_rcv_remote_physical_errors": 0,
    "port_rcv_switch_relay_errors": 0,
    "port_xmit_constraint_errors": 0,
    "port_xmit_data": 1_000_000_000,
    "port_xmit_discards": 11,
    "port_xmit_packets": 10_000_000,
    "port_xmit_wait": 0,
    "symbol_error": 0,
    "unicast_rcv_packets": 20_000_000,
    "unicast_xmit_packets": 10_000_000,
    "VL15_dropped": 0,
}
# One second later: 1 GB/s out (250 M units of 4 bytes), 2 GB/s in, two receive errors.
MLX5_COUNTERS_1 = {
    **MLX5_COUNTERS_0,
    "port_rcv_data": 2_500_000_000,
    "port_rcv_errors": 5,
    "port_rcv_packets": 20_490_000,
    "port_xmit_data": 1_250_000_000,
    "port_xmit_discards": 11,
    "port_xmit_packets": 10_245_000,
    "unicast_rcv_packets": 20_490_000,
    "unicast_xmit_packets": 10_245_000,
}
MLX5_HW_0 = {
    "duplicate_request": 4,
    "implied_nak_seq_err": 0,
    "lifespan": 10,
    "local_ack_timeout_err": 5,
    "np_cnp_sent": 100,
    "np_ecn_marked_roce_packets": 120,
    "out_of_buffer": 0,
    "out_of_sequence": 4_294_967_000,  # near the top of its 32 bits: it wraps in the second
    "packet_seq_err": 17,
    "req_cqe_error": 0,
    "req_cqe_flush_error": 0,
    "req_remote_access_errors": 0,
    "req_remote_invalid_request": 0,
    "resp_cqe_error": 0,
    "resp_cqe_flush_error": 0,
    "resp_local_length_error": 0,
    "resp_remote_access_errors": 0,
    "rnr_nak_retry_err": 0,
    "roce_adp_retrans": 0,
    "roce_adp_retrans_to": 0,
    "roce_slow_restart": 0,
    "roce_slow_restart_cnps": 0,
    "roce_slow_restart_trans": 0,
    "rp_cnp_handled": 40,
    "rp_cnp_ignored": 0,
    "rx_atomic_requests": 0,
    "rx_dct_connect": 0,
    "rx_icrc_encapsulated": 0,
    "rx_read_requests": 1_000,
    "rx_write_requests": 900_000,
}
MLX5_HW_1 = {
    **MLX5_HW_0,
    "duplicate_request": 6,
    "local_ack_timeout_err": 1,  # went down: the counter set was made anew (a reset)
    "np_cnp_sent": 150,
    "np_ecn_marked_roce_packets": 180,
    "out_of_sequence": 200,  # 296 to the top, then 200: 496 in the second
    "packet_seq_err": 20,
    "rp_cnp_handled": 44,
    "rx_read_requests": 1_010,
    "rx_write_requests": 1_150_000,
}
RXE_HW_0 = {
    "ack_deferred": 100,
    "completer_retry_err": 12,
    "duplicate_request": 2,
    "lifespan": 10,
    "link_downed": 1,
    "out_of_seq_request": 1,
    "rcvd_pkts": 4_800,
    "rcvd_rnr_err": 0,
    "rcvd_seq_err": 7,
    "rdma_recvs": 280,
    "rdma_sends": 300,
    "retry_exceeded_err": 0,
    "retry_rnr_exceeded_err": 0,
    "send_err": 0,
    "send_rnr_err": 0,
    "sent_pkts": 5_000,
}
RXE_HW_1 = {
    **RXE_HW_0,
    "ack_deferred": 90,  # a reset: 64-bit, so it cannot have wrapped
    "completer_retry_err": 15,
    "duplicate_request": 3,
    "out_of_seq_request": 4,
    "rcvd_pkts": 5_300,
    "rcvd_seq_err": 9,
    "rdma_recvs": 330,
    "rdma_sends": 340,
    "sent_pkts": 5_600,
}


def write_port(
    root: Path,
    device: str,
    port: int,
    counters: dict[str, int] | None,
    hw: dict[str, int],
    extra: dict[str, str] | None = None,
) -> None:
    """One port's folders as the kernel lays them out (counters None: no counters/ folder,
    as on rxe). extra: more files, "counters/NAME" -> text, for odd contents."""
    base = root / device / "ports" / str(port)
    for folder, values in (("counters", counters), ("hw_counters", hw)):
        if values is None:
            continue
        (base / folder).mkdir(parents=True, exist_ok=True)
        for name, value in values.items():
            (base / folder / name).write_text(f"{value}\n")
    for name, text in (extra or {}).items():
        (base / name).write_text(text)
    (base / "link_layer").write_text("Ethernet\n")
    (base / "state").write_text("4: ACTIVE\n")


def write_tree(root: Path, second: int) -> None:
    """Both devices at second 0 or 1."""
    write_port(
        root,
        "mlx5_0",
        1,
        MLX5_COUNTERS_1 if second else MLX5_COUNTERS_0,
        MLX5_HW_1 if second else MLX5_HW_0,
    )
    write_port(root, "rxe0", 1, None, RXE_HW_1 if second else RXE_HW_0)
