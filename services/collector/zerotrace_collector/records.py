"""Probe samples as raw records (pure): epoch timestamps, node and container ids, event ids."""

from __future__ import annotations

from typing import Any

from zerotrace_collector.probes.fileio_decode import FileOpenSample, FileRwSample


def file_open_record(
    sample: FileOpenSample,
    node_id: str,
    mono_to_epoch_ns: int,
    container_id: str | None,
    service: str | None = None,
) -> dict[str, Any]:
    """mono_to_epoch_ns: add to a CLOCK_MONOTONIC time (what bpf_ktime_get_ns returns) to get
    ns since the epoch; measured once by the collector, so records stay deterministic.
    service: the process's service name (zerotrace.service_identity), None when not named."""
    start_ns = sample.start_mono_ns + mono_to_epoch_ns
    return {
        # pid, tid and the entry time in ns identify one syscall on one node.
        "event_id": f"{node_id}/{sample.pid}/{sample.tid}/{start_ns}/open",
        "node_id": node_id,
        "pid": sample.pid,
        "tid": sample.tid,
        "process_name": sample.comm,
        "service": service,
        "container_id": container_id,
        "cgroup_id": sample.cgroup_id,
        "op": "OPEN",
        "path": sample.path,
        "result": sample.ret,
        "flags": sample.flags,
        "start_ns": start_ns,
        "end_ns": sample.end_mono_ns + mono_to_epoch_ns,
    }


def file_rw_record(
    sample: FileRwSample,
    node_id: str,
    mono_to_epoch_ns: int,
    container_id: str | None,
    service: str | None = None,
) -> dict[str, Any]:
    """A read or write (fileio.c ZT_FILE_RW) as a raw.fileio record: result the bytes moved or
    -errno, path the one its fd was opened with, flags 0."""
    start_ns = sample.start_mono_ns + mono_to_epoch_ns
    op = sample.op
    return {
        "event_id": f"{node_id}/{sample.pid}/{sample.tid}/{start_ns}/{op.lower()}",
        "node_id": node_id,
        "pid": sample.pid,
        "tid": sample.tid,
        "process_name": sample.comm,
        "service": service,
        "container_id": container_id,
        "cgroup_id": sample.cgroup_id,
        "op": op,
        "path": sample.path,
        "result": sample.ret,
        "flags": 0,
        "start_ns": start_ns,
        "end_ns": sample.end_mono_ns + mono_to_epoch_ns,
    }
