"""profiler-agg as a faust worker: raw.stack + raw.gpu -> ProfileStep -> derived.profile.

One agent over both topics and one timer share ONE step, so the live-allocation table and the
windows are in one place. faust runs agents and timers on one event loop, so the step is never
entered twice at once.

State lives in memory: faust commits offsets of messages already folded, so a restarted worker
loses the windows that were open (at most a window plus the lateness) and starts with an empty
allocation table (frees of older allocations then count as unknown frees).
"""

from __future__ import annotations

from typing import Any

from zerotrace import settings
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.faust_shell import bus_message, make_faust_app
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.step import Output
from zerotrace_profiler_agg.profile_step import INPUT_TOPICS, ProfileStep
from zerotrace_profiler_agg.settings import ProfilerAggSettings


def build_app(bootstrap: str, agg: ProfilerAggSettings | None = None) -> Any:
    agg = agg or settings.load(ProfilerAggSettings)
    app = make_faust_app(agg.group, bootstrap)
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(bootstrap))
    step = ProfileStep(codec, agg)
    clock = SystemClock()
    raw = app.topic(*INPUT_TOPICS)
    topics: dict[str, Any] = {}

    async def send(outputs: list[Output]) -> None:
        for out in outputs:
            topic = topics.setdefault(out.topic, app.topic(out.topic))
            await topic.send(key=out.key, value=out.value)

    @app.agent(raw, name="fold")
    async def fold(stream: Any) -> None:
        async for event in stream.events():
            await send(step.process(bus_message(event.message)))

    @app.timer(interval=1.0)
    async def tick() -> None:
        await send(step.tick(clock.now_ns()))

    app.zerotrace_step = step
    return app
