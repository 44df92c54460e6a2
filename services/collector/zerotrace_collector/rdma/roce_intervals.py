"""Live RoCEv2 frames -> a zerotrace.raw.RdmaCounters record (source PACKETS) per queue pair
flow and interval (pure): the capture-file analysis (packets/roce_flows.py) fed frame by frame,
read out at each tick.

A tick at time t_k (the caller's clock: every frame fed so far was stamped before it) first
lets capture time reach t_k - reorder_ns (PSNs missing for loss_after_ns become lost without
waiting for their flow's next packet), then gives, for every flow whose counters changed since
the previous tick t_{k-1}, one record stamped t_k:

- counters: the flow's figures, cumulative since its first packet (roce_flows.COUNTERS and the
  NAK syndrome counters), as `zerotrace analyze` reports them at the end of a file;
- rates: the increase of each rdma_records.FLOW_RATES counter over (t_{k-1}, t_k] divided by
  that interval (interval_ns); a flow that began in the interval counts from zero;
- event_id: node, flow, the flow's first packet and t_k, so each tick's record is its own.

Capture time stops reorder_ns short of t_k: the live shell (roce_live.py) holds the frames
stamped within that long of its clock in time_order.TimeOrder, so a fill stamped just before
its PSN's wait ended may not have been fed yet. Counted lost at t_k, it would be a loss that
the capture-file analysis of the same frames calls reordered or recovered.

A flow whose counters did not change gives no record. At most `max_flows` flows are tracked;
past that the least recently seen is closed (`roce_evicted`), gives its last record at the next
tick and is forgotten: a later packet of it starts a new flow (a new first packet, new ids).
Memory is bounded by max_flows: the flows, and the counters of each one's last record.
"""

from __future__ import annotations

from typing import Any

from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.decode import UdpPacket, decode_packet
from zerotrace_collector.packets.roce_flows import MAX_QPS, QpFigures, QpKey, RoceFlows
from zerotrace_collector.packets.roce_psn import LOSS_AFTER_NS
from zerotrace_collector.packets.time_order import DEFAULT_WINDOW_NS
from zerotrace_collector.rdma.port_rates import NS_PER_S
from zerotrace_collector.rdma.rdma_records import FLOW_RATES, flow_record


class RoceIntervals:
    def __init__(
        self,
        node_id: str,
        start_ns: int,
        max_flows: int = MAX_QPS,
        loss_after_ns: int = LOSS_AFTER_NS,
        reorder_ns: int = DEFAULT_WINDOW_NS,
    ) -> None:
        """start_ns: when capture began (the first interval starts there); reorder_ns: how
        long the caller holds frames to put them in order (its TimeOrder's window; 0 when
        every frame stamped before a tick was fed before it)."""
        if max_flows < 1:
            raise ValueError("at least one flow must be tracked")
        if reorder_ns < 0:
            raise ValueError("the reorder window cannot be negative")
        self._reorder_ns = reorder_ns
        self._node_id = node_id
        self._flows = RoceFlows(max_qps=max_flows, loss_after_ns=loss_after_ns)
        self._tick_ns = start_ns
        self._last: dict[QpKey, dict[str, int]] = {}  # counters of each flow's last record
        self.not_roce = 0  # frames that were no UDP datagram to port 4791
        self.records = 0

    def feed(self, packet: CapturedPacket) -> None:
        """One captured frame, in timestamp order."""
        decoded = decode_packet(packet)
        if isinstance(decoded, UdpPacket) and self._flows.wanted(decoded):
            self._flows.feed(decoded)
        else:
            self.not_roce += 1

    def tick(self, now_ns: int) -> list[dict[str, Any]]:
        """The records of the interval ending now_ns (none when the clock did not move on)."""
        interval = now_ns - self._tick_ns
        if interval <= 0:
            return []
        self._flows.expire(now_ns - self._reorder_ns)  # what may still be held: not yet
        out = []
        for figures in self._flows.take_closed():
            before = self._last.pop(figures.key, None)
            if figures.counters != before:
                out.append(self._record(figures, now_ns, interval, before or {}))
        for figures in self._flows.figures():
            before = self._last.get(figures.key)
            if figures.counters != before:
                out.append(self._record(figures, now_ns, interval, before or {}))
                self._last[figures.key] = dict(figures.counters)
        self._tick_ns = now_ns
        self.records += len(out)
        return out

    def counters(self) -> dict[str, int]:
        return {
            **vars(self._flows.counters),
            "not_roce": self.not_roce,
            "records": self.records,
        }

    def _record(
        self, figures: QpFigures, now_ns: int, interval_ns: int, before: dict[str, int]
    ) -> dict[str, Any]:
        key = figures.key
        rates = {
            name: (figures.counters[name] - before.get(name, 0)) * NS_PER_S / interval_ns
            for name in FLOW_RATES
        }
        return {
            **flow_record(self._node_id, figures),
            "event_id": (
                f"{self._node_id}/roce/{key.src}-{key.dst}/qp{key.dest_qp}"
                f"/{figures.first_ns}/{now_ns}"
            ),
            "ts_ns": now_ns,
            "interval_ns": interval_ns,
            "rates": rates,
        }
