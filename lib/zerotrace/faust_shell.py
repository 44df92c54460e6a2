"""The one faust shell: a faust worker over Kafka around any Step (step.py). No logic here.

Delivery (the choice and why, see README "Delivery"): faust publishes on commit
(`stream_publish_on_commit`): what `process` returns for a message is attached to it and
produced, and acknowledged by Kafka, when the commit reaches that message's offset, before the
offset is committed. The shell acknowledges a message to faust only once the step's `held()`
no longer names it, so the committed offset never passes a record that open state (an
exchange in flight, an open window) was built from. A worker that dies, even by SIGKILL, or
that loses its partitions in a rebalance, is followed by one that reads from the committed
offset, rebuilds the same state from the same records and produces what was never published:
nothing in flight is lost, and what the step derives again was not published before.

At a revocation (and at shutdown) the shell therefore does not flush the step: reporting the
exchanges in flight as incomplete would publish a record that the next owner, replaying them
whole, publishes complete. It drops the step's state and what is attached to uncommitted
offsets, and starts a new step; the partitions' next owner, this worker or another, rebuilds.

What `tick` returns is tied to no message: it is produced at once and waited for before any
message it released is acknowledged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from zerotrace.bus import Message
from zerotrace.clock import Clock
from zerotrace.step import Output, Step

TICK_INTERVAL_S = 1.0  # as the embedded runner's tick
COMMIT_INTERVAL_S = 1.0  # the latency the shell adds: outputs go out with the commit


def make_faust_app(app_id: str, bootstrap: str) -> Any:
    import faust

    return faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,  # the query service is the HTTP face; workers need no port
        topic_disable_leader=True,  # no assignor-leader topic: one less thing to create
        autodiscover=False,
        store="memory://",
        producer_acks=-1,  # acks=all, as the collector's producer
        broker_commit_interval=COMMIT_INTERVAL_S,
        stream_publish_on_commit=True,  # outputs acknowledged before their input commits
        # Held messages stay unacknowledged on purpose; a rebalance must not wait for them.
        stream_wait_empty=False,
    )


def bus_message(faust_message: Any) -> Message:
    return Message(
        topic=faust_message.topic,
        partition=faust_message.partition,
        offset=faust_message.offset,
        key=faust_message.key,
        value=faust_message.value or b"",
        timestamp_ms=int(faust_message.timestamp * 1000),
    )


class StepWorker:
    """The state the shell keeps beside the step: messages taken but not yet acknowledged,
    per partition in offset order. Exposed (`app.zerotrace_worker`) for tests and status."""

    def __init__(self, make_step: Callable[[], Step], step: Step | None = None) -> None:
        self._make_step = make_step
        self.step = step or make_step()
        self.unacked: dict[Any, deque[Any]] = {}  # faust TP -> events in offset order
        self.restarts = 0

    def took(self, event: Any) -> None:
        self.unacked.setdefault(event.message.tp, deque()).append(event)

    def release(self) -> int:
        """Acknowledge every message below what the step still holds; returns how many."""
        held = self.step.held()
        released = 0
        for tp, events in self.unacked.items():
            low = held.get((tp.topic, tp.partition))
            while events and (low is None or events[0].message.offset < low):
                events.popleft().ack()
                released += 1
        return released

    def restart(self) -> None:
        """Partitions revoked: forget the state; their next owner rebuilds it from Kafka."""
        self.step = self._make_step()
        self.unacked.clear()
        self.restarts += 1


def step_app(make_step: Callable[[], Step], bootstrap: str, clock: Clock) -> Any:
    """A faust app running the step made by `make_step` (called again after a revocation)."""
    first = make_step()
    app = make_faust_app(first.group, bootstrap)
    worker = StepWorker(make_step, first)
    source = app.topic(*first.input_topics)
    topics: dict[str, Any] = {}

    def topic(name: str) -> Any:
        return topics.setdefault(name, app.topic(name))

    @app.agent(source, name=first.group)
    async def run(stream: Any) -> None:
        # No await suspends between process and attaching its outputs (attaching completes
        # at once), so a revocation never falls between a message and its outputs.
        async for event in stream.noack().events():
            for out in worker.step.process(bus_message(event.message)):
                await topic(out.topic).send(key=out.key, value=out.value)
            worker.took(event)

    @app.timer(interval=TICK_INTERVAL_S)
    async def tick() -> None:
        await _send_now(topic, worker.step.tick(clock.now_ns()))
        worker.release()

    @app.on_partitions_revoked.connect
    async def on_revoked(app_: Any, revoked: Any, **_: Any) -> None:
        # Attached outputs of uncommitted offsets would be published when a later commit of
        # the same partition (after it came back) passes them, beside their replayed twins.
        for tp in revoked:
            app_._attachments._pending.pop(tp, None)
        worker.restart()

    app.zerotrace_worker = worker
    return app


async def _send_now(topic: Callable[[str], Any], outputs: list[Output]) -> None:
    pending = [
        await topic(out.topic).send(key=out.key, value=out.value, force=True) for out in outputs
    ]
    for future in pending:
        await future


def run_worker(app: Any, loglevel: str = "warning") -> None:
    """Blocks until SIGINT/SIGTERM."""
    import faust

    faust.Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()
