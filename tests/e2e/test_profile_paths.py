"""Profiles through both paths from one real observation: `zerotrace collector --profile` on a
real Python program publishes raw.stack to the real Kafka; the faust profiler-agg folds it and
the query service indexes the windows into the real OpenSearch and serves the flame graph. The
same raw records, read back from Kafka, then go through the embedded path (in-process bus,
the same step, DuckDB): the flame graphs are identical, and the program's known profile is in
them (handle_request -> hot_loop; wait_for_backend's sleeps as off-CPU time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.llm_fixtures import free_port
from tests.e2e.test_distributed_slice import Service
from tests.ebpf_required import require_ebpf
from zerotrace import names
from zerotrace.bus_kafka import read_topic_from_start
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_profiler_agg.embedded import EmbeddedProfileAgg
from zerotrace_query.flame_graph import FlameFilter
from zerotrace_query.indexer import Indexer
from zerotrace_query.profile_search import flame_graph

require_ebpf()

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "tests" / "harness" / "profiled_app.py"
TYPES = ("ON_CPU", "OFF_CPU")


def api_flame_graph(port: int, profile_type: str, node: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/api/v1/profiles/flamegraph?type={profile_type}&node={node}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body: dict[str, Any] = json.load(response)
    return body


def paths_through(node: dict[str, Any], names_: list[str]) -> int:
    """Weight of the tree under the first node whose name ends the chain names_ (any depth)."""
    total = 0
    for child in node.get("children", []):
        if child["name"].startswith(names_[0]):
            total += child["total"] if len(names_) == 1 else paths_through(child, names_[1:])
        else:
            total += paths_through(child, names_)
    return total


def embedded_flame_graphs(
    records: list[Any], codec: AvroCodec, node: str, tmp: Path
) -> dict[str, Any]:
    """The same raw messages through the embedded shells: in-process bus, the same profile step,
    the same indexer, DuckDB."""
    broker = InMemoryBroker()
    broker.ensure_topics()
    producer = broker.producer()
    for message in records:
        producer.produce(message.topic, message.key, message.value)
    agg = EmbeddedProfileAgg(broker, codec)
    agg.run_once(0, limit=len(records) + 1)
    agg.finish()
    store = DuckDBStore(str(tmp / "embedded.duckdb"))
    indexer = Indexer(
        broker.consumer("embedded-query"), broker.producer(), store, codec, ManualClock(1)
    )
    while indexer.run_once(0):
        pass
    return {t: flame_graph(store, FlameFilter(t, node=node)) for t in TYPES}


def test_profiles_are_identical_through_kafka_faust_opensearch_and_embedded(
    kafka_bootstrap: str, opensearch_url: str, tmp_path: Path
) -> None:
    node = f"e2e-prof-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "ZEROTRACE_KAFKA": kafka_bootstrap,
        "ZEROTRACE_OPENSEARCH": opensearch_url,
        "ZEROTRACE_NODE_ID": node,
        "ZEROTRACE_HOME": str(tmp_path),
        "ZEROTRACE_PROFILE_TICK_LAG_MS": "1000",
    }
    http_port = free_port()
    agg = Service("profiler-agg", ["profiler-agg"], env, tmp_path)
    query = Service(
        "query",
        ["query", "--http-port", str(http_port), "--grpc-port", str(free_port())],
        env,
        tmp_path,
    )
    app = subprocess.Popen(
        [sys.executable, str(APP), "--seconds", "4"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert app.stdin and app.stdout
    collector = Service(
        "collector",
        ["collector", "--no-files", "--profile", "--no-gpu", "--pid", str(app.pid)],
        env,
        tmp_path,
    )
    try:
        json.loads(app.stdout.readline())  # the interpreter is up
        query.wait_for("query: indexing")
        collector.wait_for("collector attached", timeout_s=180)
        app.stdin.write("go\n")
        app.stdin.flush()
        slept_ns = int(json.loads(app.stdout.readline())["slept_ns"])
        assert app.wait(30) == 0
        time.sleep(1)  # the last off-CPU switch-ins
        assert collector.stop() == 0, collector.log.read_text()[-2000:]
        deadline = time.monotonic() + 120
        distributed: dict[str, Any] = {}
        while time.monotonic() < deadline:
            distributed = {t: api_flame_graph(http_port, t, node) for t in TYPES}
            if all(distributed[t]["total"] for t in TYPES) and stable(distributed, http_port, node):
                break
            time.sleep(2)
    finally:
        if app.poll() is None:
            app.kill()
        app.wait()
        app.stdin.close()
        app.stdout.close()
        collector.stop()
        agg.stop()
        query.stop()

    # The program's known profile, read through the distributed path.
    cpu, off = distributed["ON_CPU"], distributed["OFF_CPU"]
    in_hot = paths_through(cpu["root"], ["py:hot_loop"])
    chained = paths_through(cpu["root"], ["py:handle_request", "py:hot_loop"])
    assert in_hot > 50 and chained >= 0.9 * in_hot, (chained, in_hot)
    waited = paths_through(off["root"], ["py:wait_for_backend"])
    assert abs(waited - slept_ns) <= 0.1 * slept_ns, (waited, slept_ns)

    # The same raw records through the embedded path give the same flame graphs.
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    raw = [m for m in read_topic_from_start(kafka_bootstrap, names.RAW_STACK.name)
           if codec.decode(m.value)[1]["node_id"] == node]  # fmt: skip
    embedded = embedded_flame_graphs(raw, codec, node, tmp_path)
    for t in TYPES:
        assert embedded[t]["root"] == distributed[t]["root"], t
        assert embedded[t]["total"] == distributed[t]["total"], t


def stable(seen: dict[str, Any], port: int, node: str) -> bool:
    """Nothing more arrived in the last two seconds (every window is in)."""
    time.sleep(2)
    return all(api_flame_graph(port, t, node)["total"] == seen[t]["total"] for t in TYPES)
