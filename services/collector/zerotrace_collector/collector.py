"""The collector loop: probe samples -> raw records -> bus. A thin shell over `records`.

Never slows the traced process: the probe writes to a ring buffer the kernel drops from when
we fall behind (counted by the probe), and this loop never blocks the kernel side.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from zerotrace import names
from zerotrace.bus import Producer
from zerotrace.codec import AvroCodec
from zerotrace.errors import Backpressure, FeatureUnavailable
from zerotrace_collector.cgroup import container_id_of
from zerotrace_collector.probes.fileio_decode import FileOpenSample
from zerotrace_collector.records import file_open_record


class SampleSource(Protocol):
    def attach(self) -> None: ...
    def poll(self, timeout_ms: int) -> list[FileOpenSample]: ...
    def close(self) -> None: ...


def require_root() -> None:
    if os.geteuid() != 0:
        raise FeatureUnavailable(
            "the collector needs root (CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN) to load eBPF "
            "programs: run it with sudo, or in a container with those capabilities"
        )


def monotonic_to_epoch_offset_ns() -> int:
    """bpf_ktime_get_ns() reads CLOCK_MONOTONIC; this offset turns it into epoch time."""
    return time.time_ns() - time.monotonic_ns()


class Collector:
    def __init__(
        self,
        source: SampleSource,
        producer: Producer,
        codec: AvroCodec,
        node_id: str,
        keep: Callable[[FileOpenSample], bool] | None = None,
    ) -> None:
        self._source = source
        self._producer = producer
        self._codec = codec
        self._node_id = node_id
        self._keep = keep
        self._offset_ns = monotonic_to_epoch_offset_ns()
        self.published = 0
        self.backpressure = 0

    def pump(self, timeout_ms: int = 100) -> list[dict[str, Any]]:
        """Move what the probe has to the bus; returns the records published."""
        records = []
        for sample in self._source.poll(timeout_ms):
            if self._keep is not None and not self._keep(sample):
                continue
            record = file_open_record(
                sample, self._node_id, self._offset_ns, container_id_of(sample.pid)
            )
            value = self._codec.encode(names.RAW_FILEIO.record, record)
            key = str(sample.pid).encode()
            while True:
                try:
                    self._producer.produce(names.RAW_FILEIO.name, key, value)
                    break
                except Backpressure:
                    self.backpressure += 1  # wait for the broker rather than drop
                    self._producer.flush(1.0)
            records.append(record)
        self.published += len(records)
        return records
