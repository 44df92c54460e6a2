"""Packet input for the collector: capture files (pcap, pcapng) and live AF_PACKET capture,
decoded and reassembled into the same raw records (SocketData, ConnEvent) as the eBPF socket
path, so everything after it is shared.

    read   capture_file, pcap, pcapng       bytes -> CapturedPacket   (never raise on bad input)
    decode link, ip, tcp, decode            CapturedPacket -> TcpPacket | Skip
    join   tcp_stream, tcp_reassembly       TcpPacket -> FlowOpened | DataPiece | FlowClosed
    emit   flows_to_records                 events -> (record full name, datum)
    roce   roce, roce_psn, roce_flows       RoCEv2 (UDP to 4791) -> figures per queue pair,
                                            apart from the records (rdma/rdma_records.py)
    run    analysis (PcapAnalysis)          all of the above over one capture, with counters
    shell  af_packet                        live frames from an interface, to a pcap and/or on
"""

from zerotrace_collector.packets.analysis import (
    AnalysisCounters,
    PcapAnalysis,
    records_from_pcap,
)
from zerotrace_collector.packets.capture_file import iter_capture, read_capture
from zerotrace_collector.packets.captured import CapturedPacket, ReadReport
from zerotrace_collector.packets.pcap import PcapWriter, pcap_bytes
from zerotrace_collector.packets.tcp_reassembly import (
    DataPiece,
    Direction,
    FlowClosed,
    FlowId,
    FlowOpened,
    ReassemblyCounters,
    ReassemblyLimits,
    TcpReassembler,
)

__all__ = [
    "AnalysisCounters",
    "CapturedPacket",
    "DataPiece",
    "Direction",
    "FlowClosed",
    "FlowId",
    "FlowOpened",
    "PcapAnalysis",
    "PcapWriter",
    "ReadReport",
    "ReassemblyCounters",
    "ReassemblyLimits",
    "TcpReassembler",
    "iter_capture",
    "pcap_bytes",
    "read_capture",
    "records_from_pcap",
]
