"""Socket samples as zerotrace.raw.SocketData / ConnEvent records (pure)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.validation import validate

from zerotrace.socket_batch import socket_data_of
from zerotrace_collector.probes.event_layout import ConnKind, Direction, SockOp, Source
from zerotrace_collector.probes.socket_decode import ConnSample, SocketDataSample
from zerotrace_collector.proc_net import UNKNOWN, Endpoints
from zerotrace_collector.socket_records import (
    conn_event_record,
    conn_id,
    socket_batch_record,
    socket_data_record,
)

pytestmark = pytest.mark.unit

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "raw"
OFFSET = 1_700_000_000_000_000_000
ENDS = Endpoints("127.0.0.1", 41000, "127.0.0.1", 8000)


def schema(name: str) -> Any:
    return parse_schema(json.loads((SCHEMAS / name).read_text()))


def data(**kw: object) -> SocketDataSample:
    base: dict[str, object] = dict(
        pid=10, tid=11, fd=5, cgroup_id=1, start_mono_ns=1_000, end_mono_ns=1_500, nbytes=9,
        conn_start_ns=400, direction=Direction.EGRESS, source=Source.SYSCALL,
        op=SockOp.SENDTO, flags=0, comm="python3", payload=b"GET / HTT",
    )  # fmt: skip
    base.update(kw)
    return SocketDataSample(**base)  # type: ignore[arg-type]


def conn(kind: ConnKind, start: int = 400, end: int = 900, ret: int = 0) -> ConnSample:
    return ConnSample(
        pid=10, tid=11, fd=5, cgroup_id=1, start_mono_ns=start, end_mono_ns=end, ret=ret,
        conn_start_ns=400, kind=kind, family=2, comm="python3", remote=None,
    )  # fmt: skip


def test_socket_data_record_has_every_schema_field_and_validates() -> None:
    rec = socket_data_record(data(), "node-a", OFFSET, None, ENDS)
    fields = {f["name"] for f in json.loads((SCHEMAS / "socket_data.avsc").read_text())["fields"]}
    assert set(rec) == fields
    assert validate(rec, schema("socket_data.avsc"), raise_errors=True)
    assert rec["event_id"] == f"node-a/10/11/{OFFSET + 1_000}/out"
    assert rec["conn_id"] == f"node-a/10/5/{OFFSET + 400}"
    assert (rec["start_ns"], rec["end_ns"]) == (OFFSET + 1_000, OFFSET + 1_500)
    assert rec["direction"] == "EGRESS" and rec["source"] == "SYSCALL"
    assert rec["tcp_seq"] is None and rec["payload_truncated"] is False
    assert (rec["local_port"], rec["remote_port"]) == (41000, 8000)


def test_truncation_tls_ids_and_unknown_endpoints() -> None:
    rec = socket_data_record(
        data(nbytes=20_000, source=Source.TLS, direction=Direction.INGRESS),
        "n",
        0,
        "c0ffee",
        UNKNOWN,
    )
    assert rec["payload_truncated"] is True and rec["event_id"].endswith("/tls-in")
    assert (rec["local_addr"], rec["remote_port"], rec["container_id"]) == ("", 0, "c0ffee")
    assert validate(rec, schema("socket_data.avsc"), raise_errors=True)


def test_ids_are_deterministic_and_conn_id_shared() -> None:
    a = socket_data_record(data(), "n", OFFSET, None, ENDS)
    assert a == socket_data_record(data(), "n", OFFSET, None, ENDS)
    later = socket_data_record(
        data(start_mono_ns=5_000, end_mono_ns=6_000), "n", OFFSET, None, ENDS
    )
    assert later["event_id"] != a["event_id"] and later["conn_id"] == a["conn_id"]
    c = conn_event_record(conn(ConnKind.CLOSE), "n", OFFSET, None, ENDS)
    assert c["conn_id"] == a["conn_id"] == conn_id("n", 10, 5, 400, OFFSET)


def test_conn_event_record() -> None:
    rec = conn_event_record(conn(ConnKind.CONNECT), "n", OFFSET, None, ENDS)
    fields = {f["name"] for f in json.loads((SCHEMAS / "conn_event.avsc").read_text())["fields"]}
    assert set(rec) == fields
    assert validate(rec, schema("conn_event.avsc"), raise_errors=True)
    assert rec["kind"] == "CONNECT" and rec["duration_ns"] == 500
    assert rec["ts_ns"] == OFFSET + 900 and rec["event_id"] == f"n/10/11/{OFFSET + 400}/connect"
    close = conn_event_record(conn(ConnKind.CLOSE, 2_000, 2_100), "n", OFFSET, None, UNKNOWN)
    assert close["duration_ns"] == 0 and close["kind"] == "CLOSE"
    assert validate(close, schema("conn_event.avsc"), raise_errors=True)


def test_a_non_blocking_connect_is_timed_by_its_established_record() -> None:
    """CONNECT that returned -EINPROGRESS: duration 0 (no connect time yet); ESTABLISHED: from
    connect()'s entry to the established state, ts_ns the change."""
    pending = conn_event_record(conn(ConnKind.CONNECT, 400, 410, ret=-115), "n", OFFSET, None, ENDS)
    assert pending["duration_ns"] == 0 and pending["kind"] == "CONNECT"
    done = conn_event_record(
        conn(ConnKind.ESTABLISHED, 400, 7_400, ret=-115), "n", OFFSET, None, ENDS
    )
    assert done["kind"] == "ESTABLISHED" and done["duration_ns"] == 7_000
    assert done["ts_ns"] == OFFSET + 7_400 and done["conn_id"] == pending["conn_id"]
    assert done["event_id"] == f"n/10/11/{OFFSET + 400}/established" != pending["event_id"]
    assert validate(done, schema("conn_event.avsc"), raise_errors=True)


