"""Feeds: a probe plus what turns its samples into raw records for the bus.

The collector loop only moves `RawRecord`s; each feed knows its probe's samples and which
topic, key and record they become. A feed owns its probe: attach, poll, close.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from zerotrace import names
from zerotrace_collector.cgroup import container_id_of
from zerotrace_collector.probes.fileio import FileOpenProbe
from zerotrace_collector.probes.socket import SocketProbe
from zerotrace_collector.probes.socket_decode import SocketDataSample
from zerotrace_collector.records import file_open_record
from zerotrace_collector.socket_records import conn_event_record, socket_data_record


@dataclass(frozen=True)
class RawRecord:
    topic: str
    key: bytes
    record: str  # Avro full name
    datum: dict[str, Any]

    @property
    def pid(self) -> int:
        return int(self.datum.get("pid") or 0)


class Feed(Protocol):
    name: str
    # True when the kernel side already keeps only the followed processes, so the collector
    # must not filter again in user space (by then a short-lived process may be gone).
    follows: bool

    def attach(self) -> None:
        """Load and attach; raises ProbeUnavailable with one line when it cannot."""
        ...

    def poll(self, timeout_ms: int) -> Iterable[RawRecord]: ...

    def counters(self) -> dict[str, int]:
        """Named counts of what was lost or refused (lost events, malformed, truncated)."""
        ...

    def close(self) -> None: ...


class FileOpenFeed:
    name = "file-open"
    follows = False

    def __init__(self, probe: FileOpenProbe, node_id: str, mono_to_epoch_ns: int) -> None:
        self.probe = probe
        self._node_id = node_id
        self._offset_ns = mono_to_epoch_ns

    def attach(self) -> None:
        self.probe.attach()

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        out = []
        for sample in self.probe.poll(timeout_ms):
            datum = file_open_record(
                sample, self._node_id, self._offset_ns, container_id_of(sample.pid)
            )
            out.append(
                RawRecord(
                    names.RAW_FILEIO.name, str(sample.pid).encode(), names.RAW_FILEIO.record, datum
                )
            )
        return out

    def counters(self) -> dict[str, int]:
        return {"malformed": self.probe.malformed, "lost": self.probe.lost}

    def close(self) -> None:
        self.probe.close()


class SocketFeed:
    """TCP socket data and connection events (syscalls, and TLS plaintext via libssl)."""

    name = "socket"

    def __init__(self, probe: SocketProbe, node_id: str, mono_to_epoch_ns: int) -> None:
        self.probe = probe
        self.follows = probe.follow
        self._node_id = node_id
        self._offset_ns = mono_to_epoch_ns
        self._containers: dict[int, str | None] = {}

    def attach(self) -> None:
        self.probe.attach()

    def _container(self, pid: int) -> str | None:
        if pid not in self._containers:
            if len(self._containers) > 65_536:
                self._containers.clear()  # bound the cache; ids are cheap to read again
            self._containers[pid] = container_id_of(pid)
        return self._containers[pid]

    def poll(self, timeout_ms: int) -> Iterator[RawRecord]:
        """One record at a time, each sample let go once it is converted: a drained ring
        buffer (16 MiB) is held once, not once as samples and once more as records."""
        samples = self.probe.poll(timeout_ms)
        samples.reverse()
        while samples:
            sample = samples.pop()
            endpoints = self.probe.endpoints(sample)
            container = self._container(sample.pid)
            if isinstance(sample, SocketDataSample):
                datum = socket_data_record(
                    sample, self._node_id, self._offset_ns, container, endpoints
                )
                topic, record = names.RAW_SOCKET, names.RAW_SOCKET.record
            else:
                datum = conn_event_record(
                    sample, self._node_id, self._offset_ns, container, endpoints
                )
                topic, record = names.RAW_CONN, names.RAW_CONN.record
            # Keyed by connection: every event of a conversation meets on one partition.
            yield RawRecord(topic.name, str(datum["conn_id"]).encode(), record, datum)

    def counters(self) -> dict[str, int]:
        p = self.probe
        return {
            "lost": p.lost,
            "shed": p.conns_shed,  # connections, whole from the mark on
            "shed_calls": p.calls_shed,
            "malformed": p.malformed,
            "truncated": p.truncated,
            "ciphertext_dropped": p.ciphertext_dropped,
            "filtered": p.filtered,
        }

    def close(self) -> None:
        self.probe.close()
