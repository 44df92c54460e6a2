"""Profiles through both paths from one real observation: `zerotrace collector --profile` on a
real Python program publishes raw.stack and raw.gpu to the real Kafka; the faust profiler-agg
folds them and the query service indexes the windows into the real OpenSearch and serves the
flame graphs. The same raw records, read back from Kafka, then go through the embedded path
(in-process bus, the same step, the same indexer, DuckDB): the flame graphs are identical, and
the programs' known profiles are in them (handle_request -> hot_loop and wait_for_backend's
sleeps; GPU bytes allocated, still held and kernels launched per calling Python function)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.llm_fixtures import free_port
from tests.ebpf_required import require_ebpf
from tests.harness import gpu_app
from tests.harness.fake_cuda.build import build_fake_cuda
from tests.harness.services import Service
from zerotrace import names
from zerotrace.bus_kafka import read_topic_from_start
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.errors import PoisonInput
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.step_runner import StepRunner
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_profiler_agg.profile_step import ProfileStep
from zerotrace_query.flame_graph import FlameFilter
from zerotrace_query.indexer import Indexer
from zerotrace_query.profile_search import flame_graph

require_ebpf()

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "tests" / "harness"
MIB = 1 << 20
CPU_TYPES = ("ON_CPU", "OFF_CPU")
GPU_TYPES = ("GPU_MEM_ALLOC", "GPU_MEM_INUSE", "GPU_LAUNCH")
COLLECTOR = ["collector", "--no-files", "--no-sockets", "--profile"]


@dataclass
class Observed:
    node: str
    distributed: dict[str, dict[str, Any]]  # profile type -> flame graph from the query API
    embedded: dict[str, dict[str, Any]]  # the same, from the embedded path


def api_flame_graph(port: int, profile_type: str, node: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/api/v1/profiles/flamegraph?type={profile_type}&node={node}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body: dict[str, Any] = json.load(response)
    return body


def weight_under(node: dict[str, Any], chain: list[str]) -> int:
    """Total weight of the subtrees reached by the frames of chain in order (each a name
    prefix; any frames between them), counted once per path."""
    total = 0
    for child in node.get("children", []):
        if child["name"].startswith(chain[0]):
            total += child["total"] if len(chain) == 1 else weight_under(child, chain[1:])
        else:
            total += weight_under(child, chain)
    return total


def heaviest(node: dict[str, Any], path: tuple[str, ...] = (), n: int = 5) -> list[str]:
    """The n heaviest leaf paths, for failure messages."""
    leaves: list[tuple[int, str]] = []

    def walk(at: dict[str, Any], trail: tuple[str, ...]) -> None:
        kids = at.get("children", [])
        if at.get("self"):
            leaves.append((int(at["self"]), ";".join(trail[-6:])))
        for kid in kids:
            walk(kid, (*trail, kid["name"]))

    walk(node, path)
    return [f"{w} {p}" for w, p in sorted(leaves, reverse=True)[:n]]


def embedded_flame_graphs(
    messages: list[Any], codec: AvroCodec, node: str, types: tuple[str, ...], tmp: Path
) -> dict[str, dict[str, Any]]:
    """The same raw messages through the embedded shells: in-process bus, the same profile
    step, the same indexer, DuckDB."""
    broker = InMemoryBroker()
    broker.ensure_topics()
    producer = broker.producer()
    for message in messages:
        producer.produce(message.topic, message.key, message.value)
    runner = StepRunner(broker, [ProfileStep(codec)], batch=len(messages) + 1)
    runner.run_once(0)
    runner.finish(0)
    store = DuckDBStore(str(tmp / "embedded.duckdb"))
    indexer = Indexer(
        broker.consumer("embedded-query"), broker.producer(), store, codec, ManualClock(1)
    )
    while indexer.run_once(0):
        pass
    return {t: flame_graph(store, FlameFilter(t, node=node)) for t in types}


@contextmanager
def distributed(kafka: str, opensearch: str, tmp: Path) -> Iterator[tuple[dict[str, str], int]]:
    """profiler-agg and query running on the real Kafka and OpenSearch for a fresh node id."""
    env = {
        **os.environ,
        "ZEROTRACE_KAFKA": kafka,
        "ZEROTRACE_OPENSEARCH": opensearch,
        "ZEROTRACE_NODE_ID": f"e2e-prof-{uuid.uuid4().hex[:8]}",
        "ZEROTRACE_HOME": str(tmp),
        "ZEROTRACE_PROFILE_TICK_LAG_MS": "1000",  # windows close a second after input stops
    }
    http_port = free_port()
    agg = Service("profiler-agg", ["profiler-agg"], env, tmp)
    query = Service(
        "query", ["query", "--http-port", str(http_port), "--grpc-port", str(free_port())], env, tmp
    )
    try:
        query.wait_for("query: indexing")
        yield env, http_port
    finally:
        agg.stop()
        query.stop()


def observe(
    kafka: str,
    opensearch: str,
    tmp: Path,
    program: list[str],
    collector_flags: list[str],
    types: tuple[str, ...],
    drive: Callable[[subprocess.Popen[str]], None],
) -> Observed:
    """Runs program under `zerotrace collector --profile --pid`, drive() makes it work; returns
    the flame graphs of both paths once the distributed one stopped changing."""
    with distributed(kafka, opensearch, tmp) as (env, port):
        node = env["ZEROTRACE_NODE_ID"]
        with subprocess.Popen(
            program, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        ) as app:
            collector = Service(
                "collector",
                [*COLLECTOR, *collector_flags, "--pid", str(app.pid)],
                env,
                tmp,
            )
            try:
                collector.wait_for("collector attached", timeout_s=180)
                drive(app)
                time.sleep(1)  # the last off-CPU switch-ins
            finally:
                assert collector.stop() == 0, collector.log.read_text()[-2000:]
                if app.poll() is None:
                    app.kill()
        # Every raw record is on Kafka now; through the embedded path they give the flame
        # graphs the distributed path must reach once profiler-agg closed the last windows.
        codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka))
        raw = [
            m
            for topic in (names.RAW_STACK.name, names.RAW_GPU.name)
            for m in read_topic_from_start(kafka, topic)
            if node_of(codec, m.value) == node
        ]
        embedded = embedded_flame_graphs(raw, codec, node, types, tmp)
        graphs: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            graphs = {t: api_flame_graph(port, t, node) for t in types}
            if all(same_graph(graphs[t], embedded[t]) for t in types):
                break
            time.sleep(1)
    return Observed(node, graphs, embedded)


def wait_for_calls(kafka: str, pid: int, api: str, count: int, limit_s: float = 60) -> None:
    """Until raw.gpu holds *count* calls of *api* made by *pid*."""
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka))
    deadline = time.monotonic() + limit_s
    while True:
        seen = 0
        for message in read_topic_from_start(kafka, names.RAW_GPU.name):
            try:
                _record, datum = codec.decode(message.value)
            except PoisonInput:
                continue
            seen += datum.get("pid") == pid and datum.get("api") == api
        if seen >= count:
            return
        assert time.monotonic() < deadline, f"raw.gpu holds {seen} of {count} {api} of {pid}"
        time.sleep(0.5)


def node_of(codec: AvroCodec, value: bytes) -> str | None:
    """The node of a raw record; None for poison others left on the topic (dead letters)."""
    try:
        return str(codec.decode(value)[1]["node_id"])
    except PoisonInput:
        return None


def same_graph(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool(a["total"]) and (a["root"], a["total"]) == (b["root"], b["total"])


def assert_identical(observed: Observed) -> None:
    for t, graph in observed.distributed.items():
        assert same_graph(graph, observed.embedded[t]), (
            t,
            graph["total"],
            observed.embedded[t]["total"],
        )


def test_cpu_profile_through_both_paths(
    kafka_bootstrap: str, opensearch_url: str, tmp_path: Path
) -> None:
    slept: list[int] = []

    def drive(app: subprocess.Popen[str]) -> None:
        assert app.stdin and app.stdout
        json.loads(app.stdout.readline())  # the interpreter is up
        app.stdin.write("go\n")
        app.stdin.flush()
        slept.append(int(json.loads(app.stdout.readline())["slept_ns"]))
        assert app.wait(30) == 0

    program = [sys.executable, str(HARNESS / "profiled_app.py"), "--seconds", "4"]
    seen = observe(
        kafka_bootstrap, opensearch_url, tmp_path, program, ["--no-gpu"], CPU_TYPES, drive
    )
    cpu, off = seen.distributed["ON_CPU"], seen.distributed["OFF_CPU"]
    in_hot = weight_under(cpu["root"], ["py:hot_loop"])
    chained = weight_under(cpu["root"], ["py:handle_request", "py:hot_loop"])
    assert in_hot > 50 and chained >= 0.9 * in_hot, (chained, in_hot)
    waited = weight_under(off["root"], ["py:wait_for_backend"])
    assert abs(waited - slept[0]) <= 0.1 * slept[0], (waited, slept[0], heaviest(off["root"]))
    assert_identical(seen)


def test_gpu_memory_and_launches_through_both_paths(
    kafka_bootstrap: str, opensearch_url: str, tmp_path: Path
) -> None:
    libs = build_fake_cuda(tmp_path / "cuda")
    go, truth, done = tmp_path / "go", tmp_path / "truth.json", tmp_path / "exit"

    def drive(app: subprocess.Popen[str]) -> None:
        go.write_text("go")  # the app loads the libraries only now: after the probes
        deadline = time.monotonic() + 60
        while not truth.exists():
            assert app.poll() is None and time.monotonic() < deadline, "gpu_app did not finish"
            time.sleep(0.05)
        # The collector names Python frames from the live process: the app must outlive the
        # reading of its last calls. Waited for on raw.gpu, not for a time (0.5 s was not
        # always enough on a busy machine, at the collector's CPU budget).
        wait_for_calls(kafka_bootstrap, app.pid, "cuLaunchKernel", gpu_app.DRIVER_LAUNCHES)
        done.write_text("exit")
        assert app.wait(30) == 0

    program = [sys.executable, str(HARNESS / "gpu_app.py"), str(libs.runtime.parent), str(go)]
    program += [str(truth), str(done)]
    flags = ["--no-off-cpu", "--sample-hz", "1"]
    seen = observe(kafka_bootstrap, opensearch_url, tmp_path, program, flags, GPU_TYPES, drive)
    alloc, inuse = seen.distributed["GPU_MEM_ALLOC"], seen.distributed["GPU_MEM_INUSE"]
    launches = seen.distributed["GPU_LAUNCH"]
    expect_alloc = {
        "py:alloc_weights": 21 * MIB,
        "py:alloc_cache": 5 * MIB,
        "py:driver_buffers": 6 * MIB,
        "py:async_and_managed": 2 * MIB + 4 * MIB + 512 * 1024,
    }
    expect_inuse = {
        "py:alloc_weights": 21 * MIB,
        "py:alloc_cache": 3 * MIB,  # two of five freed
        "py:driver_buffers": 3 * MIB,
        "py:async_and_managed": 4 * MIB,  # the async ones were freed
    }
    got = {f: weight_under(alloc["root"], [f]) for f in expect_alloc}
    assert got == expect_alloc, (alloc["total"], heaviest(alloc["root"], n=12))
    assert alloc["total"] == sum(expect_alloc.values())
    assert {f: weight_under(inuse["root"], [f]) for f in expect_inuse} == expect_inuse
    assert inuse["total"] == sum(expect_inuse.values())
    assert weight_under(launches["root"], ["py:launch_kernels", "cuda:cudaLaunchKernel"]) == 7
    assert weight_under(launches["root"], ["py:async_and_managed", "cuda:cuLaunchKernel"]) == 3
    assert_identical(seen)
