"""RDMA samples -> zerotrace.raw.RdmaCounters records (pure).

Three sources share the record (its `source` says which):

- SYSFS: one device port, its counters normalised (counter_names.py), rates since the
  previous reading of that port;
- RDMA_STATISTIC: one QP counter set of `rdma statistic qp show`, i.e. some queue pairs of one
  process (pid, process_name, qpns) known by its counter id (a process may hold several sets,
  kernel consumers have no pid), its counters normalised as hw_counters are;
- PACKETS: one RoCEv2 queue pair flow (packets/roce_flows.py), its figures as counters and
  its packet, byte, loss and retransmission rates over its first to last packet.

`counters` holds cumulative values, `rates` increases per second over `interval_ns`.
Event ids are deterministic: node, source, what was sampled and the sample time.
"""

from __future__ import annotations

from typing import Any

from zerotrace import names
from zerotrace_collector.packets.roce_flows import QpFigures
from zerotrace_collector.rdma.port_rates import NS_PER_S, Rates
from zerotrace_collector.rdma.rdma_statistic import QpCounterSet
from zerotrace_collector.rdma.sysfs_ports import PortReading

RDMA_COUNTERS = names.RAW_RDMA.record
SYSFS, RDMA_STATISTIC, PACKETS = "SYSFS", "RDMA_STATISTIC", "PACKETS"
# A flow's counters that make sense per second (the rest are latencies, gauges and states).
FLOW_RATES = (
    "packets",
    "bytes",
    "payload_bytes",
    "lost",
    "retransmitted",
    "recovered",
    "naks",
    "cnps",
)


def port_record(
    node_id: str, reading: PortReading, counters: dict[str, int], rates: Rates | None
) -> dict[str, Any]:
    """counters: the reading normalised (counter_names.normalise), rates: since the port's
    previous reading (port_rates.RateTracker), None for its first."""
    return _record(
        event_id=f"{node_id}/rdma/{reading.device}/{reading.port}/{reading.ts_ns}",
        node_id=node_id,
        ts_ns=reading.ts_ns,
        device=reading.device,
        port=reading.port,
        counters=counters,
        source=SYSFS,
        rates=rates,
    )


def counter_set_record(
    node_id: str,
    ts_ns: int,
    counter_set: QpCounterSet,
    counters: dict[str, int],
    rates: Rates | None,
) -> dict[str, Any]:
    """counters: the set's counters normalised (counter_names.normalise({}, set.counters))."""
    s = counter_set
    return _record(
        event_id=f"{node_id}/rdma/{s.device}/{s.port}/cntn{s.counter_id}/{ts_ns}",
        node_id=node_id,
        ts_ns=ts_ns,
        device=s.device,
        port=s.port,
        counters=counters,
        source=RDMA_STATISTIC,
        rates=rates,
        pid=s.pid,
        process_name=s.comm,
        qpns=list(s.qpns),
        counter_id=s.counter_id,
    )


def flow_record(node_id: str, figures: QpFigures) -> dict[str, Any]:
    """A flow's figures at its last packet, rates over its lifetime (none for one packet)."""
    key = figures.key
    interval = figures.duration_ns
    rates = {
        name: figures.counters[name] * NS_PER_S / interval for name in FLOW_RATES if interval > 0
    }
    return {
        **_record(
            event_id=f"{node_id}/roce/{key.src}-{key.dst}/qp{key.dest_qp}/{figures.first_ns}",
            node_id=node_id,
            ts_ns=figures.last_ns,
            device="",
            port=0,
            counters=dict(figures.counters),
            source=PACKETS,
            rates=Rates(interval, rates) if interval > 0 else None,
        ),
        "flow": {
            "src_addr": key.src,
            "dst_addr": key.dst,
            "dest_qp": key.dest_qp,
            "src_qp": figures.src_qp,
            "transport": figures.transport,
        },
    }


def _record(
    *,
    event_id: str,
    node_id: str,
    ts_ns: int,
    device: str,
    port: int,
    counters: dict[str, int],
    source: str,
    rates: Rates | None,
    pid: int | None = None,
    process_name: str | None = None,
    qpns: list[int] | None = None,
    counter_id: int | None = None,
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "node_id": node_id,
        "ts_ns": ts_ns,
        "device": device,
        "port": port,
        "counters": counters,
        "source": source,
        "interval_ns": rates.interval_ns if rates is not None else 0,
        "rates": dict(rates.per_second) if rates is not None else {},
        "pid": pid,
        "process_name": process_name,
        "qpns": qpns or [],
        "flow": None,
        "counter_id": counter_id,
    }
