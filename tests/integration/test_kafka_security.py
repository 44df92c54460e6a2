"""Kafka over TLS and SASL/SCRAM (zerotrace.kafka_security) with a real broker: a private
Kafka node (its own ports and folder, the jars of `zerotrace infra up`) that also listens
with SASL_SSL, its certificate signed by a CA this module makes, its SCRAM-SHA-512 user
created when its storage is formatted (zerotrace.infra.kafka_node.SaslSslListener).

Over that listener the distributed slice of tests/integration/test_faust_shell.py runs with
its own helpers: raw records -> correlator (faust worker) -> derived.llm -> query (indexer)
-> OpenSearch, every client configured by the ZEROTRACE_KAFKA_* security settings alone.
A wrong password, an untrusted broker certificate and a PLAINTEXT client are refused in one
line, within a bounded time. One broker start per module."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.e2e.llm_fixtures import free_port
from tests.harness.certificates import Certificates, make_certificates
from tests.harness.services import REPO
from tests.integration.test_faust_shell import (
    CONVERSATIONS,
    Workers,
    conversation_rounds,
    derived,
    produce,
    stored_llm_ids,
    wait_until,
)
from zerotrace import names, settings
from zerotrace.bus_kafka import KafkaBus, check_reachable
from zerotrace.codec import AvroCodec
from zerotrace.errors import ConfigError, TransientIO
from zerotrace.infra.kafka_node import KafkaNode, SaslSslListener
from zerotrace.kafka_security import KafkaSecurity, kafka_security
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir

USER, PASSWORD = "zerotrace", uuid.uuid4().hex  # letters and digits: see SaslSslListener
REFUSAL_BOUND_S = 10  # a refused client fails within this long; it must never hang


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def secure_kafka(
    kafka_bootstrap: str, certificates: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaNode]:
    """The node, stopped at the module's end however its tests end; kafka_bootstrap only
    ensures `infra up` fetched the jars."""
    infra = settings.load(settings.CommonSettings).home / "infra"
    home = tmp_path_factory.mktemp("secure-kafka")
    (home / "lib").symlink_to(infra / "lib")
    listener = SaslSslListener(
        port=free_port(),
        certificate_chain=certificates.server_chain,
        private_key=certificates.server_key,
        ca=certificates.ca,
        username=USER,
        password=PASSWORD,
    )
    node = KafkaNode(home, port=free_port(), controller_port=free_port(), sasl_ssl=listener)
    started = time.monotonic()
    try:
        node.up(lambda _line: None)
        took = time.monotonic() - started
        print(f"Kafka with SASL_SSL on {node.sasl_ssl_bootstrap} answered in {took:.1f}s")
        yield node
    finally:
        node.down()


@pytest.fixture(scope="module")
def security_env(certificates: Certificates) -> dict[str, str]:
    """Mutual TLS and SCRAM: every security setting in use."""
    return {
        "ZEROTRACE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "ZEROTRACE_KAFKA_SSL_CA": str(certificates.ca),
        "ZEROTRACE_KAFKA_SSL_CERT": str(certificates.client_cert),
        "ZEROTRACE_KAFKA_SSL_KEY": str(certificates.client_key),
        "ZEROTRACE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "ZEROTRACE_KAFKA_SASL_USERNAME": USER,
        "ZEROTRACE_KAFKA_SASL_PASSWORD": PASSWORD,
    }


@pytest.fixture(scope="module")
def security(security_env: dict[str, str]) -> KafkaSecurity:
    return kafka_security(settings.load(settings.CommonSettings, security_env))


@pytest.fixture
def env(
    secure_kafka: KafkaNode, security_env: dict[str, str], opensearch_url: str, tmp_path: Path
) -> dict[str, str]:
    return {
        **os.environ,
        **security_env,
        "ZEROTRACE_KAFKA": secure_kafka.sasl_ssl_bootstrap,
        "ZEROTRACE_OPENSEARCH": opensearch_url,
        "ZEROTRACE_NODE_ID": f"secure-{uuid.uuid4().hex[:8]}",
        "ZEROTRACE_HOME": str(tmp_path),
    }


def test_the_slice_runs_over_tls_and_scram(
    env: dict[str, str], security: KafkaSecurity, tmp_path: Path
) -> None:
    """test_faust_shell's correlator slice, without the stop in the middle: each of its
    conversations comes out once in derived.llm and in OpenSearch. On a new group, records
    are there before the worker's first assignment: this caught the faust shell taking them
    with the outgoing step while reading the progress (a TLS handshake made that window
    wide; see step_ready in zerotrace.faust_shell)."""
    bootstrap, node = env["ZEROTRACE_KAFKA"], env["ZEROTRACE_NODE_ID"]
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(bootstrap, security))
    workers = Workers(env, tmp_path)
    try:
        http_port = free_port()
        query = workers.start(
            "query", "--http-port", str(http_port), "--grpc-port", str(free_port())
        )
        correlator = workers.start("correlator")
        query.wait_for("query: indexing")  # its topics ensured over SASL_SSL
        rounds = conversation_rounds(node, f"{node}-conn")
        records = [r for batch in rounds for r in batch]
        produce(bootstrap, codec, names.RAW_SOCKET, records, security)

        def llm() -> list[dict[str, object]]:
            return derived(bootstrap, codec, names.DERIVED_LLM, node, security)

        wait_until(
            "an LLM record per conversation", lambda: len(llm()) >= CONVERSATIONS, correlator
        )
        found = llm()
        ids = Counter(str(r["request_id"]) for r in found)
        assert len(ids) == CONVERSATIONS and max(ids.values()) == 1, ids.most_common(3)
        assert {r["output_tokens"] for r in found} == {1, 8}
        stored = lambda: len(stored_llm_ids(http_port, node)) >= CONVERSATIONS  # noqa: E731
        wait_until("every LLM record in OpenSearch", stored, query)
        assert sorted(stored_llm_ids(http_port, node)) == sorted(ids)
    finally:
        workers.stop_all()


def _refused_within_bound(bootstrap: str, security: KafkaSecurity) -> str:
    started = time.monotonic()
    with pytest.raises((ConfigError, TransientIO)) as caught:
        check_reachable(bootstrap, timeout_s=3, security=security)
    assert time.monotonic() - started < REFUSAL_BOUND_S
    line = str(caught.value)
    assert "\n" not in line
    return f"{type(caught.value).__name__}: {line}"


def test_a_wrong_password_is_refused_in_one_line(
    secure_kafka: KafkaNode, security: KafkaSecurity, env: dict[str, str]
) -> None:
    bootstrap = secure_kafka.sasl_ssl_bootstrap
    wrong = replace(security, sasl_password="not-" + PASSWORD)
    said = _refused_within_bound(bootstrap, wrong)
    assert said.startswith(f"ConfigError: Kafka at {bootstrap} refused this client")
    assert "invalid credentials" in said and "SCRAM-SHA-512" in said
    assert PASSWORD not in said

    # The same line from a command, and its exit status.
    bad = {**env, "ZEROTRACE_KAFKA_SASL_PASSWORD": "not-" + PASSWORD}
    command = [sys.executable, "-m", "zerotrace_cli", "topics", "--create"]
    result = subprocess.run(
        command, cwd=REPO, env=bad, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "invalid credentials" in result.stderr
    assert result.stdout == ""


def test_a_broker_certificate_from_an_unknown_ca_is_refused(
    secure_kafka: KafkaNode, security: KafkaSecurity
) -> None:
    """Without ZEROTRACE_KAFKA_SSL_CA the system's trust store, which lacks the test CA."""
    said = _refused_within_bound(secure_kafka.sasl_ssl_bootstrap, replace(security, ssl_ca=""))
    assert said.startswith("ConfigError:") and "certificate verify failed" in said


def test_a_plaintext_client_gets_nothing_from_the_sasl_ssl_port(secure_kafka: KafkaNode) -> None:
    said = _refused_within_bound(secure_kafka.sasl_ssl_bootstrap, KafkaSecurity())
    assert said.startswith(f"TransientIO: Kafka at {secure_kafka.sasl_ssl_bootstrap} does not")


def test_the_listeners_stay_apart(secure_kafka: KafkaNode, security: KafkaSecurity) -> None:
    """The node's PLAINTEXT port (the one `infra up` has) needs no settings, and a client
    with the SASL_SSL settings gets no further there than its TLS handshake. (librdkafka
    words it as "SSL handshake failed: ... connecting to a PLAINTEXT broker listener?" or
    "SSL connection closed by peer", by how the broker's close meets the handshake.)"""
    KafkaBus(secure_kafka.bootstrap).ensure_topics([names.SCHEMAS])
    said = _refused_within_bound(secure_kafka.bootstrap, security)
    assert said.startswith(f"TransientIO: Kafka at {secure_kafka.bootstrap} does not answer")
    assert "SSL" in said
