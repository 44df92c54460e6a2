"""`zerotrace replay` against what live processing made of the same raw events.

Distributed: raw events of this run's node (200 streaming conversations, file opens, stack
samples of two processes over a few seconds) and of another node go to the real Kafka; the
faust correlator and profiler-agg and the query service derive and index them into the real
OpenSearch. Then `zerotrace replay --node N --into NAME` over the period: every live document of
the node comes out again in the replay's indices with the same id and the same fields, none of
the other node's; the replay's topics hold the records; live indices are untouched.

Embedded: the raw log of the in-process bus, replayed with --local into the DuckDB file, gives
the documents the embedded pipeline indexed (no eBPF: the node's collector is fed records)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.llm_fixtures import free_port
from tests.harness.llm_conversations import conversation
from tests.harness.services import REPO
from tests.integration.test_faust_shell import (
    Workers,
    conversation_rounds,
    produce,
    stored_llm_ids,
    wait_until,
    worker_env,
)
from tests.unit.test_correlator_pipeline import raw_open
from tests.unit.test_profile_step import sample
from zerotrace import names
from zerotrace.bus_kafka import KafkaBus, read_topic_from_start
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.store import Query
from zerotrace.store_opensearch import OpenSearchStore

pytestmark = pytest.mark.e2e

INDICES = (names.INDEX_LLM, names.INDEX_SPANS, names.INDEX_PROFILES)
PIDS = (301, 302)
SAMPLE_ROUNDS = 30  # ten a second: three one-second windows and more per process


@pytest.fixture
def live_env(kafka_bootstrap: str, opensearch_url: str, tmp_path: Path) -> dict[str, str]:
    return worker_env(kafka_bootstrap, opensearch_url, tmp_path, "replay")


@pytest.fixture
def services(live_env: dict[str, str], tmp_path: Path) -> Iterator[Workers]:
    started = Workers(live_env, tmp_path)
    yield started
    started.stop_all()


def documents(store: OpenSearchStore, index: str, node: str) -> dict[str, dict[str, Any]]:
    store.refresh(index)
    found = store.search(index, Query(equals={"node_id": node}, limit=10_000))
    return {str(doc["_id"]): doc for doc in found}


def replay(run_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zerotrace_cli", "replay", *args],
        cwd=REPO,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def feed_node(bootstrap: str, avro: AvroCodec, node: str, run: str) -> int:
    """This node's raw events; returns how many stack samples went out."""
    records = [r for batch in conversation_rounds(node, run) for r in batch]
    produce(bootstrap, avro, names.RAW_SOCKET, records)
    now = time.time_ns()
    opens = [
        (
            str(pid).encode(),
            raw_open(
                node_id=node,
                pid=pid,
                event_id=f"{run}/{pid}/{i}",
                start_ns=now + i,
                end_ns=now + i + 500,
            ),
        )
        for i, pid in enumerate(PIDS * 5)
    ]
    produce(bootstrap, avro, names.RAW_FILEIO, opens)
    producer = KafkaBus(bootstrap).producer()
    for i in range(SAMPLE_ROUNDS):
        stamp = time.time_ns()
        for pid in PIDS:
            datum = sample(stamp, ["thread:1", f"py:f{i % 3} (a.py:1)"], node_id=node, pid=pid)
            producer.produce(
                names.RAW_STACK.name, str(pid).encode(), avro.encode(names.RAW_STACK.record, datum)
            )
        producer.flush(10)
        time.sleep(0.1)
    assert producer.flush(30) == 0
    return SAMPLE_ROUNDS * len(PIDS)


