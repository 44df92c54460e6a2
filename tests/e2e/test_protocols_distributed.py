"""Every protocol's spans through the distributed path: real servers (PostgreSQL, MariaDB,
Redis, hypercorn over h2c, a grpcio server, a DNS server over UDP and TCP), each driven by its
known workload while `zerotrace collector --port ...` publishes to the real Kafka, the faust
correlator derives the spans and the query service indexes them into the real OpenSearch;
read back through the query service's HTTP API (`/api/v1/spans?kind=...`), every call is
exactly one span with the same attributes the embedded path gives (tests/kernel/
test_sql_spans.py, test_protocol_spans.py, test_h2_spans.py, test_dns_spans.py hold those)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from tests.ebpf_required import require_ebpf
from tests.harness import h2_servers as hs
from tests.harness.dns_server import PLAIN_CLIENT, TCP_CLIENT, DnsServer, free_loopback
from tests.harness.services import REPO, Service, reap
from tests.harness.sql_servers import (
    MARIADB,
    POSTGRES,
    REDIS,
    Server,
    Workload,
    assert_spans,
    free_port,
    mariadb_server,
    postgres_server,
    redis_server,
)
from tests.kernel.test_dns_spans import PLAIN, TCP, _expected, _key
from tests.kernel.test_h2_spans import check_grpc, check_h2
from zerotrace import names

require_ebpf()

HARNESS = [sys.executable, "-m", "tests.harness.h2_servers"]
SETTLE_S = 150  # the correlator derives a span once its answer is seen; indexing follows


@contextmanager
def h2_server(command: list[str], port: int) -> Iterator[int]:
    server = subprocess.Popen[str](
        [*HARNESS, *command],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, command
                time.sleep(0.05)
        yield port
    finally:
        server.terminate()
        reap(server)


def spans_of(http_port: int, protocol: str, node_id: str) -> list[dict[str, Any]]:
    """This node's spans of `protocol` seen at its clients (the servers run on the observed
    ports too: their own `.server` spans are left aside here)."""
    kind = names.protocol_span_kind(protocol, "client")
    url = f"http://127.0.0.1:{http_port}/api/v1/spans?kind={kind}&limit=1000"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    return [s for s in body["spans"] if s["node_id"] == node_id]


def test_every_call_of_every_protocol_through_kafka_faust_and_opensearch(
    kafka_bootstrap: str, opensearch_url: str, tmp_path: Path
) -> None:
    node_id = f"e2e-proto-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "ZEROTRACE_KAFKA": kafka_bootstrap,
        "ZEROTRACE_OPENSEARCH": opensearch_url,
        "ZEROTRACE_NODE_ID": node_id,
        "ZEROTRACE_HOME": str(tmp_path),
    }
    gen = hs.compile_proto(tmp_path / "gen")
    with ExitStack() as servers:
        pg: Server = servers.enter_context(postgres_server())
        maria: Server = servers.enter_context(mariadb_server())
        red: Server = servers.enter_context(redis_server())
        h2c = servers.enter_context(h2_server(["hypercorn", str(port := free_port())], port))
        grpc = servers.enter_context(h2_server(["grpc", str(port := free_port()), str(gen)], port))
        dns = servers.enter_context(DnsServer(free_loopback()))  # port 53: always observed
        sql: list[tuple[Workload, Server]] = [(POSTGRES, pg), (MARIADB, maria), (REDIS, red)]
        ports = [pg.port, maria.port, red.port, h2c, grpc]
        http_port = free_port()
        correlator = Service("correlator", ["correlator"], env, tmp_path)
        query = Service(
            "query",
            ["query", "--http-port", str(http_port), "--grpc-port", str(free_port())],
            env,
            tmp_path,
        )
        port_options = [option for p in ports for option in ("--port", str(p))]
        collector = Service(
            "collector", ["collector", "--no-files", "--no-tls", *port_options], env, tmp_path
        )
        expected = {w.protocol: sum(w.spans.values()) for w, _ in sql}
        expected[names.PROTOCOL_HTTP2] = len(hs.H2_CALLS)
        expected[names.PROTOCOL_GRPC] = len(hs.GRPC_CALLS)
        expected[names.PROTOCOL_DNS] = len(PLAIN) + len(TCP)
        found: dict[str, list[dict[str, Any]]] = {}
        try:
            query.wait_for("query: indexing")
            collector.wait_for("collector attached")
            for workload, server in sql:
                client = subprocess.run(
                    workload.command(server), capture_output=True, text=True, timeout=120
                )
                assert client.returncode == 0, client.stderr[-3000:]
            clients = subprocess.run(
                [*HARNESS, "plain-clients", str(h2c), str(grpc), str(gen)],
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=120,
            )
            assert clients.returncode == 0, clients.stderr[-3000:]
            for script, queries in ((PLAIN_CLIENT, PLAIN), (TCP_CLIENT, TCP)):
                asked = subprocess.run(
                    [sys.executable, "-c", script, dns.address, "53", json.dumps(queries)],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert asked.returncode == 0, asked.stderr[-3000:]
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline:
                time.sleep(2)
                found = {p: spans_of(http_port, p, node_id) for p in expected}
                if all(len(found[p]) >= n for p, n in expected.items()):
                    break
        finally:
            assert collector.stop() == 0, collector.log.read_text()[-2000:]
            correlator.stop()
            query.stop()
    counts = {p: len(found.get(p, [])) for p in expected}
    assert counts == expected, collector.log.read_text()[-2000:]
    for workload, server in sql:
        assert_spans(workload.spans_in(found[workload.protocol]), workload, server)
    check_h2(found[names.PROTOCOL_HTTP2], h2c)
    check_grpc(found[names.PROTOCOL_GRPC], grpc)
    dns_spans = found[names.PROTOCOL_DNS]
    assert Counter(_key(s) for s in dns_spans) == _expected("udp", PLAIN) + _expected("tcp", TCP)
    for span in dns_spans:
        attrs = span["attributes"]
        assert (attrs[names.ATTR_SERVER_ADDRESS], attrs[names.ATTR_SERVER_PORT]) == (
            dns.address,
            "53",
        )
