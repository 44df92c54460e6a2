"""Credentials and prompts stay on the node: a client sends chat requests carrying a bearer
key, a cookie, an x-api-key header, an api_key query parameter and a prompt, over HTTP and
HTTPS, to the OpenAI-compatible test server. A real `zerotrace collector` (eBPF, the client's
pid) publishes to the real Kafka, the faust correlator derives LLM records from that. Then every
topic is read from where it stood before the test, and every file under ZEROTRACE_HOME:
no credential appears anywhere, nor the prompt or the completion unless `--keep-content`.
The derived LLM records still count every token: the filler keeps the bytes' length."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.e2e.llm_fixtures import REPO, Server, start_server
from tests.ebpf_required import require_ebpf
from tests.harness.services import Service, reap
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir

require_ebpf()

TOKENS = 6

# One streamed chat request per URL, once the collector is attached (the go file exists);
# prints the completion text each answer carried, so the test knows what to look for.
CLIENT = textwrap.dedent(
    """
    import http.client, json, os, ssl, sys, time
    go, secret, prompt, model, tokens = sys.argv[1:6]
    servers = sys.argv[6:]
    while not os.path.exists(go):
        time.sleep(0.05)
    texts = []
    for url, cafile in zip(servers[::2], servers[1::2]):
        scheme, _, hostport = url.partition("://")
        host, port = hostport.split(":")
        if scheme == "https":
            ctx = ssl.create_default_context(cafile=cafile)
            conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
        else:
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
        body = json.dumps({
            "model": model, "stream": True, "max_tokens": int(tokens),
            "messages": [{"role": "user", "content": prompt}],
        })
        conn.request("POST", "/v1/chat/completions?api_key=" + secret, body, {
            "Authorization": "Bearer " + secret,
            "Cookie": "session=" + secret,
            "x-api-key": secret,
            "Content-Type": "application/json",
        })
        answer = conn.getresponse().read().decode()
        for line in answer.splitlines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:]).get("choices", []):
                    texts.append(choice.get("delta", {}).get("content") or "")
        conn.close()
    print(json.dumps(texts), flush=True)
    time.sleep(1)  # closes seen before the collector stops
    """
)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    (tmp_path / "http").mkdir()
    (tmp_path / "https").mkdir()
    plain = start_server(tmp_path / "http", tls=False)
    tls = start_server(tmp_path / "https", tls=True)
    both = [next(plain), next(tls)]
    yield both
    for rest in (plain, tls):
        next(rest, None)


def end_offsets(bootstrap: str) -> dict[TopicPartition, int]:
    """Where every topic on the broker stands now (what the test adds comes after)."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}"})
    try:
        return {
            TopicPartition(topic, p): consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=10
            )[1]
            for topic, meta in metadata.topics.items()
            if not topic.startswith("__")
            for p in meta.partitions
        }
    finally:
        consumer.close()


def messages_since(bootstrap: str, since: dict[TopicPartition, int]) -> list[Any]:
    """Every message written to any topic after *since* (new topics from their start). Read
    until each partition's position reaches its end: offsets also count the transaction
    markers of the faust workers, which are no messages."""
    now = {tp: high for tp, high in end_offsets(bootstrap).items() if high > since.get(tp, 0)}
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}"}
        | {"enable.auto.commit": False, "isolation.level": "read_uncommitted"}
    )
    out = []
    try:
        consumer.assign([TopicPartition(tp.topic, tp.partition, since.get(tp, 0)) for tp in now])
        deadline = time.monotonic() + 60
        behind = list(now)
        while behind and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                out.append(message)
            positions = consumer.position(behind)
            behind = [tp for tp in positions if tp.offset < now[tp]]
    finally:
        consumer.close()
    assert not behind, f"could not read {behind} to their ends"
    return out