def test_a_replay_gives_the_documents_live_processing_gave(
    live_env: dict[str, str], services: Workers, kafka_bootstrap: str
) -> None:
    env, workers = live_env, services
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    bootstrap, node = env["ZEROTRACE_KAFKA"], env["ZEROTRACE_NODE_ID"]
    other = f"{node}-other"
    query = workers.start("query", "--http-port", str(free_port()), "--grpc-port", str(free_port()))
    correlator = workers.start("correlator")
    profiler = workers.start("profiler-agg")
    query.wait_for("query: indexing")
    from_ms = time.time_ns() // 1_000_000 - 1000
    samples = feed_node(bootstrap, codec, node, f"{node}-c")
    others = [
        (str(r["conn_id"]).encode(), r)
        for i in range(20)
        for r in conversation(f"{other}-c{i}", time.time_ns(), 4, other)
    ]
    produce(bootstrap, codec, names.RAW_SOCKET, others)
    to_ms = time.time_ns() // 1_000_000 + 1000
    store = OpenSearchStore(env["ZEROTRACE_OPENSEARCH"])
    try:
        live: dict[str, dict[str, dict[str, Any]]] = {}

        def settled(index: str, check: Callable[[dict[str, dict[str, Any]]], bool]) -> bool:
            live[index] = documents(store, index, node)
            return check(live[index])

        wait_until(
            "every live LLM request",
            lambda: settled(names.INDEX_LLM, lambda d: len(d) >= 200),
            correlator,
        )
        wait_until(
            "every live profile window",
            lambda: settled(
                names.INDEX_PROFILES, lambda d: sum(w["samples"] for w in d.values()) >= samples
            ),
            profiler,
        )
        wait_until(
            "every live span",
            lambda: settled(names.INDEX_SPANS, lambda d: len(d) >= 210),
            query,
        )
        time.sleep(3)  # anything late would show now
        live = {index: documents(store, index, node) for index in INDICES}
        name = f"t{uuid.uuid4().hex[:8]}"
        done = replay(
            env, "--from", str(from_ms), "--to", str(to_ms), "--node", node, "--into", name
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "raw events" in done.stderr and "ETA" in done.stderr, done.stderr
        print(done.stdout)
        replayed = OpenSearchStore(env["ZEROTRACE_OPENSEARCH"], suffix=f"-replay-{name}")
        try:
            for index in INDICES:
                again = documents(replayed, index, node)
                assert sorted(again) == sorted(live[index]), index
                for doc_id, doc in live[index].items():
                    assert again[doc_id] == doc, (index, doc_id)
                assert documents(replayed, index, other) == {}, index
        finally:
            replayed.close()
        # The replay's topics hold the records; the live topics got none from it.
        llm_topic = f"{names.DERIVED_LLM.name}.replay-{name}"
        replay_llm = [
            codec.decode(m.value)[1] for m in read_topic_from_start(bootstrap, llm_topic, 20)
        ]
        assert sorted(str(r["request_id"]) for r in replay_llm) == sorted(
            str(d["request_id"]) for d in live[names.INDEX_LLM].values()
        )
        assert {index: documents(store, index, node) for index in INDICES} == live
        # And the query service serves the replay on its own.
        http_port = free_port()
        served = workers.start(
            "query",
            "--replay",
            name,
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(free_port()),
        )
        served.wait_for(f"serving replay {name}")
        assert sorted(stored_llm_ids(http_port, node)) == sorted(live[names.INDEX_LLM])
    finally:
        store.close()


def test_a_local_replay_gives_the_documents_the_embedded_run_indexed(tmp_path: Path) -> None:
    """The embedded node over the in-memory feed twin: its raw log, replayed with --local into
    the same DuckDB file, gives every document it indexed, same ids and fields."""
    from zerotrace import settings
    from zerotrace.store_duckdb import DuckDBStore
    from zerotrace_cli.embedded_node import EmbeddedNode, raw_log_folder
    from zerotrace_cli.node_feeds import NodeFeeds
    from zerotrace_collector.feed_memory import InMemoryFeed
    from zerotrace_collector.feeds import RawRecord

    node_id = "local-node"
    from_ms = time.time_ns() // 1_000_000 - 1000
    records = [
        RawRecord(names.RAW_SOCKET.name, key, names.RAW_SOCKET.record, datum)
        for key, datum in (r for batch in conversation_rounds(node_id, "lc") for r in batch)
    ]
    t0 = time.time_ns()
    for i in range(40):
        for pid in PIDS:
            datum = sample(
                t0 + i * 100_000_000,
                ["thread:1", f"py:f{i % 3} (a.py:1)"],
                node_id=node_id,
                pid=pid,
            )
            records.append(
                RawRecord(names.RAW_STACK.name, str(pid).encode(), names.RAW_STACK.record, datum)
            )
    feed = InMemoryFeed("memory", records)
    feed.attach()
    home = {"ZEROTRACE_HOME": str(tmp_path), "ZEROTRACE_NODE_ID": node_id}
    common = settings.load(settings.CommonSettings, home)
    store_path = tmp_path / "embedded.duckdb"
    node = EmbeddedNode(NodeFeeds([feed], None, []), store_path, common, None, "quiet")
    try:
        while node.step_once():
            pass
        node.finish()
    finally:
        node.close()
    assert any(raw_log_folder(tmp_path).glob("*.seg"))
    to_ms = time.time_ns() // 1_000_000 + 1000
    full_env = {**os.environ, **home}
    done = replay(
        full_env, "--local", "--from", str(from_ms), "--to", str(to_ms), "--into", "again"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    live_store = DuckDBStore(str(store_path))
    replayed = DuckDBStore(str(store_path), suffix="-replay-again")
    try:
        for index in INDICES:
            live = {d["_id"]: d for d in live_store.search(index, Query(limit=10_000))}
            again = {d["_id"]: d for d in replayed.search(index, Query(limit=10_000))}
            assert live and again == live, index
    finally:
        live_store.close()
        replayed.close()
