"""The collector loop: feeds (probe + record builder) -> bus. A thin shell.

Never slows the traced process: probes write to ring buffers the kernel drops from when we
fall behind (each feed counts its losses), and this loop never blocks the kernel side.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from zerotrace.bus import Producer
from zerotrace.codec import AvroCodec
from zerotrace.cpu_slices import CpuSlices, no_pause
from zerotrace.errors import Backpressure, FeatureUnavailable
from zerotrace_collector.feeds import Feed, RawRecord


def require_root() -> None:
    if os.geteuid() != 0:
        raise FeatureUnavailable(
            "the collector needs root (CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN) to load eBPF "
            "programs: run it with sudo, or in a container with those capabilities"
        )


def monotonic_to_epoch_offset_ns() -> int:
    """bpf_ktime_get_ns() reads CLOCK_MONOTONIC; this offset turns it into epoch time."""
    return time.time_ns() - time.monotonic_ns()


@runtime_checkable
class CountingProducer(Protocol):
    """A producer with losses of its own to show (the spooling producer's full spool): its
    counters join the collector's, unprefixed."""

    def counters(self) -> Mapping[str, int]: ...


class Collector:
    def __init__(
        self,
        feeds: Sequence[Feed],
        producer: Producer,
        codec: AvroCodec,
        keep: Callable[[RawRecord], bool] | None = None,
        slices: CpuSlices | None = None,
    ) -> None:
        """slices: the loop's pause point, called after each record (zerotrace.cpu_slices: the
        loop steps aside after each slice of its CPU time, so a batch never holds a busy
        node's CPU for long); its pauses are counted as `cpu_pauses`."""
        self._feeds = list(feeds)
        self._slices = slices
        self._producer = producer
        self._codec = codec
        self._keep = keep
        self.published = 0  # records (Kafka messages)
        self.events = 0  # raw events in them: a SocketBatch carries many calls
        self.backpressure = 0

    def pump(self, timeout_ms: int = 100) -> int:
        """Move what the feeds have to the bus; returns how many records were published. The
        timeout is shared: the first feed may wait for it, the others are only drained.
        Records are encoded and handed over one by one, none kept."""
        published = 0
        pause = self._slices.point if self._slices is not None else no_pause
        for i, feed in enumerate(self._feeds):
            keep = None if feed.follows else self._keep
            for raw in feed.poll(timeout_ms if i == 0 else 0):
                if keep is not None and not keep(raw):
                    continue
                value = self._codec.encode(raw.record, raw.datum)
                while True:
                    try:
                        self._producer.produce(raw.topic, raw.key, value)
                        break
                    except Backpressure:
                        self.backpressure += 1  # wait for the broker rather than drop
                        self._producer.flush(1.0)
                published += 1
                self.published += 1  # at once: a later record's failure must not hide it
                self.events += raw.events
                pause()
        return published

    def counters(self) -> dict[str, int]:
        out = {
            "published": self.published,
            "events": self.events,
            "backpressure": self.backpressure,
        }
        if self._slices is not None:
            out["cpu_pauses"] = self._slices.pauses
        if isinstance(self._producer, CountingProducer):
            out.update(self._producer.counters())
        for feed in self._feeds:
            for name, count in feed.counters().items():
                out[f"{feed.name}.{name}"] = count
        return out
