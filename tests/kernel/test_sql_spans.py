"""SQL databases through the real collector: a real PostgreSQL 15 and a real MariaDB, each
started once for the module (tests/harness/sql_servers.py), each driven by a known workload
over one connection. Every call of the client comes out as exactly one span with its name,
operation, query text (literals as `?`), SQLSTATE or MySQL error code, and rows:

- embedded, plaintext (`zerotrace run --no-tls`, the socket probe);
- embedded, over TLS (the servers offer it; the clients, pg8000 and PyMySQL, use Python's ssl,
  so the spans come from the TLS uprobes' plaintext), the same spans;
- captured on lo (`zerotrace capture`) and analyzed (`zerotrace analyze --json`), the same
  spans again.

MariaDB's workloads: PyMySQL (text protocol, plus COM_STMT_PREPARE/EXECUTE/CLOSE sent over its
connection) and a raw client of the compressed protocol (PyMySQL refuses compress=True).
The embedded runs put every workload under one `zerotrace run` (its probes take seconds to
load) and split the spans by client process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness.certificates import Certificates, make_certificates
from tests.harness.span_paths import by_process, captured_spans, embedded_spans, in_turn
from tests.harness.sql_servers import (
    MARIADB,
    MARIADB_COMPRESSED,
    POSTGRES,
    Server,
    assert_spans,
    mariadb_server,
    postgres_server,
)

require_ebpf()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def postgres(certificates: Certificates) -> Iterator[Server]:
    with postgres_server(certificates) as server:  # ssl=on: TLS offered, plaintext allowed
        yield server


@pytest.fixture(scope="module")
def mariadb(certificates: Certificates) -> Iterator[Server]:
    with mariadb_server(certificates) as server:
        yield server


# name: (workload, its server's fixture); the compressed client speaks no TLS.
WORKLOADS = {
    "postgresql": (POSTGRES, "postgres"),
    "mariadb": (MARIADB, "mariadb"),
    "mariadb-compressed": (MARIADB_COMPRESSED, "mariadb"),
}
TLS_WORKLOADS = ["postgresql", "mariadb"]
Spans = list[dict[str, Any]]


def run_embedded(chosen: list[str], request: pytest.FixtureRequest, tls: bool) -> dict[str, Spans]:
    """The named workloads one after the other under one `zerotrace run`: each one's spans."""
    certificates = request.getfixturevalue("certificates") if tls else None
    commands, ports = [], set()
    for name in chosen:
        workload, fixture = WORKLOADS[name]
        server = request.getfixturevalue(fixture)
        commands.append(workload.command(server, certificates.ca if certificates else None))
        ports.add(server.port)
    folder = request.getfixturevalue("tmp_path_factory").mktemp("tls" if tls else "plaintext")
    spans = embedded_spans(in_turn(*commands), sorted(ports), folder, tls=tls)
    groups = by_process([s for s in spans if s["kind"].startswith(("postgresql.", "mysql."))])
    assert len(groups) == len(chosen), [len(g) for g in groups]
    return dict(zip(chosen, groups, strict=True))


@pytest.fixture(scope="module")
def plaintext_spans(request: pytest.FixtureRequest) -> dict[str, Spans]:
    return run_embedded(sorted(WORKLOADS), request, tls=False)


@pytest.fixture(scope="module")
def tls_spans(request: pytest.FixtureRequest) -> dict[str, Spans]:
    return run_embedded(TLS_WORKLOADS, request, tls=True)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_call_is_one_span(
    name: str, plaintext_spans: dict[str, Spans], request: pytest.FixtureRequest
) -> None:
    workload, server = WORKLOADS[name]
    assert_spans(plaintext_spans[name], workload, request.getfixturevalue(server))


@pytest.mark.parametrize("name", TLS_WORKLOADS)
def test_the_same_spans_over_tls(
    name: str, tls_spans: dict[str, Spans], request: pytest.FixtureRequest
) -> None:
    workload, server = WORKLOADS[name]
    assert_spans(tls_spans[name], workload, request.getfixturevalue(server))


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_same_spans_from_a_capture(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    workload, fixture = WORKLOADS[name]
    server: Server = request.getfixturevalue(fixture)
    spans = captured_spans(workload.command(server), server.port, tmp_path)
    assert_spans(workload.spans_in(spans), workload, server)
