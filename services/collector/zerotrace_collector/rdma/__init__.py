"""RDMA counters for the collector: port counters from sysfs, per-process QP counter sets from
`rdma statistic`, in one vocabulary, with rates, as zerotrace.raw.RdmaCounters records.

    read     sysfs_ports (sysfs tree), rdma_tool (runs `rdma`)    the only I/O
    parse    rdma_statistic                                       `rdma` output -> counter sets
    name     counter_names                                        mlx5, rxe, IBA names -> one set
    rate     port_rates                                           two readings -> per second
    emit     rdma_records, rdma_sampler                           readings -> records
    shell    rdma_feed                                            a collector Feed, on a clock

Per-flow figures from RoCEv2 packets live with the other packet code
(packets/roce.py, roce_psn.py, roce_flows.py); rdma_records turns them into the same record.
"""
