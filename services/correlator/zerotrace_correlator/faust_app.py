"""The correlator as a faust worker: a thin shell around CorrelatorStep."""

from __future__ import annotations

from typing import Any

from zerotrace import names
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.faust_shell import bus_message, make_faust_app
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_correlator.pipeline import INPUT_TOPICS, CorrelatorStep


def build_app(bootstrap: str) -> Any:
    app = make_faust_app(names.GROUP_CORRELATOR, bootstrap)
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(bootstrap))
    step = CorrelatorStep(codec, SystemClock())
    raw = app.topic(*INPUT_TOPICS)
    outputs: dict[str, Any] = {}

    @app.agent(raw, name="correlate")
    async def correlate(stream: Any) -> None:
        async for event in stream.events():
            for out in step.process(bus_message(event.message)):
                topic = outputs.setdefault(out.topic, app.topic(out.topic))
                await topic.send(key=out.key, value=out.value)

    @app.timer(interval=1.0)
    async def tick() -> None:
        for out in step.tick():
            topic = outputs.setdefault(out.topic, app.topic(out.topic))
            await topic.send(key=out.key, value=out.value)

    app.zerotrace_step = step
    return app
