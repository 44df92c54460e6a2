"""One connection's calls in one raw record (lib/zerotrace/socket_batch.py): a batch reads back
as exactly the SocketData records of its calls, through the real schemas, and its ids are
the ones a single record would have."""

from __future__ import annotations

import pytest

from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.errors import PoisonInput
from zerotrace.schemas import load_schema_dir
from zerotrace.socket_batch import (
    CALL_FIELDS,
    CONN_FIELDS,
    OPTIONAL_CONN_FIELDS,
    socket_batch_of,
    socket_data_of,
    socket_event_id,
)

pytestmark = pytest.mark.unit

CONN = {
    "node_id": "node-a",
    "pid": 10,
    "process_name": "uvicorn",
    "container_id": None,
    "service": "app.main",
    "conn_id": "node-a/10/5/400",
    "fd": 5,
    "local_addr": "127.0.0.1",
    "local_port": 8000,
    "remote_addr": "127.0.0.1",
    "remote_port": 41000,
}


def call(tid: int, start: int, direction: str, source: str = "SYSCALL") -> dict[str, object]:
    return {
        "tid": tid,
        "direction": direction,
        "source": source,
        "start_ns": start,
        "end_ns": start + 5,
        "bytes": 9,
        "payload": b"GET / HTT",
        "payload_truncated": False,
        "tcp_seq": 7 if source == "SYSCALL" else None,
        "waited_ns": None,
    }


def test_the_fields_split_socket_data_in_two_with_the_id_left_to_derive() -> None:
    schemas = load_schema_dir()
    single = [f["name"] for f in schemas[names.RAW_SOCKET.record].parsed["fields"]]
    assert sorted(single) == sorted(["event_id", *CONN_FIELDS, *CALL_FIELDS, *OPTIONAL_CONN_FIELDS])
    batch = schemas[names.SOCKET_BATCH_RECORD].parsed["fields"]
    # Fields added later come after the calls (fields are only ever added, at the end).
    assert [f["name"] for f in batch] == [*CONN_FIELDS, "calls", *OPTIONAL_CONN_FIELDS]
    columns = next(f for f in batch if f["name"] == "calls")["type"]["fields"]
    # Columns added later come last, with a default; py_task (the asyncio task key) is the
    # batch's own: not a SocketData field, so not among CALL_FIELDS.
    assert [f["name"] for f in columns] == [*CALL_FIELDS, "py_task"]
    assert columns[-1]["default"] == []
    assert all(f["type"]["type"] == "array" for f in columns)


def test_a_batch_reads_back_as_the_socket_data_of_its_calls_in_order(codec: AvroCodec) -> None:
    calls = [call(11, 100, "INGRESS"), call(12, 200, "EGRESS", "TLS"), call(11, 300, "EGRESS")]
    columns = {name: [c[name] for c in calls] for name in CALL_FIELDS}
    value = codec.encode(names.SOCKET_BATCH_RECORD, {**CONN, "calls": columns})
    record, batch = codec.decode(value)
    assert record == names.SOCKET_BATCH_RECORD
    expanded = socket_data_of(batch)
    assert [r["event_id"] for r in expanded] == [
        "node-a/10/11/100/in",
        "node-a/10/12/200/tls-out",
        "node-a/10/11/300/out",
    ]
    for got, one in zip(expanded, calls, strict=True):
        assert got == {**CONN, **one, "event_id": got["event_id"]}
        # Each one is a valid SocketData record, read back unchanged.
        again = codec.decode(codec.encode(names.RAW_SOCKET.record, got))
        assert again == (names.RAW_SOCKET.record, got)
    assert socket_batch_of(expanded) == {**CONN, "calls": columns}


def test_columns_of_different_lengths_are_poison_named_in_one_line() -> None:
    columns = {name: [call(11, 100, "INGRESS")[name]] for name in CALL_FIELDS}
    columns["payload"] = []
    with pytest.raises(PoisonInput, match=r"differ in length \(tid 1, .*payload 0,") as caught:
        socket_data_of({**CONN, "calls": columns})
    assert "\n" not in str(caught.value)


def test_ids_name_the_observation_whatever_record_carried_it() -> None:
    assert socket_event_id("n", 1, 2, 3, "INGRESS", "TLS") == "n/1/2/3/tls-in"
    assert socket_event_id("n", 1, 2, 3, "EGRESS", "PACKET") == "n/1/2/3/out"
    with pytest.raises(KeyError):
        socket_event_id("n", 1, 2, 3, "SIDEWAYS", "SYSCALL")