def run_once(
    servers: list[Server], kafka_bootstrap: str, tmp_path: Path, keep_content: bool
) -> tuple[list[str], list[Any], dict[str, str]]:
    """One client through a collector (and the correlator); what the client read, every
    message any topic got meanwhile, and the names the test used."""
    home = tmp_path / "home"
    home.mkdir()
    run = uuid.uuid4().hex[:10]
    used: dict[str, str] = {
        "secret": f"sk-test-{run}-KEEPOUT",
        "prompt": f"Draft the merger memo for Project Bluebird {run}",
        "model": f"redaction-model-{run}",
        "node": f"e2e-redaction-{run}",
        "home": str(home),
    }
    env = {
        **os.environ,
        "ZEROTRACE_KAFKA": kafka_bootstrap,
        "ZEROTRACE_NODE_ID": used["node"],
        "ZEROTRACE_HOME": str(home),
    }
    since = end_offsets(kafka_bootstrap)
    go = tmp_path / f"go-{run}"
    targets = [x for s in servers for x in (s.url, s.cafile or "")]
    words = [used["secret"], used["prompt"], used["model"], str(TOKENS)]
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(go), *words, *targets],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    correlator = Service("correlator", ["correlator"], env, home)
    args = ["collector", "--no-files", "--pid", str(client.pid)]
    collector = Service("collector", args + (["--keep-content"] if keep_content else []), env, home)
    try:
        collector.wait_for("collector attached", timeout_s=120)
        go.write_text("go")
        out, _ = client.communicate(timeout=60)
        assert client.returncode == 0
        texts: list[str] = json.loads(out)
        codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
        deadline = time.monotonic() + 90
        while True:  # until the correlator has derived both requests
            time.sleep(2)
            found = [
                codec.decode(m.value())[1]
                for m in messages_since(kafka_bootstrap, since)
                if m.topic() == names.DERIVED_LLM.name
            ]
            mine = [r for r in found if r["model"] == used["model"]]
            if len(mine) >= len(servers) or time.monotonic() > deadline:
                break
        assert collector.stop() == 0, collector.log.read_text()[-2000:]
    finally:
        collector.stop()
        correlator.stop()
        reap(client)
    assert len(mine) == len(servers), f"derived {len(mine)} LLM records: {found[-3:]}"
    assert all(r["output_tokens"] == TOKENS for r in mine), mine
    return texts, messages_since(kafka_bootstrap, since), used


def files_under(folder: Path) -> Iterator[bytes]:
    for path in folder.rglob("*"):
        if path.is_file():
            yield path.read_bytes()


def test_credentials_and_prompts_never_leave_the_node(
    servers: list[Server], kafka_bootstrap: str, tmp_path: Path
) -> None:
    texts, messages, used = run_once(servers, kafka_bootstrap, tmp_path, keep_content=False)
    blobs = [m.value() or b"" for m in messages] + list(files_under(Path(used["home"])))
    secret = used["secret"].encode()
    marker = b"Project Bluebird"
    completion = "".join(texts).encode()
    assert len(texts) >= TOKENS and completion  # the client did read a completion
    ours = [b for b in blobs if used["node"].encode() in b]
    assert ours, "no message carried the request at all"
    assert not [b for b in blobs if secret in b]
    assert not [b for b in blobs if marker in b]
    assert not [b for b in ours if completion in b or b"tok1 " in b]
    # What is kept: the model, the role, and the auth scheme (the rest is filler).
    assert any(b"Authorization: Bearer *****" in b for b in ours)
    assert any(b'"role": "user"' in b for b in ours)


def test_with_keep_content_the_prompt_is_kept_and_credentials_are_not(
    servers: list[Server], kafka_bootstrap: str, tmp_path: Path
) -> None:
    _texts, messages, used = run_once(servers, kafka_bootstrap, tmp_path, keep_content=True)
    blobs = [m.value() or b"" for m in messages] + list(files_under(Path(used["home"])))
    assert not [b for b in blobs if used["secret"].encode() in b]
    assert any(used["prompt"].encode() in b for b in blobs)
    assert any(b"tok1 " in b for b in blobs if used["node"].encode() in b)
