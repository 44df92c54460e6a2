"""Feeds: a probe plus what turns its samples into raw records for the bus.

The collector loop only moves `RawRecord`s; each feed knows its probe's samples and which
topic, key and record they become. A feed owns its probe: attach, poll, close.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from zerotrace import names
from zerotrace_collector.cgroup import container_id_of
from zerotrace_collector.probes.event_layout import ConnKind
from zerotrace_collector.probes.fileio import FileOpenProbe
from zerotrace_collector.probes.fileio_decode import FileRwSample
from zerotrace_collector.probes.socket import SocketProbe
from zerotrace_collector.probes.socket_decode import SocketDataSample
from zerotrace_collector.records import file_open_record, file_rw_record
from zerotrace_collector.redaction import Redactor
from zerotrace_collector.service_cache import ServiceCache, service_of
from zerotrace_collector.socket_records import conn_event_record, socket_batch_record


@dataclass(frozen=True)
class RawRecord:
    topic: str
    key: bytes
    record: str  # Avro full name
    datum: dict[str, Any]
    events: int = 1  # raw events it carries (a SocketBatch: its calls)

    @property
    def pid(self) -> int:
        return int(self.datum.get("pid") or 0)


BATCH_CALLS = 256  # calls in one SocketBatch at most
BATCH_PAYLOAD_BYTES = 256 * 1024  # payload bytes in one at most: far below Kafka's 1 MB


class _Batch:
    """Calls of one connection gathered during a poll, all made by threads of one name."""

    __slots__ = ("comm", "payload_bytes", "samples")

    def __init__(self, comm: str) -> None:
        self.comm = comm
        self.samples: list[SocketDataSample] = []
        self.payload_bytes = 0


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

    def __init__(
        self,
        probe: FileOpenProbe,
        node_id: str,
        mono_to_epoch_ns: int,
        services: ServiceCache | None = None,
    ) -> None:
        self.probe = probe
        self.follows = probe.follow
        self._node_id = node_id
        self._offset_ns = mono_to_epoch_ns
        self._services = services

    def attach(self) -> None:
        self.probe.attach()

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        out = []
        for sample in self.probe.poll(timeout_ms):
            container = container_id_of(sample.pid)
            service = service_of(self._services, sample.pid, sample.comm)
            if isinstance(sample, FileRwSample):
                datum = file_rw_record(sample, self._node_id, self._offset_ns, container, service)
            else:
                datum = file_open_record(sample, self._node_id, self._offset_ns, container, service)
            out.append(
                RawRecord(
                    names.RAW_FILEIO.name, str(sample.pid).encode(), names.RAW_FILEIO.record, datum
                )
            )
        return out

    def counters(self) -> dict[str, int]:
        return {"malformed": self.probe.malformed, "lost": self.probe.lost}

    def follow_pid(self, pid: int) -> None:
        """Observe pid and what it forks from now on (the probe made with follow=True)."""
        self.probe.follow_pid(pid)

    def close(self) -> None:
        self.probe.close()


class SocketFeed:
    """TCP socket data and connection events (syscalls, and TLS plaintext via libssl)."""

    name = "socket"

    def __init__(
        self,
        probe: SocketProbe,
        node_id: str,
        mono_to_epoch_ns: int,
        redactor: Redactor | None = None,
        cpu_ns: Callable[[], int] = time.thread_time_ns,
        services: ServiceCache | None = None,
    ) -> None:
        """cpu_ns: this thread's CPU time, read around each record's redaction (tests pass a
        fake), so what masking costs shows in the counters (`redact_cpu_us`); services: the
        service names of processes (one cache for every feed of a node)."""
        self.probe = probe
        self.follows = probe.follow
        self._cpu_ns = cpu_ns
        self.redact_cpu_ns = 0
        self._node_id = node_id
        self._offset_ns = mono_to_epoch_ns
        self._containers: dict[int, str | None] = {}
        self._services = services
        # Credentials (and content, unless kept) are masked before a record exists: nothing
        # downstream (Kafka, the spool, the embedded store) ever holds them.
        self.redactor = redactor if redactor is not None else Redactor()

    def attach(self) -> None:
        self.probe.attach()

    def _container(self, pid: int) -> str | None:
        if pid not in self._containers:
            if len(self._containers) > 65_536:
                self._containers.clear()  # bound the cache; ids are cheap to read again
            self._containers[pid] = container_id_of(pid)
        return self._containers[pid]

    def poll(self, timeout_ms: int) -> Iterator[RawRecord]:
        """A SocketBatch per connection and poll (a new one where the thread name changes),
        bounded by BATCH_CALLS and BATCH_PAYLOAD_BYTES, and a ConnEvent per connect, accept,
        close or shed. A connection's calls keep the order they were made in: its batch goes
        out before its ConnEvent (a close never overtakes the calls before it) and before a
        batch of another thread name. The others go out at the end of the poll, oldest
        connection first."""
        open_batches: dict[tuple[int, int, int], _Batch] = {}
        for sample in self.probe.poll(timeout_ms):
            if isinstance(sample, SocketDataSample):
                key = (sample.pid, sample.fd, sample.conn_start_ns)
                batch = open_batches.get(key)
                if batch is not None and batch.comm != sample.comm:
                    # Another thread name (process_name is the batch's): the calls so far
                    # go out first, so the connection's calls stay in the order made.
                    yield self._batch_record(batch.samples)
                    batch = None
                if batch is None:
                    batch = open_batches[key] = _Batch(sample.comm)
                # Inline, not methods: this runs for every call a traced server makes.
                batch.samples.append(sample)
                batch.payload_bytes += len(sample.payload)
                if len(batch.samples) >= BATCH_CALLS or batch.payload_bytes >= BATCH_PAYLOAD_BYTES:
                    del open_batches[key]
                    yield self._batch_record(batch.samples)
                continue
            conn = (sample.pid, sample.fd, sample.conn_start_ns)
            closing = open_batches.pop(conn, None)
            if closing is not None:
                yield self._batch_record(closing.samples)
            if sample.kind is ConnKind.CLOSE:
                self.redactor.forget(conn)
            datum = conn_event_record(
                sample,
                self._node_id,
                self._offset_ns,
                self._container(sample.pid),
                self.probe.endpoints(sample),
                service_of(self._services, sample.pid, sample.comm),
            )
            yield RawRecord(
                names.RAW_CONN.name, str(datum["conn_id"]).encode(), names.RAW_CONN.record, datum
            )
        for batch in open_batches.values():
            yield self._batch_record(batch.samples)

    def _batch_record(self, samples: list[SocketDataSample]) -> RawRecord:
        first = samples[0]
        datum = socket_batch_record(
            samples,
            self._node_id,
            self._offset_ns,
            self._container(first.pid),
            self.probe.endpoints(first),
            service_of(self._services, first.pid, first.comm),
        )
        conn = (first.pid, first.fd, first.conn_start_ns)
        redact = self.redactor.redact
        started = self._cpu_ns()
        datum["calls"]["payload"] = [
            redact(conn, (s.direction, s.source), s.payload, len(s.payload) >= s.nbytes)
            for s in samples
        ]
        self.redact_cpu_ns += self._cpu_ns() - started
        # Keyed by connection: every event of a conversation meets on one partition.
        return RawRecord(
            names.RAW_SOCKET.name,
            str(datum["conn_id"]).encode(),
            names.SOCKET_BATCH_RECORD,
            datum,
            events=len(samples),
        )

    def counters(self) -> dict[str, int]:
        p = self.probe
        return {
            "lost": p.lost,
            "shed": p.conns_shed,  # connections, whole from the mark on
            "shed_calls": p.calls_shed,
            "resumed": p.conns_resumed,
            "malformed": p.malformed,
            "truncated": p.truncated,
            "ciphertext_dropped": p.ciphertext_dropped,
            "filtered": p.filtered,
            "port_filtered": p.port_filtered,
            "tls_rebound": p.tls_rebound,
            "unplaced": p.unplaced,
            **self.redactor.counters(),
            "redact_cpu_us": self.redact_cpu_ns // 1000,  # bench.collector_throughput reads it
        }

    def close(self) -> None:
        self.probe.close()
