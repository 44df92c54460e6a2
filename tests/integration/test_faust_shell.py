"""The faust shell's delivery (lib/zerotrace/faust_shell.py) with the real Kafka, faust workers
and OpenSearch: a correlator worker killed with SIGKILL (or stopped with SIGTERM) in the middle
of 200 streaming conversations, then started again, leaves exactly one LlmRequest per
conversation in derived.llm and in OpenSearch; a profiler-agg worker killed mid-way leaves each
profile window exactly once, with every sample in it.

The input is written straight to the raw topics (known records, no eBPF in between), tagged
with this run's node id, so records of other tests on the same topics do not count."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.llm_fixtures import free_port
from tests.harness.llm_conversations import conversation
from tests.harness.services import Service
from tests.unit.test_profile_step import sample
from zerotrace import names
from zerotrace.bus_kafka import KafkaBus, read_topic_from_start
from zerotrace.codec import AvroCodec
from zerotrace.kafka_security import PLAINTEXT, KafkaSecurity
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.store import Query
from zerotrace.store_opensearch import OpenSearchStore

CONVERSATIONS = 200
DONE_FIRST = 50  # short conversations that end before the kill
S = 1_000_000_000


def worker_env(
    kafka_bootstrap: str, opensearch_url: str, home: Path, node_prefix: str
) -> dict[str, str]:
    """The services' environment: this run's node id, one-second profile windows closed a
    second after their end."""
    KafkaBus(kafka_bootstrap).ensure_topics()
    return {
        **os.environ,
        "ZEROTRACE_KAFKA": kafka_bootstrap,
        "ZEROTRACE_OPENSEARCH": opensearch_url,
        "ZEROTRACE_NODE_ID": f"{node_prefix}-{uuid.uuid4().hex[:8]}",
        "ZEROTRACE_HOME": str(home),
        "ZEROTRACE_PROFILE_WINDOW_MS": "1000",
        "ZEROTRACE_PROFILE_LATENESS_MS": "200",
        "ZEROTRACE_PROFILE_TICK_LAG_MS": "1000",
    }


@pytest.fixture
def env(kafka_bootstrap: str, opensearch_url: str, tmp_path: Path) -> dict[str, str]:
    return worker_env(kafka_bootstrap, opensearch_url, tmp_path, "shell")


@pytest.fixture
def codec(kafka_bootstrap: str) -> AvroCodec:
    return AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))


class Workers:
    """Services started for one test, all stopped at its end."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs, self.started = env, logs, 0
        self._all: list[Service] = []

    def start(self, name: str, *args: str) -> Service:
        self.started += 1
        service = Service(f"{name}-{self.started}", [name, *args], self.env, self.logs)
        self._all.append(service)
        return service

    def stop_all(self) -> None:
        for service in self._all:
            service.stop()


@pytest.fixture
def workers(env: dict[str, str], tmp_path: Path) -> Iterator[Workers]:
    w = Workers(env, tmp_path)
    yield w
    w.stop_all()


