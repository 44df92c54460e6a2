"""The correlator's view of a socket call (zerotrace_correlator/socket_call.py): a batch's calls
say exactly what the SocketData records of socket_data_of say, ids included, and a single
record reads the same way."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_socket_batch import CONN
from zerotrace.errors import PoisonInput
from zerotrace.socket_batch import socket_batch_of, socket_data_of
from zerotrace_correlator.socket_call import SocketCall, call_of_record, calls_of_batch

pytestmark = pytest.mark.unit


def record(n: int, direction: str, source: str, size: int, payload: bytes) -> dict[str, object]:
    return {
        **CONN,
        "tid": 20 + n % 3,
        "direction": direction,
        "source": source,
        "start_ns": 1_000 + n,
        "end_ns": 1_500 + n,
        "bytes": size,
        "payload": payload,
        "payload_truncated": len(payload) < size,
        "tcp_seq": n * 7 if source == "SYSCALL" else None,
        "waited_ns": n * 3 if direction == "INGRESS" else None,
    }


def said(call: SocketCall) -> tuple[object, ...]:
    return (
        call.event_id, call.tid, call.direction, call.source, call.start_ns, call.end_ns,
        call.size, call.payload, call.tcp_seq, call.waited_ns, call.conn["conn_id"],
        call.conn["process_name"],
    )  # fmt: skip


def said_by_record(datum: dict[str, object]) -> tuple[object, ...]:
    size = int(str(datum["bytes"]))
    payload = datum["payload"]
    assert isinstance(payload, bytes)
    return (
        datum["event_id"], datum["tid"], datum["direction"], datum["source"],
        datum["start_ns"], datum["end_ns"], size, payload[: max(0, size)], datum["tcp_seq"],
        datum["waited_ns"], datum["conn_id"], datum["process_name"],
    )  # fmt: skip


calls_strategy = st.lists(
    st.tuples(
        st.sampled_from(["INGRESS", "EGRESS"]),
        st.sampled_from(["SYSCALL", "TLS"]),
        st.integers(0, 40),
        st.binary(max_size=40),
    ),
    min_size=1,
    max_size=12,
)


@given(calls_strategy)
def test_a_batchs_calls_say_what_its_socket_data_records_say(
    specs: list[tuple[str, str, int, bytes]],
) -> None:
    records = [record(n, *spec) for n, spec in enumerate(specs)]
    batch = socket_batch_of(records)
    assert [said(call) for call in calls_of_batch(batch)] == [
        said_by_record(datum) for datum in socket_data_of(batch)
    ]


def test_a_single_record_keeps_its_own_event_id_and_is_cut_to_its_size() -> None:
    datum = {**record(1, "INGRESS", "PACKET", 4, b"HTTP/1.1"), "event_id": "capture/7"}
    call = call_of_record(datum)
    assert call.event_id == "capture/7"
    assert call.payload == b"HTTP" and call.size == 4 and call.conn is datum


def test_a_batch_whose_columns_differ_in_length_is_poison() -> None:
    batch = socket_batch_of([record(0, "EGRESS", "SYSCALL", 3, b"GET")])
    batch["calls"]["end_ns"].append(9)
    with pytest.raises(PoisonInput, match="differ in length"):
        calls_of_batch(batch)


def test_task_keys_come_from_the_batch_column_when_it_was_recorded() -> None:
    records = [record(n, "EGRESS", "SYSCALL", 3, b"GET") for n in range(3)]
    batch = socket_batch_of(records)
    assert [c.py_task for c in calls_of_batch(batch)] == [0, 0, 0]  # no column: not recorded
    batch["calls"]["py_task"] = []  # the schema's default: not recorded either
    assert [c.py_task for c in calls_of_batch(batch)] == [0, 0, 0]
    batch["calls"]["py_task"] = [0x7F00_0010, 0, 0x7F00_0010]
    assert [c.py_task for c in calls_of_batch(batch)] == [0x7F00_0010, 0, 0x7F00_0010]
    assert call_of_record(records[0]).py_task == 0
    batch["calls"]["py_task"] = [1, 2]
    with pytest.raises(PoisonInput, match="py_task has 2 entries for 3 calls"):
        calls_of_batch(batch)
