"""Reassembly events -> raw SocketData and ConnEvent records, as the schemas want them."""

from __future__ import annotations

from zerotrace.codec import AvroCodec
from zerotrace_collector.packets.flows_to_records import (
    CONN_EVENT,
    SOCKET_DATA,
    conn_id,
    records_from_event,
)
from zerotrace_collector.packets.tcp_reassembly import (
    CloseReason,
    DataPiece,
    Direction,
    Endpoint,
    FlowClosed,
    FlowId,
    FlowOpened,
)

FLOW = FlowId(Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 8000), 1_000)
FLOW6 = FlowId(Endpoint("2001:db8::1", 40000), Endpoint("2001:db8::2", 443), 5)


def test_conn_ids_name_node_tuple_and_first_packet_time() -> None:
    assert conn_id("n1", FLOW) == "n1/tcp/10.0.0.1:40000-10.0.0.2:8000/1000"
    assert conn_id("n1", FLOW6) == "n1/tcp/[2001:db8::1]:40000-[2001:db8::2]:443/5"


def test_data_records_as_seen_from_the_client_socket(codec: AvroCodec) -> None:
    piece = DataPiece(FLOW, Direction.CLIENT_TO_SERVER, 2_000, 101, 0, b"GET /")
    [(name, record)] = list(records_from_event(piece, "n1"))
    assert name == SOCKET_DATA
    assert record == {
        "event_id": "n1/tcp/10.0.0.1:40000-10.0.0.2:8000/1000/c2s/0",
        "node_id": "n1",
        "pid": 0,
        "tid": 0,
        "process_name": "",
        "service": None,
        "container_id": None,
        "conn_id": "n1/tcp/10.0.0.1:40000-10.0.0.2:8000/1000",
        "fd": -1,
        "direction": "EGRESS",
        "source": "PACKET",
        "start_ns": 2_000,
        "end_ns": 2_000,
        "bytes": 5,
        "payload": b"GET /",
        "payload_truncated": False,
        "tcp_seq": 101,
        "waited_ns": None,
        "local_addr": "10.0.0.1",
        "local_port": 40000,
        "remote_addr": "10.0.0.2",
        "remote_port": 8000,
    }
    assert codec.decode(codec.encode(name, record)) == (name, record)
    reply = DataPiece(FLOW, Direction.SERVER_TO_CLIENT, 3_000, 9, 0, b"200")
    assert next(records_from_event(reply, "n1"))[1]["direction"] == "INGRESS"


def test_large_pieces_are_split_at_the_max_payload() -> None:
    data = bytes(range(256)) * 600  # 153600 bytes
    piece = DataPiece(FLOW, Direction.SERVER_TO_CLIENT, 2_000, 2**32 - 10, 70_000, data)
    records = [r for _, r in records_from_event(piece, "n1", max_payload=65536)]
    assert [r["bytes"] for r in records] == [65536, 65536, 153600 - 131072]
    assert b"".join(r["payload"] for r in records) == data
    assert [r["tcp_seq"] for r in records] == [2**32 - 10, 65526, 131062]
    assert [r["event_id"].rsplit("/", 1)[1] for r in records] == ["70000", "135536", "201072"]
    assert {r["start_ns"] for r in records} == {2_000}


def test_a_gap_is_a_record_with_no_payload(codec: AvroCodec) -> None:
    gap = DataPiece(FLOW6, Direction.CLIENT_TO_SERVER, 9, 500, 400, b"", gap=1200)
    [(name, record)] = list(records_from_event(gap, "n1"))
    assert (record["bytes"], record["payload"], record["payload_truncated"]) == (1200, b"", True)
    assert record["tcp_seq"] == 500 and record["event_id"].endswith("/c2s/400/gap")
    assert codec.decode(codec.encode(name, record)) == (name, record)


def test_connection_events(codec: AvroCodec) -> None:
    [(n1, opened)] = list(records_from_event(FlowOpened(FLOW, 1_000), "n1"))
    [(n2, closed)] = list(records_from_event(FlowClosed(FLOW, 9_000, CloseReason.RST), "n1"))
    assert n1 == n2 == CONN_EVENT
    assert (opened["kind"], opened["ts_ns"], opened["duration_ns"]) == ("CONNECT", 1_000, 0)
    assert (closed["kind"], closed["ts_ns"]) == ("CLOSE", 9_000)
    assert opened["event_id"] != closed["event_id"] and opened["conn_id"] == closed["conn_id"]
    assert (opened["local_port"], opened["remote_port"]) == (40000, 8000)
    for name, record in [(n1, opened), (n2, closed)]:
        assert codec.decode(codec.encode(name, record)) == (name, record)
