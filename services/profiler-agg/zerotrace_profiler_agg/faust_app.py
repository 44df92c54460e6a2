"""profiler-agg as a faust worker: raw.stack -> WindowFolder -> derived.profile.

No probe produces raw.stack yet (that is the profiling issue); the worker runs so that the
topology is complete and the fold is exercised by tests through the same step.
"""

from __future__ import annotations

from typing import Any

from zerotrace import names
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.deadletter import dead_letter
from zerotrace.errors import PoisonInput
from zerotrace.faust_shell import bus_message, make_faust_app
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_profiler_agg.windows import WindowFolder


def build_app(bootstrap: str) -> Any:
    app = make_faust_app(names.GROUP_PROFILER_AGG, bootstrap)
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(bootstrap))
    folder = WindowFolder()
    clock = SystemClock()
    samples = app.topic(names.RAW_STACK.name)
    profiles = app.topic(names.DERIVED_PROFILE.name)
    dlq = app.topic(names.DEAD_LETTER.name)

    @app.agent(samples, name="fold")
    async def fold(stream: Any) -> None:
        async for event in stream.events():
            message = bus_message(event.message)
            try:
                record, datum = codec.decode(message.value)
                if record != names.RAW_STACK.record:
                    raise PoisonInput(f"{message.topic} carries {record}")
            except PoisonInput as exc:
                _t, key, value = dead_letter(
                    codec, message, names.GROUP_PROFILER_AGG, exc.reason, clock.now_ns()
                )
                await dlq.send(key=key, value=value)
                continue
            for window in folder.add(datum):
                await profiles.send(
                    key=window["service"].encode(),
                    value=codec.encode(names.DERIVED_PROFILE.record, window),
                )

    return app
