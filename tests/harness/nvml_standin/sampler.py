"""A GPU metrics collector in a process of its own, for the NVML stand-in test: the NVML
adapter (pynvml, which loads whatever libnvidia-ml.so.1 the dynamic loader finds) under the
GPU metrics feed and the collector loop, each record encoded by the real Avro codec and
decoded again. Prints one JSON line per record, {"emitted_ns", "topic", "key", "record",
"datum"}, a line {"note": ...} per note and, at the end, {"counters": ...}.

    python -m tests.harness.nvml_standin.sampler --duration 2 --interval 0.5
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_collector.collector import Collector
from zerotrace_collector.gpu_metrics_feed import GpuMetricsFeed
from zerotrace_collector.nvml_devices import NvmlDevices


def say(obj: object) -> None:
    print(json.dumps(obj), flush=True)


class DecodingProducer:
    """The bus end: decodes what the collector encoded and prints it, with the time."""

    def __init__(self, codec: AvroCodec) -> None:
        self._codec = codec

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        record, datum = self._codec.decode(value)
        say(
            {
                "emitted_ns": time.time_ns(),
                "topic": topic,
                "key": (key or b"").decode(),
                "record": record,
                "datum": datum,
            }
        )

    def flush(self, timeout_s: float) -> int:
        return 0

    @property
    def failed(self) -> int:
        return 0

    def close(self) -> None:
        pass


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=2.0)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--node", default="node-a")
    args = p.parse_args()
    clock = SystemClock()

    def note(line: str) -> None:
        say({"note": line})

    source = NvmlDevices(clock, note=note)
    feed = GpuMetricsFeed(source, args.node, clock, interval_s=args.interval, note=note)
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    collector = Collector([feed], DecodingProducer(codec), codec)
    feed.attach()
    started = time.monotonic()
    try:
        while time.monotonic() - started < args.duration:
            collector.pump(100)
    finally:
        feed.close()
    say({"counters": collector.counters()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
