"""A capture file -> raw records: read, decode, reassemble, convert (pure apart from opening
the file, which `records` does itself when given a path).

    analysis = PcapAnalysis("node-a")
    for record_name, datum in analysis.records("capture.pcap"):
        ...
    analysis.counters, analysis.read.problem
    analysis.roce_figures   # RoCEv2 queue pair flows (roce_flows.py), once the input ended

Records come in capture order, which is time order when the capture's timestamps are (a
capturing tool writes them so): each record's time is that of the packet that produced it, a
CONNECT's is its SYN's, and an idle close's is the last packet plus the idle timeout, which is
never later than the packet that revealed it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, BinaryIO

from zerotrace_collector.packets.capture_file import iter_capture
from zerotrace_collector.packets.captured import CapturedPacket, ReadReport
from zerotrace_collector.packets.decode import TcpPacket, UdpPacket, decode_packet
from zerotrace_collector.packets.flows_to_records import (
    MAX_PAYLOAD,
    SOCKET_DATA,
    Record,
    records_from_event,
)
from zerotrace_collector.packets.roce_flows import QpFigures, RoceFlows
from zerotrace_collector.packets.skip import Skip
from zerotrace_collector.packets.tcp_reassembly import (
    DEFAULT_LIMITS,
    FlowEvent,
    ReassemblyCounters,
    ReassemblyLimits,
    TcpReassembler,
)
from zerotrace_collector.packets.udp_flows import DNS_PORT, UdpEvent, UdpFlows
from zerotrace_collector.redaction import Redactor


@dataclass
class AnalysisCounters:
    packets: int = 0  # captured packets read
    tcp: int = 0  # of which TCP segments, fed to reassembly
    udp: int = 0  # of which UDP datagrams to or from a wanted port (udp_flows.py)
    non_ip: int = 0
    non_tcp: int = 0  # nor UDP of a wanted port
    fragments: int = 0
    malformed: int = 0
    unsupported_link: int = 0
    snapped: int = 0  # TCP packets the capture cut short (snap length)
    records: int = 0  # records produced

    def as_dict(self, reassembly: ReassemblyCounters) -> dict[str, int]:
        """These counters and the reassembly ones, flat, for a summary line or a test."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update({f.name: getattr(reassembly, f.name) for f in fields(reassembly)})
        return out


_SKIP_COUNTER = {
    Skip.NON_IP: "non_ip",
    Skip.NON_TCP: "non_tcp",
    Skip.FRAGMENT: "fragments",
    Skip.MALFORMED: "malformed",
    Skip.UNSUPPORTED_LINK: "unsupported_link",
}


class PcapAnalysis:
    """One pass over one capture. `feed` and `finish` serve a live source; `records` a file."""

    def __init__(
        self,
        node_id: str,
        limits: ReassemblyLimits = DEFAULT_LIMITS,
        max_payload: int = MAX_PAYLOAD,
        redactor: Redactor | None = None,
        udp_ports: Iterable[int] = (DNS_PORT,),
    ) -> None:
        """udp_ports: UDP datagrams to or from these ports become flows (udp_flows.py)."""
        self.node_id = node_id
        self.max_payload = max_payload
        # Credentials (and content, unless kept) masked in every record, as for live sockets.
        self.redactor = redactor if redactor is not None else Redactor()
        self.reassembler = TcpReassembler(limits)
        self.udp = UdpFlows(udp_ports)
        # RoCEv2 (UDP to 4791) is not a socket's bytes: its per-QP figures come out apart
        # from the records, in `roce_figures` once the input is finished.
        self.roce = RoceFlows()
        self.roce_figures: list[QpFigures] = []
        self.counters = AnalysisCounters()
        self.read = ReadReport()

    def feed(self, packet: CapturedPacket) -> list[Record]:
        self.counters.packets += 1
        decoded = decode_packet(packet)
        if isinstance(decoded, UdpPacket):
            if self.roce.wanted(decoded):
                self.roce.feed(decoded)
                return []
            if not self.udp.wanted(decoded):
                self.counters.non_tcp += 1
                return []
            self.counters.udp += 1
            self.counters.snapped += decoded.snapped
            return self._convert(self.udp.feed(decoded))
        if not isinstance(decoded, TcpPacket):
            name = _SKIP_COUNTER[decoded]
            setattr(self.counters, name, getattr(self.counters, name) + 1)
            return []
        self.counters.tcp += 1
        self.counters.snapped += decoded.snapped
        return self._convert(self.reassembler.feed(decoded))

    def finish(self) -> list[Record]:
        """End of input: closes every connection still open."""
        self.roce_figures += self.roce.finish()
        return self._convert([*self.reassembler.finish(), *self.udp.finish()])

    def records_from_packets(self, packets: Iterable[CapturedPacket]) -> Iterator[Record]:
        for packet in packets:
            yield from self.feed(packet)
        yield from self.finish()

    def records(self, source: str | Path | bytes | BinaryIO) -> Iterator[Record]:
        """Records of a capture file (a path, its bytes, or an open binary file). A truncated or
        corrupt file yields the records of the packets before the damage; `read.problem` then
        says why it stopped. Raises OSError only when a path cannot be opened."""
        if isinstance(source, str | Path):
            with open(source, "rb") as stream:
                yield from self._records_of(stream)
        elif isinstance(source, bytes):
            yield from self._records_of(io.BytesIO(source))
        else:
            yield from self._records_of(source)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = self.counters.as_dict(self.reassembler.counters)
        out.update(
            {f"udp_{k}" if k == "evicted" else k: v for k, v in vars(self.udp.counters).items()}
        )
        out.update(vars(self.roce.counters))
        out.update(self.redactor.counters())
        out["format"] = self.read.format
        out["problem"] = self.read.problem
        return out

    def _records_of(self, stream: BinaryIO) -> Iterator[Record]:
        yield from self.records_from_packets(iter_capture(stream, self.read))

    def _convert(self, events: Iterable[FlowEvent | UdpEvent]) -> list[Record]:
        out = [r for e in events for r in records_from_event(e, self.node_id, self.max_payload)]
        self.counters.records += len(out)
        redactor = self.redactor
        for record, datum in out:
            if record == SOCKET_DATA:
                datum["payload"] = redactor.redact(
                    datum["conn_id"],
                    datum["direction"],
                    datum["payload"],
                    not datum["payload_truncated"],
                )
            elif datum.get("kind") == "CLOSE":
                redactor.forget(datum["conn_id"])
        return out


def records_from_pcap(source: str | Path | bytes | BinaryIO, node_id: str) -> Iterator[Record]:
    """Shorthand for `PcapAnalysis(node_id).records(source)`, when counters are not wanted."""
    return PcapAnalysis(node_id).records(source)
