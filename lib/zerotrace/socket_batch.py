"""One connection's socket calls in one raw record (``zerotrace.raw.SocketBatch``), and back.

Why a batch: a busy server makes tens of thousands of small reads and writes a second, and
per Kafka message the collector pays an Avro header, a produce call and a delivery report,
and repeats the connection's ten fields (node, process, endpoints, ids). A batch carries them
once with the calls of one poll, so that cost is paid per connection and poll, not per call.

The contract (documented in schemas/raw/socket_batch.avsc): call i of a batch is exactly the
``zerotrace.raw.SocketData`` record made of the batch's connection fields, entry i of each
call column (``calls.<field>``) and the event id below; `socket_data_of` builds those
records, so a reader of raw.socket sees one kind of record whatever the writer published.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from zerotrace.errors import PoisonInput

__all__ = [
    "CALL_FIELDS",
    "CONN_FIELDS",
    "call_columns",
    "socket_batch_of",
    "socket_data_of",
    "socket_event_id",
]

CONN_FIELDS: Final = (
    "node_id",
    "pid",
    "process_name",
    "container_id",
    "conn_id",
    "fd",
    "local_addr",
    "local_port",
    "remote_addr",
    "remote_port",
)
# Connection fields added later (with a default): a batch from an older writer may lack them.
OPTIONAL_CONN_FIELDS: Final = ("service",)
CALL_FIELDS: Final = (
    "tid",
    "direction",
    "source",
    "start_ns",
    "end_ns",
    "bytes",
    "payload",
    "payload_truncated",
    "tcp_seq",
    "waited_ns",
)

# An SSL call and the syscall inside it are two observations of the same bytes: their ids
# differ by the "tls-" prefix.
_ID_SUFFIX: Final = {
    ("INGRESS", "SYSCALL"): "in",
    ("EGRESS", "SYSCALL"): "out",
    ("INGRESS", "TLS"): "tls-in",
    ("EGRESS", "TLS"): "tls-out",
    ("INGRESS", "PACKET"): "in",
    ("EGRESS", "PACKET"): "out",
}


def socket_event_id(
    node_id: str, pid: int, tid: int, start_ns: int, direction: str, source: str
) -> str:
    """``{node}/{pid}/{tid}/{start_ns}/{dir}``: the same observation always gets the same id,
    so replays and re-deliveries deduplicate."""
    return f"{node_id}/{pid}/{tid}/{start_ns}/{_ID_SUFFIX[direction, source]}"


def call_columns(batch: Mapping[str, Any]) -> list[Sequence[Any]]:
    """A SocketBatch's call columns in CALL_FIELDS order. Raises PoisonInput when they differ
    in length (no writer of ours makes one)."""
    calls = batch["calls"]
    columns = [calls[name] for name in CALL_FIELDS]
    count = len(columns[0])
    if any(len(column) != count for column in columns):
        lengths = ", ".join(f"{n} {len(c)}" for n, c in zip(CALL_FIELDS, columns, strict=True))
        raise PoisonInput(f"SocketBatch call columns differ in length ({lengths})")
    return columns


def socket_data_of(batch: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The SocketData records a SocketBatch stands for, in its calls' order. Raises
    PoisonInput as `call_columns` does."""
    columns = call_columns(batch)
    conn = {name: batch[name] for name in CONN_FIELDS}
    conn.update((name, batch.get(name)) for name in OPTIONAL_CONN_FIELDS)
    node_id, pid = conn["node_id"], conn["pid"]
    out = []
    for values in zip(*columns, strict=True):
        record = dict(zip(CALL_FIELDS, values, strict=True))
        record.update(conn)
        record["event_id"] = socket_event_id(
            node_id, pid, record["tid"], record["start_ns"], record["direction"], record["source"]
        )
        out.append(record)
    return out


def socket_batch_of(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The SocketBatch of SocketData *records* of one connection (their connection fields
    are taken from the first); the inverse of :func:`socket_data_of`."""
    batch = {name: records[0][name] for name in CONN_FIELDS}
    batch.update((name, records[0].get(name)) for name in OPTIONAL_CONN_FIELDS)
    batch["calls"] = {name: [r.get(name) for r in records] for name in CALL_FIELDS}
    return batch
