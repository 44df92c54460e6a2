"""Socket-probe samples as raw records (pure): ``zerotrace.raw.SocketBatch`` (what the
collector publishes), ``SocketData`` (one call) and ``ConnEvent``.

Timestamps: add *mono_to_epoch_ns* (measured once by the collector) to the probe's
CLOCK_MONOTONIC times, so a replay of the same samples gives the same records.

Ids:
  event_id  ``{node}/{pid}/{tid}/{start_ns}/{dir}``, dir ``in``/``out`` for syscalls,
            ``tls-in``/``tls-out`` for SSL calls (an SSL call and the syscall inside it
            are two observations), ``connect``/``accept``/``close`` for ConnEvent.
  conn_id   ``{node}/{pid}/{fd}/{conn_start_ns}``: the same for every record of one
            connection, from connect/accept (or discovery in /proc) to close.
``service``: the process's service name (zerotrace.service_identity), given by the feed.
``tcp_seq``: the sequence number of the call's first byte for syscall events when the
probe found the kernel's struct offsets (BTF); null for SSL calls (their bytes are
plaintext, the sequence numbers count ciphertext) and where the kernel has no BTF.
``py_task``: a SocketBatch column only (SocketData, one call as captures make it, has none):
each call's asyncio task key (socket_decode.SocketDataSample.py_task), 0 for none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from zerotrace.socket_batch import socket_event_id
from zerotrace_collector.probes.event_layout import ConnKind, Direction, Source
from zerotrace_collector.probes.socket_decode import ConnSample, SocketDataSample
from zerotrace_collector.proc_net import Endpoints

__all__ = [
    "conn_event_record",
    "conn_id",
    "socket_batch_record",
    "socket_calls",
    "socket_data_record",
]


def conn_id(node_id: str, pid: int, fd: int, conn_start_mono_ns: int, mono_to_epoch_ns: int) -> str:
    return f"{node_id}/{pid}/{fd}/{conn_start_mono_ns + mono_to_epoch_ns}"


# Enum member -> name by dict: `member.name` goes through a descriptor, ~0.4 us a call, and
# this runs twice per event.
_DIRECTION_NAMES: Final = {member: member.name for member in Direction}
_SOURCE_NAMES: Final = {member: member.name for member in Source}


def _endpoints(endpoints: Endpoints) -> dict[str, Any]:
    return {
        "local_addr": endpoints.local_addr,
        "local_port": endpoints.local_port,
        "remote_addr": endpoints.remote_addr,
        "remote_port": endpoints.remote_port,
    }


def _connection(
    sample: SocketDataSample,
    node_id: str,
    mono_to_epoch_ns: int,
    container_id: str | None,
    endpoints: Endpoints,
    service: str | None,
) -> dict[str, Any]:
    return {
        "node_id": node_id,
        "pid": sample.pid,
        "process_name": sample.comm,
        "service": service,
        "container_id": container_id,
        "conn_id": conn_id(node_id, sample.pid, sample.fd, sample.conn_start_ns, mono_to_epoch_ns),
        "fd": sample.fd,
        **_endpoints(endpoints),
    }


def socket_calls(
    samples: Sequence[SocketDataSample], mono_to_epoch_ns: int
) -> dict[str, list[Any]]:
    """The calls' own fields as columns (zerotrace.raw.SocketCalls): entry i is call i."""
    return {
        "tid": [s.tid for s in samples],
        "direction": [_DIRECTION_NAMES[s.direction] for s in samples],
        "source": [_SOURCE_NAMES[s.source] for s in samples],
        "start_ns": [s.start_mono_ns + mono_to_epoch_ns for s in samples],
        "end_ns": [s.end_mono_ns + mono_to_epoch_ns for s in samples],
        "bytes": [s.nbytes for s in samples],
        "payload": [s.payload for s in samples],
        "payload_truncated": [len(s.payload) < s.nbytes for s in samples],
        "tcp_seq": [s.tcp_seq for s in samples],
        "waited_ns": [None if s.waited_us is None else s.waited_us * 1000 for s in samples],
        "py_task": [s.py_task for s in samples],
    }


def socket_batch_record(
    samples: Sequence[SocketDataSample],
    node_id: str,
    mono_to_epoch_ns: int,
    container_id: str | None,
    endpoints: Endpoints,
    service: str | None = None,
) -> dict[str, Any]:
    """zerotrace.raw.SocketBatch: *samples* are calls of one connection and one comm, in
    order (the caller groups them); the connection's fields are taken from the first."""
    return {
        **_connection(samples[0], node_id, mono_to_epoch_ns, container_id, endpoints, service),
        "calls": socket_calls(samples, mono_to_epoch_ns),
    }


def socket_data_record(
    sample: SocketDataSample,
    node_id: str,
    mono_to_epoch_ns: int,
    container_id: str | None,
    endpoints: Endpoints,
    service: str | None = None,
) -> dict[str, Any]:
    """zerotrace.raw.SocketData: one call (what call i of a SocketBatch reads back as)."""
    columns = socket_calls([sample], mono_to_epoch_ns)
    del columns["py_task"]  # not a SocketData field
    call = {name: column[0] for name, column in columns.items()}
    event_id = socket_event_id(
        node_id, sample.pid, sample.tid, call["start_ns"], call["direction"], call["source"]
    )
    return {
        "event_id": event_id,
        **_connection(sample, node_id, mono_to_epoch_ns, container_id, endpoints, service),
        **call,
    }


# Kinds whose duration_ns is their syscall's (connect), calls' (TLS handshake) or
# connect()-to-established (a non-blocking connect) time.
_TIMED = ("CONNECT", "TLS_HANDSHAKE", "ESTABLISHED")
EINPROGRESS: Final = 115  # connect()'s -errno on a non-blocking socket


def conn_event_record(
    sample: ConnSample,
    node_id: str,
    mono_to_epoch_ns: int,
    container_id: str | None,
    endpoints: Endpoints,
    service: str | None = None,
) -> dict[str, Any]:
    """ts_ns is the syscall's return (ESTABLISHED: the state change); duration_ns, for CONNECT,
    the syscall's duration, and 0 for a non-blocking connect (it returned -EINPROGRESS at once:
    its time is not known then; an ESTABLISHED record brings it, from connect()'s entry to the
    established state, where the probe could follow it); for TLS_HANDSHAKE, from the first
    SSL_do_handshake entry to the successful return."""
    start_ns = sample.start_mono_ns + mono_to_epoch_ns
    kind = sample.kind.name
    timed = kind in _TIMED and not (sample.kind is ConnKind.CONNECT and sample.ret == -EINPROGRESS)
    return {
        "event_id": f"{node_id}/{sample.pid}/{sample.tid}/{start_ns}/{kind.lower()}",
        "node_id": node_id,
        "pid": sample.pid,
        "tid": sample.tid,
        "process_name": sample.comm,
        "service": service,
        "container_id": container_id,
        "conn_id": conn_id(node_id, sample.pid, sample.fd, sample.conn_start_ns, mono_to_epoch_ns),
        "fd": sample.fd,
        "kind": kind,
        "ts_ns": sample.end_mono_ns + mono_to_epoch_ns,
        "duration_ns": sample.end_mono_ns - sample.start_mono_ns if timed else 0,
        **_endpoints(endpoints),
    }
