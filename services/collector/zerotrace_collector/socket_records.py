"""Socket-probe samples as raw records (pure): ``zerotrace.raw.SocketData`` and ``ConnEvent``.

Timestamps: add *mono_to_epoch_ns* (measured once by the collector) to the probe's
CLOCK_MONOTONIC times, so a replay of the same samples gives the same records.

Ids:
  event_id  ``{node}/{pid}/{tid}/{start_ns}/{dir}``, dir ``in``/``out`` for syscalls,
            ``tls-in``/``tls-out`` for SSL calls (an SSL call and the syscall inside it
            are two observations), ``connect``/``accept``/``close`` for ConnEvent.
  conn_id   ``{node}/{pid}/{fd}/{conn_start_ns}``: the same for every record of one
            connection, from connect/accept (or discovery in /proc) to close.
``tcp_seq``: the sequence number of the call's first byte for syscall events when the
probe found the kernel's struct offsets (BTF); null for SSL calls (their bytes are
plaintext, the sequence numbers count ciphertext) and where the kernel has no BTF.
"""

from __future__ import annotations

from typing import Any

from zerotrace_collector.probes.event_layout import Direction, Source
from zerotrace_collector.probes.socket_decode import ConnSample, SocketDataSample
from zerotrace_collector.proc_net import Endpoints

__all__ = ["conn_event_record", "conn_id", "socket_data_record"]


def conn_id(node_id: str, pid: int, fd: int, conn_start_mono_ns: int, mono_to_epoch_ns: int) -> str:
    return f"{node_id}/{pid}/{fd}/{conn_start_mono_ns + mono_to_epoch_ns}"


def _endpoints(endpoints: Endpoints) -> dict[str, Any]:
    return {
        "local_addr": endpoints.local_addr,
        "local_port": endpoints.local_port,
        "remote_addr": endpoints.remote_addr,
        "remote_port": endpoints.remote_port,
    }


def socket_data_record(
    sample: SocketDataSample,
    node_id: str,
    mono_to_epoch_ns: int,
    container_id: str | None,
    endpoints: Endpoints,
) -> dict[str, Any]:
    start_ns = sample.start_mono_ns + mono_to_epoch_ns
    direction = "in" if sample.direction is Direction.INGRESS else "out"
    if sample.source is Source.TLS:
        direction = f"tls-{direction}"
    return {
        "event_id": f"{node_id}/{sample.pid}/{sample.tid}/{start_ns}/{direction}",
        "node_id": node_id,
        "pid": sample.pid,
        "tid": sample.tid,
        "process_name": sample.comm,
        "container_id": container_id,
        "conn_id": conn_id(node_id, sample.pid, sample.fd, sample.conn_start_ns, mono_to_epoch_ns),
        "fd": sample.fd,
        "direction": sample.direction.name,
        "source": sample.source.name,
        "start_ns": start_ns,
        "end_ns": sample.end_mono_ns + mono_to_epoch_ns,
        "bytes": sample.nbytes,
        "payload": sample.payload,
        "payload_truncated": sample.truncated,
        "tcp_seq": sample.tcp_seq,
        "waited_ns": None if sample.waited_us is None else sample.waited_us * 1000,
        **_endpoints(endpoints),
    }


def conn_event_record(
    sample: ConnSample,
    node_id: str,
    mono_to_epoch_ns: int,
    container_id: str | None,
    endpoints: Endpoints,
) -> dict[str, Any]:
    """ts_ns is the syscall's return; duration_ns, for CONNECT, the syscall's duration
    (a non-blocking connect returns at once with -EINPROGRESS, so it is ~0 there)."""
    start_ns = sample.start_mono_ns + mono_to_epoch_ns
    kind = sample.kind.name
    return {
        "event_id": f"{node_id}/{sample.pid}/{sample.tid}/{start_ns}/{kind.lower()}",
        "node_id": node_id,
        "pid": sample.pid,
        "tid": sample.tid,
        "process_name": sample.comm,
        "container_id": container_id,
        "conn_id": conn_id(node_id, sample.pid, sample.fd, sample.conn_start_ns, mono_to_epoch_ns),
        "fd": sample.fd,
        "kind": kind,
        "ts_ns": sample.end_mono_ns + mono_to_epoch_ns,
        "duration_ns": sample.end_mono_ns - sample.start_mono_ns if kind == "CONNECT" else 0,
        **_endpoints(endpoints),
    }
