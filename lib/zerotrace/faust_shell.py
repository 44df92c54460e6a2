"""The one faust shell: a faust worker over Kafka around any Step (step.py). No logic here.

faust runs the worker: group membership, partition assignment, fetching, the agent and the
timer on one event loop. Delivery is the shell's own, with a Kafka transaction (aiokafka's
transactional producer, which faust itself is built on) once a second:

- the outputs of every message processed since the last transaction, and of the ticks;
- each input partition's offset, committed no further than the step's `held()` allows (the
  first record of an exchange in flight, of a window still open);
- as that offset's metadata, the last offset processed on the partition (its *progress*).

All three commit or none does. faust itself never commits (nothing is acknowledged to it).
A worker that dies, even by SIGKILL, or that loses its partitions in a rebalance, is followed
by one that reads each partition from the committed offset and rebuilds the same state from
the same records; what it derives from records at or below the progress was published by its
predecessor, so it is dropped. Nothing in flight is lost and nothing is published twice
(tests/unit/test_step.py checks this for every commit point). A SIGTERM is no different: the
outputs of the last second are derived again by the next owner, complete; the step is never
flushed into incomplete records that another worker would publish complete.

Readers of the derived topics must read committed records only (the default of
confluent-kafka and of the indexer); an aborted transaction's records stay invisible.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zerotrace.bus import Message
from zerotrace.clock import Clock
from zerotrace.kafka_security import PLAINTEXT, KafkaSecurity
from zerotrace.step import Output, Step
from zerotrace.step_worker import StepWorker

TICK_INTERVAL_S = 1.0  # as the embedded runner's tick; a transaction follows each tick
# A worker killed mid-transaction leaves it open, and read_committed readers wait behind it
# until the broker aborts it: this long at most.
TRANSACTION_TIMEOUT_MS = 10_000


def make_faust_app(
    app_id: str, bootstrap: str, datadir: Path, security: KafkaSecurity = PLAINTEXT
) -> Any:
    import faust

    datadir.mkdir(parents=True, exist_ok=True)
    return faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        broker_credentials=faust_credentials(security),  # faust's consumer and producer
        datadir=str(datadir / app_id),  # faust's own files, out of the working directory
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,  # the query service is the HTTP face; workers need no port
        topic_disable_leader=True,  # no assignor-leader topic: one less thing to create
        autodiscover=False,
        store="memory://",
        producer_acks=-1,  # acks=all, as the collector's producer
        stream_wait_empty=False,  # nothing is acknowledged to faust: never wait for it
        # faust commits nothing here (the shell's transactions do): no livelock warnings.
        broker_commit_livelock_soft_timeout=10**9,
    )


def faust_credentials(security: KafkaSecurity) -> Any:
    """faust's broker credentials for `security` (None for PLAINTEXT). faust hands them to
    aiokafka as `security_protocol`, `ssl_context` and `sasl_*`, the same arguments as
    KafkaSecurity.aiokafka() gives the shell's own clients."""
    import faust

    if not security.sasl:
        return faust.SSLCredentials(security.ssl_context()) if security.tls else None
    return faust.SASLCredentials(
        username=security.sasl_username,
        password=security.sasl_password,
        ssl_context=security.ssl_context() if security.tls else None,  # None: SASL_PLAINTEXT
        mechanism=security.sasl_mechanism,
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


def step_app(
    make_step: Callable[[], Step],
    bootstrap: str,
    clock: Clock,
    datadir: Path,
    security: KafkaSecurity = PLAINTEXT,
) -> Any:
    """A faust app running the step made by `make_step` (made again at every assignment);
    faust keeps its files under datadir. Every Kafka client of the app uses `security`."""
    first = make_step()
    app = make_faust_app(first.group, bootstrap, datadir, security)
    worker = StepWorker(make_step, first)
    transactions = _Transactions(bootstrap, first.group, security)
    # Set while the step is the one made for the current assignment. faust's recovery service
    # resumes fetching by itself, while on_assigned may still be reading the progress (a
    # round trip, longer over TLS): a message taken meanwhile by the outgoing step would be
    # lost with it, its partition read on from beyond it. Closed at start and at a revoke.
    step_ready = asyncio.Event()

    @app.agent(app.topic(*first.input_topics), name=first.group)
    async def run(stream: Any) -> None:
        async for event in stream.noack().events():
            if not step_ready.is_set():
                await step_ready.wait()
                if event.message.generation_id != app.consumer_generation_id:
                    continue  # fetched for an assignment since replaced: read again later
            worker.process(bus_message(event.message))

    @app.timer(interval=TICK_INTERVAL_S)
    async def tick() -> None:
        worker.tick(clock.now_ns())
        try:
            await transactions.commit(*worker.commit_plan())
        except Exception as exc:  # the outputs are gone with the transaction: start over
            await app.crash(exc)

    @app.on_partitions_revoked.connect
    async def on_revoked(app_: Any, revoked: Any, **_: Any) -> None:
        step_ready.clear()

    @app.on_partitions_assigned.connect
    async def on_assigned(app_: Any, assigned: Any, **_: Any) -> None:
        step_ready.clear()
        wheres = [(tp.topic, tp.partition) for tp in assigned]
        worker.restart(await transactions.progress(wheres))
        step_ready.set()

    app.zerotrace_worker = worker
    return app


class _Transactions:
    """The transactional producer (started on first use, inside faust's event loop) and the
    read of a group's recorded progress."""

    def __init__(self, bootstrap: str, group: str, security: KafkaSecurity = PLAINTEXT) -> None:
        self._bootstrap = bootstrap
        self._group = group
        self._security = security
        self._producer: Any = None

    async def commit(
        self, outputs: list[Output], offsets: dict[tuple[str, int], tuple[int, int]]
    ) -> None:
        """Raises on failure: the worker then stops, and its successor replays."""
        from aiokafka.structs import OffsetAndMetadata, TopicPartition

        if not outputs and not offsets:
            return
        producer = await self._started()
        async with producer.transaction():
            for out in outputs:
                await producer.send(out.topic, value=out.value, key=out.key)
            commits = {
                TopicPartition(topic, partition): OffsetAndMetadata(offset, str(progress))
                for (topic, partition), (offset, progress) in offsets.items()
            }
            if commits:
                await producer.send_offsets_to_transaction(commits, self._group)

    async def progress(self, wheres: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The progress committed with each partition's offset (none: nothing published).
        Read with aiokafka's admin client: confluent-kafka 2.16 returns offset metadata with
        stray bytes after it."""
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.structs import TopicPartition

        if not wheres:
            return {}
        admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, **self._security.aiokafka())
        await admin.start()
        try:
            partitions = [TopicPartition(t, p) for t, p in wheres]
            committed = await admin.list_consumer_group_offsets(self._group, partitions=partitions)
        finally:
            await admin.close()
        return {
            (tp.topic, tp.partition): int(meta.metadata)
            for tp, meta in committed.items()
            if meta.offset >= 0 and (meta.metadata or "").lstrip("-").isdigit()
        }

    async def _started(self) -> Any:
        if self._producer is None:
            from aiokafka import AIOKafkaProducer

            # A new id per worker process: a dead worker's open transaction is aborted by the
            # broker after the timeout instead of fencing a live namesake.
            self._producer = AIOKafkaProducer(
                bootstrap_servers=self._bootstrap,
                transactional_id=f"{self._group}-{uuid.uuid4().hex}",
                transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                enable_idempotence=True,
                acks="all",
                **self._security.aiokafka(),
            )
            await self._producer.start()
        return self._producer


def run_worker(app: Any, loglevel: str = "warning") -> None:
    """Blocks until SIGINT/SIGTERM."""
    import faust

    faust.Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()