def produce(
    bootstrap: str,
    codec: AvroCodec,
    topic: names.Topic,
    records: list[Any],
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    producer = KafkaBus(bootstrap, security=security).producer()
    for key, datum in records:
        producer.produce(topic.name, key, codec.encode(topic.record, datum))
    assert producer.flush(30) == 0


def derived(
    bootstrap: str,
    codec: AvroCodec,
    topic: names.Topic,
    node: str,
    security: KafkaSecurity = PLAINTEXT,
) -> list[Any]:
    """This run's committed records on a derived topic (aborted transactions' never show)."""
    messages = read_topic_from_start(bootstrap, topic.name, 20, security)
    data = [codec.decode(m.value)[1] for m in messages]
    return [d for d in data if d["node_id"] == node]


def wait_until(
    what: str, check: Callable[[], bool], worker: Service, timeout_s: float = 120
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert worker.proc.poll() is None, f"{worker.name} exited: {worker.log.read_text()}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f}s"
        time.sleep(1)


def conversation_rounds(node: str, run: str) -> list[list[tuple[bytes, dict[str, Any]]]]:
    """DONE_FIRST one-token conversations and the rest eight tokens long, all started
    together; round k holds the k-th record of each conversation still going."""
    t0 = time.time_ns()
    convs = [
        conversation(f"{run}-{i}", t0 + i * 1000, 1 if i < DONE_FIRST else 8, node)
        for i in range(CONVERSATIONS)
    ]
    depth = max(len(c) for c in convs)
    return [
        [(str(c[k]["conn_id"]).encode(), c[k]) for c in convs if k < len(c)] for k in range(depth)
    ]


def stored_llm_ids(http_port: int, node: str) -> list[str]:
    url = f"http://127.0.0.1:{http_port}/api/v1/llm/requests?limit=10000"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    rows = body.get("requests", body.get("items", []))
    return [str(r["request_id"]) for r in rows if r["node_id"] == node]


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_correlator_stopped_mid_stream_leaves_each_conversation_once(
    env: dict[str, str], workers: Workers, codec: AvroCodec, stop: signal.Signals
) -> None:
    bootstrap, node = env["ZEROTRACE_KAFKA"], env["ZEROTRACE_NODE_ID"]
    http_port = free_port()
    query = workers.start("query", "--http-port", str(http_port), "--grpc-port", str(free_port()))
    rounds = conversation_rounds(node, f"{node}-conn")

    def llm() -> list[dict[str, Any]]:
        return derived(bootstrap, codec, names.DERIVED_LLM, node)

    first = workers.start("correlator")
    half = len(rounds) // 2
    produce(bootstrap, codec, names.RAW_SOCKET, [r for batch in rounds[:half] for r in batch])
    wait_until("the short conversations' records", lambda: len(llm()) >= DONE_FIRST, first)
    assert len(llm()) == DONE_FIRST  # the long ones are all in flight
    time.sleep(1.5)  # a transaction or two with nothing to publish but held offsets
    first.proc.send_signal(stop)
    first.proc.wait(timeout=60)
    produce(bootstrap, codec, names.RAW_SOCKET, [r for batch in rounds[half:] for r in batch])
    second = workers.start("correlator")
    wait_until("an LLM record per conversation", lambda: len(llm()) >= CONVERSATIONS, second)
    time.sleep(3)  # more would come now if anything were published twice
    records = llm()
    ids = Counter(str(r["request_id"]) for r in records)
    assert len(ids) == CONVERSATIONS and max(ids.values()) == 1, ids.most_common(3)
    assert {r["output_tokens"] for r in records} == {1, 8}
    assert all(r["error"] is None and r["finish_reason"] is None for r in records)
    query.wait_for("query: indexing")
    stored = lambda: len(stored_llm_ids(http_port, node)) >= CONVERSATIONS  # noqa: E731
    wait_until("every LLM record in OpenSearch", stored, query)
    assert sorted(stored_llm_ids(http_port, node)) == sorted(ids)


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_profiler_agg_stopped_mid_window_leaves_each_window_once(
    env: dict[str, str], workers: Workers, codec: AvroCodec, stop: signal.Signals
) -> None:
    """Samples of four processes stream in as a collector sends them (ten a second each, at
    their own times) while the first worker is stopped and the second starts."""
    bootstrap, node = env["ZEROTRACE_KAFKA"], env["ZEROTRACE_NODE_ID"]
    query = workers.start("query", "--http-port", str(free_port()), "--grpc-port", str(free_port()))
    pids, rounds = (201, 202, 203, 204), 80
    stamps: list[int] = []

    def stream() -> None:
        producer = KafkaBus(bootstrap).producer()
        for i in range(rounds):
            stamps.append(time.time_ns())
            for pid in pids:
                frames = ["thread:1", f"py:f{i % 3} (a.py:1)"]
                datum = sample(stamps[-1], frames, node_id=node, pid=pid, tid=pid)
                value = codec.encode(names.RAW_STACK.record, datum)
                producer.produce(names.RAW_STACK.name, str(pid).encode(), value)
            producer.flush(10)
            time.sleep(0.1)
        assert producer.flush(30) == 0

    def windows() -> list[dict[str, Any]]:
        return derived(bootstrap, codec, names.DERIVED_PROFILE, node)

    first = workers.start("profiler-agg")
    feeder = threading.Thread(target=stream)
    feeder.start()
    wait_until("the first windows", lambda: len(windows()) >= len(pids), first)
    first.proc.send_signal(stop)  # windows are open: records keep coming
    first.proc.wait(timeout=60)
    second = workers.start("profiler-agg")
    feeder.join(timeout=120)
    total = rounds * len(pids)
    wait_until("every window", lambda: sum(w["samples"] for w in windows()) >= total, second)
    time.sleep(3)
    found = windows()
    ids = Counter(str(w["window_id"]) for w in found)
    assert max(ids.values()) == 1, ids.most_common(3)
    seconds = {stamp // S for stamp in stamps}  # windows are one second wide
    assert sum(w["samples"] for w in found) == total and len(ids) == len(seconds) * len(pids)
    store = OpenSearchStore(env["ZEROTRACE_OPENSEARCH"])
    try:

        def indexed() -> list[str]:
            docs = store.search(names.INDEX_PROFILES, Query(equals={"node_id": node}, limit=1000))
            return [str(d["_id"]) for d in docs]

        wait_until("every window in OpenSearch", lambda: len(indexed()) >= len(ids), query)
        assert sorted(indexed()) == sorted(ids)
    finally:
        store.close()
