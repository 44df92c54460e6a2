"""The vertical slice, distributed: collector, correlator (faust) and query as separate
processes over the real Kafka and OpenSearch. A known workload of 23 opens comes out of both
APIs as 23 spans; a malformed message on the raw topic goes to the dead-letter topic with its
reason while the correlator keeps going."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness.services import Service
from zerotrace import names
from zerotrace.bus_kafka import KafkaBus, read_topic_from_start
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_query.grpc_api import list_spans

require_ebpf()

REPO = Path(__file__).resolve().parents[2]
CALLS = 23
WORKLOAD = textwrap.dedent(
    """
    import os, sys
    path, n = sys.argv[1], int(sys.argv[2])
    sys.stdin.readline()
    for _ in range(n):
        os.close(os.open(path, os.O_RDONLY))
    """
)


@dataclass
class Cluster:
    env: dict[str, str]
    correlator: Service
    query: Service


@pytest.fixture
def cluster(kafka_bootstrap: str, opensearch_url: str, tmp_path: Path) -> Iterator[Cluster]:
    env = {
        **os.environ,
        "ZEROTRACE_KAFKA": kafka_bootstrap,
        "ZEROTRACE_OPENSEARCH": opensearch_url,
        "ZEROTRACE_NODE_ID": f"e2e-{uuid.uuid4().hex[:8]}",
        "ZEROTRACE_HOME": str(tmp_path),
    }
    correlator = Service("correlator", ["correlator"], env, tmp_path)
    query = Service(
        "query", ["query", "--http-port", "18941", "--grpc-port", "18942"], env, tmp_path
    )
    yield Cluster(env, correlator, query)
    correlator.stop()
    query.stop()


def spans_for(target: str) -> list[dict[str, object]]:
    url = "http://127.0.0.1:18941/api/v1/spans?kind=file.open&limit=1000"
    with urllib.request.urlopen(url, timeout=5) as response:
        spans = json.load(response)["spans"]
    return [s for s in spans if s["attributes"].get("file.path") == target]


def test_slice_through_kafka_faust_and_opensearch(
    cluster: Cluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    target = tmp_path / f"known-{uuid.uuid4().hex[:6]}"
    target.write_text("x")
    cluster.query.wait_for("query: indexing")

    # Poison first: the correlator must dead-letter it and still process what follows.
    poison = f"not avro {uuid.uuid4().hex}".encode()
    producer = KafkaBus(kafka_bootstrap).producer()
    producer.produce(names.RAW_FILEIO.name, b"1", poison)
    assert producer.flush(30) == 0

    child = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, str(target), str(CALLS)], stdin=subprocess.PIPE
    )
    collector = Service("collector", ["collector", "--pid", str(child.pid)], cluster.env, tmp_path)
    try:
        collector.wait_for("collector attached")
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.close()
        assert child.wait(timeout=30) == 0
        found: list[dict[str, object]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(found) < CALLS:
            time.sleep(0.5)
            try:
                found = spans_for(str(target))
            except OSError:
                continue
    finally:
        assert collector.stop() == 0, collector.log.read_text()
    assert len(found) == CALLS
    assert {s["pid"] for s in found} == {child.pid}
    assert "published" in collector.log.read_text()

    via_grpc = [
        s
        for s in list_spans("127.0.0.1:18942", kind="file.open", pid=child.pid, limit=1000)
        if s.attributes["file.path"] == str(target)
    ]
    assert sorted(s.span_id for s in via_grpc) == sorted(str(s["span_id"]) for s in found)

    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    letters = [
        codec.decode(m.value)[1]
        for m in read_topic_from_start(kafka_bootstrap, names.DEAD_LETTER.name)
    ]
    ours = [d for d in letters if d["value"] == poison]
    assert len(ours) == 1
    assert ours[0]["consumer"] == names.GROUP_CORRELATOR
    assert ours[0]["source_topic"] == names.RAW_FILEIO.name
    assert "not an Avro single-object message" in ours[0]["reason"]
