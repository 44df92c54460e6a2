"""Reassembly events -> zerotrace.raw.SocketData and zerotrace.raw.ConnEvent records (pure).

The packet path produces the same raw records as the eBPF socket path, so everything after it
is shared. Conventions, as seen from the client's socket:
- local = the client, remote = the server; EGRESS = client -> server, INGRESS = server -> client.
  The correlator treats source PACKET as the NETWORK observation point.
- pid, tid 0, process_name "", service null and fd -1: a packet does not say which process
  owns the socket.
- start_ns == end_ns == the time of the packet that made the bytes contiguous.
- A gap marker becomes a record with `bytes` = the missing count, an empty payload and
  payload_truncated True; tcp_seq is the sequence number of the first byte (missing or not).
- conn_id: node, 5-tuple and the time of the connection's first packet (its SYN when captured),
  so a replay of the same capture gives the same ids; event ids add direction and stream offset.
- UDP (udp_flows.py): a flow's datagrams are its records, one each, with tcp_seq null; conn_id
  says `udp` where a TCP one says `tcp`, event ids count datagrams per direction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from zerotrace import names
from zerotrace_collector.packets.tcp_reassembly import (
    DataPiece,
    Direction,
    Endpoint,
    FlowEvent,
    FlowId,
    FlowOpened,
)
from zerotrace_collector.packets.udp_flows import Datagram

# A piece longer than this becomes several records: Kafka's default message limit is 1 MiB and
# the eBPF path captures far less per call, so 64 KiB keeps records comparable and small.
MAX_PAYLOAD = 64 * 1024
SOCKET_DATA = names.RAW_SOCKET.record
CONN_EVENT = names.RAW_CONN.record
UNKNOWN_PID = 0
UNKNOWN_FD = -1

Record = tuple[str, dict[str, Any]]


def conn_id(node_id: str, flow: FlowId) -> str:
    transport = flow.transport
    return f"{node_id}/{transport}/{_addr(flow.client)}-{_addr(flow.server)}/{flow.opened_ns}"


def records_from_event(
    event: FlowEvent | Datagram, node_id: str, max_payload: int = MAX_PAYLOAD
) -> Iterator[Record]:
    if isinstance(event, Datagram):
        yield SOCKET_DATA, datagram_record(event, node_id, max_payload)
    elif isinstance(event, DataPiece):
        yield from socket_data_records(event, node_id, max_payload)
    elif isinstance(event, FlowOpened):
        yield CONN_EVENT, conn_event_record(event.flow, node_id, "CONNECT", event.ts_ns)
    else:
        yield CONN_EVENT, conn_event_record(event.flow, node_id, "CLOSE", event.ts_ns)


def socket_data_records(
    piece: DataPiece, node_id: str, max_payload: int = MAX_PAYLOAD
) -> Iterator[Record]:
    cid = conn_id(node_id, piece.flow)
    direction = "EGRESS" if piece.direction is Direction.CLIENT_TO_SERVER else "INGRESS"
    if piece.gap:
        chunks = [(0, b"", piece.gap)]
    else:
        chunks = [
            (at, piece.data[at : at + max_payload], min(max_payload, len(piece.data) - at))
            for at in range(0, len(piece.data), max_payload)
        ]
    for at, payload, count in chunks:
        offset = piece.offset + at
        yield (
            SOCKET_DATA,
            {
                "event_id": f"{cid}/{piece.direction.value}/{offset}{'/gap' if piece.gap else ''}",
                "node_id": node_id,
                "pid": UNKNOWN_PID,
                "tid": UNKNOWN_PID,
                "process_name": "",
                "service": None,
                "container_id": None,
                "conn_id": cid,
                "fd": UNKNOWN_FD,
                "direction": direction,
                "source": "PACKET",
                "start_ns": piece.ts_ns,
                "end_ns": piece.ts_ns,
                "bytes": count,
                "payload": payload,
                "payload_truncated": bool(piece.gap),
                "tcp_seq": (piece.seq + at) % (1 << 32),
                "waited_ns": None,  # a capture sees no socket
                **_addresses(piece.flow),
            },
        )


def datagram_record(
    datagram: Datagram, node_id: str, max_payload: int = MAX_PAYLOAD
) -> dict[str, Any]:
    cid = conn_id(node_id, datagram.flow)
    direction = "EGRESS" if datagram.direction is Direction.CLIENT_TO_SERVER else "INGRESS"
    payload = datagram.data[:max_payload]
    return {
        "event_id": f"{cid}/{datagram.direction.value}/{datagram.index}",
        "node_id": node_id,
        "pid": UNKNOWN_PID,
        "tid": UNKNOWN_PID,
        "process_name": "",
        "service": None,
        "container_id": None,
        "conn_id": cid,
        "fd": UNKNOWN_FD,
        "direction": direction,
        "source": "PACKET",
        "start_ns": datagram.ts_ns,
        "end_ns": datagram.ts_ns,
        "bytes": datagram.size,
        "payload": payload,
        "payload_truncated": len(payload) < datagram.size,
        "tcp_seq": None,
        "waited_ns": None,
        **_addresses(datagram.flow),
    }


def conn_event_record(flow: FlowId, node_id: str, kind: str, ts_ns: int) -> dict[str, Any]:
    cid = conn_id(node_id, flow)
    return {
        "event_id": f"{cid}/{kind.lower()}",
        "node_id": node_id,
        "pid": UNKNOWN_PID,
        "tid": UNKNOWN_PID,
        "process_name": "",
        "service": None,
        "container_id": None,
        "conn_id": cid,
        "fd": UNKNOWN_FD,
        "kind": kind,
        "ts_ns": ts_ns,
        # The handshake time is not measured on the packet path (CONNECT is emitted at the SYN).
        "duration_ns": 0,
        **_addresses(flow),
    }


def _addresses(flow: FlowId) -> dict[str, Any]:
    return {
        "local_addr": flow.client.addr,
        "local_port": flow.client.port,
        "remote_addr": flow.server.addr,
        "remote_port": flow.server.port,
    }


def _addr(endpoint: Endpoint) -> str:
    if ":" in endpoint.addr:
        return f"[{endpoint.addr}]:{endpoint.port}"
    return f"{endpoint.addr}:{endpoint.port}"
