"""What every faust shell shares: a faust app on our Kafka that moves raw bytes, and the
conversion of faust's message to the bus port's Message. Logic stays in the pure steps."""

from __future__ import annotations

from typing import Any

from zerotrace.bus import Message


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
        broker_commit_interval=1.0,
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


def run_worker(app: Any, loglevel: str = "warning") -> None:
    """Blocks until SIGINT/SIGTERM."""
    import faust

    faust.Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()