def test_a_batch_of_samples_reads_back_as_their_socket_data_records() -> None:
    calls = [
        data(),
        data(tid=12, start_mono_ns=2_000, end_mono_ns=2_100, direction=Direction.INGRESS),
        data(start_mono_ns=3_000, end_mono_ns=3_001, source=Source.TLS, nbytes=20, waited_us=7),
    ]
    batch = socket_batch_record(calls, "node-a", OFFSET, "ctr", ENDS)
    assert batch["calls"]["tid"] == [11, 12, 11]
    assert socket_data_of(batch) == [
        socket_data_record(s, "node-a", OFFSET, "ctr", ENDS) for s in calls
    ]


def test_a_batch_carries_each_calls_task_key_and_old_readers_skip_it() -> None:
    """py_task is a SocketBatch column (the asyncio task key of each call): written by this
    collector, read back as [] from a batch an older writer made, and skipped by a reader
    holding the schema from before it (fields are added with a default, at the end)."""
    calls = [data(py_task=0x7F12_3456_7890), data(start_mono_ns=2_000, end_mono_ns=2_001)]
    batch = socket_batch_record(calls, "node-a", OFFSET, None, ENDS)
    assert batch["calls"]["py_task"] == [0x7F12_3456_7890, 0]
    new = schema("socket_batch.avsc")
    assert validate(batch, new, raise_errors=True)
    assert "py_task" not in socket_data_record(calls[0], "node-a", OFFSET, None, ENDS)

    old_text = json.loads((SCHEMAS / "socket_batch.avsc").read_text())
    columns = next(f for f in old_text["fields"] if f["name"] == "calls")["type"]["fields"]
    assert columns.pop()["name"] == "py_task"
    old = parse_schema(old_text)

    def calls_read(writer: Any, reader: Any, datum: dict[str, Any]) -> dict[str, Any]:
        out = io.BytesIO()
        schemaless_writer(out, writer, datum)
        out.seek(0)
        read = schemaless_reader(out, writer, reader)
        assert isinstance(read, dict)
        return dict(read["calls"])

    assert "py_task" not in calls_read(new, old, batch)
    older = {**batch, "calls": {k: v for k, v in batch["calls"].items() if k != "py_task"}}
    assert calls_read(old, new, older)["py_task"] == []
