"""One socket call as the correlator reads it: what HTTP correlation uses of a raw.socket call,
typed, with the connection's fields shared by the calls of a batch. Pure.

Why not the SocketData records (zerotrace/socket_batch.py `socket_data_of`): a SocketBatch
carries one connection's calls as columns, and a 23-field dict per call, with its event id
string, cost 5 of the 12 us per call that decoding a batch took (bench.correlator_throughput).
A call here is one slotted object made straight from the columns, and its event id is made only
when an exchange keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zerotrace.errors import PoisonInput
from zerotrace.socket_batch import call_columns, socket_event_id


@dataclass(slots=True)
class SocketCall:
    # Holds the connection's fields (socket_batch.CONN_FIELDS): the SocketBatch datum for all
    # its calls, or the SocketData record itself.
    conn: Mapping[str, Any]
    tid: int
    direction: str  # INGRESS or EGRESS
    source: str  # SYSCALL, TLS or PACKET
    start_ns: int
    end_ns: int
    size: int  # bytes the call moved; payload may hold fewer (capture size) but never more
    payload: bytes
    tcp_seq: int | None
    waited_ns: int | None
    known_id: str | None = None  # the record's event id, once made or read
    # Egress calls of a CPython thread: its asyncio task key (the batch's py_task column:
    # one value per task while it lives); 0 for none or where the writer did not record it.
    py_task: int = 0

    @property
    def event_id(self) -> str:
        """The SocketData event id of this call (socket_batch.socket_event_id)."""
        if self.known_id is None:
            conn = self.conn
            self.known_id = socket_event_id(
                conn["node_id"], conn["pid"], self.tid, self.start_ns, self.direction, self.source
            )
        return self.known_id


def calls_of_batch(batch: Mapping[str, Any]) -> list[SocketCall]:
    """The calls of a zerotrace.raw.SocketBatch datum, in order. Raises PoisonInput when its
    call columns differ in length."""
    # The batch itself holds the connection's fields (socket_batch.CONN_FIELDS); its columns
    # come in socket_batch.CALL_FIELDS order; payload_truncated is implied by size.
    rows = zip(*call_columns(batch), strict=True)
    calls = [
        SocketCall(
            batch, tid, direction, source, start, end, size, payload[: max(0, size)], seq, waited
        )
        for tid, direction, source, start, end, size, payload, _, seq, waited in rows
    ]
    tasks = batch["calls"].get("py_task")  # optional column: empty or absent = not recorded
    if tasks:
        if len(tasks) != len(calls):
            raise PoisonInput(
                f"SocketBatch py_task has {len(tasks)} entries for {len(calls)} calls"
            )
        for call, task in zip(calls, tasks, strict=True):
            call.py_task = task
    return calls


def call_of_record(record: Mapping[str, Any]) -> SocketCall:
    """A zerotrace.raw.SocketData datum (one call: captures, pcap analysis, tests)."""
    size = int(record["bytes"])
    return SocketCall(
        record,
        int(record.get("tid") or 0),
        record["direction"],
        record["source"],
        int(record["start_ns"]),
        int(record["end_ns"]),
        size,
        bytes(record["payload"])[: max(0, size)],
        record.get("tcp_seq"),
        record.get("waited_ns"),
        str(record.get("event_id", "")),
    )
