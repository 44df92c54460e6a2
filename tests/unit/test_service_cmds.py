"""The distributed-mode commands (zerotrace_cli/service_cmds.py) that run without Kafka or
OpenSearch: `topics` lists the names registry, `settings` every variable of every service,
`spans` asks a running query service over HTTP or gRPC (one over the embedded store here),
and a worker whose Kafka is away stops with one line."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.unit.test_correlator_pipeline import raw_open
from tests.unit.test_span_search import fill_spans, matching, protocol_spans, span_codec
from zerotrace import names
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_cli import main
from zerotrace_correlator.fileio_spans import file_open_span
from zerotrace_query.documents import SPANS, document_for
from zerotrace_query.grpc_api import GrpcApi
from zerotrace_query.http_api import HttpApi
from zerotrace_query.span_search import SpanFilter

END_NS = 1_700_000_900 * 1_000_000_000
MS = 1_000_000

pytestmark = pytest.mark.unit


def test_topics_lists_every_registry_topic(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [t.name for t in names.ALL_TOPICS]
    fileio = lines[[t.name for t in names.ALL_TOPICS].index(names.RAW_FILEIO.name)]
    assert fileio.split() == [
        "raw.fileio",
        "key=pid",
        "partitions=6",
        "7d",
        "zerotrace.raw.FileIO",
    ]
    assert lines[-1].split()[3] == "compacted"


def test_topics_by_name_and_an_unknown_name_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["topics", "dlq", "raw.gpu"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["dlq", "raw.gpu"]
    assert main(["topics", "raw.nosuch"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("zerotrace: ") and "raw.nosuch" in err and err.count("\n") == 1


def test_settings_lists_every_service_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZEROTRACE_PROFILE_WINDOW_MS", "2500")
    monkeypatch.setenv("ZEROTRACE_OPENSEARCH_PASSWORD", "hunter2")
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    variables = [line.split("=", 1)[0] for line in out.splitlines()]
    assert "ZEROTRACE_KAFKA" in variables and "ZEROTRACE_PROFILE_GROUP" in variables
    assert len(variables) == len(set(variables))
    assert "ZEROTRACE_PROFILE_WINDOW_MS=2500  # " in out
    assert "hunter2" not in out and "ZEROTRACE_OPENSEARCH_PASSWORD=***" in out


@pytest.fixture(scope="module")
def store() -> Iterator[DuckDBStore]:
    store = DuckDBStore()
    store.ensure_index(SPANS)
    docs = []
    for i in range(4):
        raw = raw_open(event_id=f"e{i}", pid=40 + i % 2, start_ns=1000 + i, path=f"/f{i}")
        _index, doc_id, doc = document_for(names.DERIVED_SPAN.record, file_open_span(raw))
        docs.append((doc_id, doc))
    store.bulk_upsert(SPANS.name, docs)
    store.refresh(SPANS.name)
    yield store
    store.close()


AT = time.strftime("%H:%M:%S", time.localtime(0))  # the spans start 1 µs after the epoch
EXPECTED_PID_41 = [
    f"{AT}     0.000 ms OK    file.open          python3[41] open /f3",
    f"{AT}     0.000 ms OK    file.open          python3[41] open /f1",
]


def test_spans_over_http(store: DuckDBStore, capsys: pytest.CaptureFixture[str]) -> None:
    http = HttpApi(store, port=0).start()
    try:
        assert main(["spans", "--http", http.url, "--pid", "41", "--kind", "file.open"]) == 0
    finally:
        http.stop()
    assert capsys.readouterr().out.splitlines() == EXPECTED_PID_41


def test_spans_over_grpc(store: DuckDBStore, capsys: pytest.CaptureFixture[str]) -> None:
    grpc = GrpcApi(store, port=0).start()
    try:
        assert main(["spans", "--grpc", grpc.address, "--pid", "41", "--limit", "1"]) == 0
    finally:
        grpc.stop()
    assert capsys.readouterr().out.splitlines() == EXPECTED_PID_41[:1]


def test_spans_filtered_by_protocol_status_and_duration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spans = protocol_spans(END_NS, 120, seed=4)
    store = DuckDBStore()
    fill_spans(store, span_codec(), spans)
    http, rpc = HttpApi(store, port=0).start(), GrpcApi(store, port=0).start()
    flt = SpanFilter(protocol=names.PROTOCOL_REDIS, status="OK", min_duration_ns=MS, limit=500)
    want = matching(spans, flt)
    assert want, "the seed must give some matches"
    args = ["spans", "--protocol", "redis", "--status", "ok", "--min-ms", "1", "--limit", "500"]
    try:
        assert main([*args, "--http", http.url]) == 0
        over_http = capsys.readouterr().out.splitlines()
        assert main([*args, "--grpc", rpc.address]) == 0
        over_grpc = capsys.readouterr().out.splitlines()
    finally:
        http.stop()
        rpc.stop()
        store.close()
    assert over_http == over_grpc
    assert len(over_http) == len(want)
    for line in over_http:
        took_ms, status, kind = float(line.split()[1]), line.split()[3], line.split()[4]
        assert took_ms >= 1 and status == "OK" and kind.startswith("redis.")


def test_a_worker_without_kafka_stops_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("ZEROTRACE_KAFKA", f"127.0.0.1:{port}")
    assert main(["correlator"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"zerotrace: Kafka at 127.0.0.1:{port} does not answer")
    assert err.count("\n") == 1
