"""Other protocols through the real collector: a real redis-server (Debian's, started here on
a free port, tests/harness/sql_servers.py) and a client that sends a known workload over one
connection: every command comes out as exactly one redis span, with its name, its status (an
error reply fails it, with the error prefix as its status code) and the server's address;
pipelined commands too. Nothing of the values the client stored is kept (arguments become
`?`). The same spans come embedded in plaintext (`zerotrace run`, the socket probe), embedded
over TLS (redis-server's --tls-port; the client's Python ssl is read by the TLS uprobes), and
from a capture analyzed afterwards (`zerotrace capture`, `zerotrace analyze --json`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ebpf_required import require_ebpf
from tests.harness.certificates import Certificates, make_certificates
from tests.harness.span_paths import captured_spans, embedded_spans
from tests.harness.sql_servers import REDIS, Server, assert_spans, redis_server

require_ebpf()


@pytest.fixture(scope="module")
def redis() -> Iterator[Server]:
    with redis_server() as server:
        yield server


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def test_every_redis_command_is_one_span(tmp_path: Path, redis: Server) -> None:
    spans = embedded_spans(REDIS.command(redis), [redis.port], tmp_path)
    assert_spans(REDIS.spans_in(spans), REDIS, redis)


def test_the_same_spans_over_tls(tmp_path: Path, certificates: Certificates) -> None:
    with redis_server(certificates) as server:
        command = REDIS.command(server, certificates.ca)
        spans = embedded_spans(command, [server.port], tmp_path, tls=True)
    assert_spans(REDIS.spans_in(spans), REDIS, server)


def test_the_same_spans_from_a_capture(tmp_path: Path, redis: Server) -> None:
    spans = captured_spans(REDIS.command(redis), redis.port, tmp_path)
    assert_spans(REDIS.spans_in(spans), REDIS, redis)
