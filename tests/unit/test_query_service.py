"""The query service over the in-process bus and DuckDB: indexing, replays, poison, the APIs."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.unit.test_correlator_pipeline import raw_open
from zerotrace import names
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_correlator.fileio_spans import file_open_span
from zerotrace_query.grpc_api import GrpcApi, list_spans
from zerotrace_query.http_api import HttpApi, parse_span_filter
from zerotrace_query.indexer import Indexer


@pytest.fixture
def broker() -> InMemoryBroker:
    b = InMemoryBroker()
    b.ensure_topics()
    return b


@pytest.fixture
def store() -> Iterator[DuckDBStore]:
    s = DuckDBStore()
    yield s
    s.close()


def publish_spans(broker: InMemoryBroker, codec: AvroCodec, count: int) -> None:
    producer = broker.producer()
    for i in range(count):
        span = file_open_span(
            raw_open(
                event_id=f"e{i}", start_ns=1000 + i, end_ns=2000 + i, pid=40 + i % 2, path=f"/f{i}"
            )
        )
        producer.produce(
            names.DERIVED_SPAN.name,
            span["trace_id"].encode(),
            codec.encode(names.DERIVED_SPAN.record, span),
        )


def indexer(broker: InMemoryBroker, store: DuckDBStore, codec: AvroCodec, group: str) -> Indexer:
    return Indexer(broker.consumer(group), broker.producer(), store, codec, ManualClock(7))


def test_indexes_spans_and_a_replay_does_not_duplicate(
    broker: InMemoryBroker, store: DuckDBStore, codec: AvroCodec
) -> None:
    publish_spans(broker, codec, 9)
    first = indexer(broker, store, codec, "g1")
    assert first.run_once(0.1) == 9
    assert first.run_once(0.1) == 0  # committed: nothing read twice
    replay = indexer(broker, store, codec, "replay-group")  # reads all again from the start
    assert replay.run_once(0.1) == 9
    assert store.count("spans", Query()) == 9


def test_each_index_s_write_is_followed_by_the_pause_point(
    broker: InMemoryBroker, store: DuckDBStore, codec: AvroCodec
) -> None:
    """zerotrace.cpu_slices: a batch of several indices is several pieces of CPU time."""
    publish_spans(broker, codec, 3)
    points: list[int] = []
    idx = Indexer(
        broker.consumer("g"),
        broker.producer(),
        store,
        codec,
        ManualClock(7),
        pause=lambda: points.append(1),
    )
    assert idx.run_once(0.1) == 3
    assert points == [1]  # one index (spans), one write, one point after it


def test_poison_goes_to_the_dead_letter_topic_and_indexing_goes_on(
    broker: InMemoryBroker, store: DuckDBStore, codec: AvroCodec
) -> None:
    broker.producer().produce(names.DERIVED_SPAN.name, b"k", b"not avro at all")
    publish_spans(broker, codec, 3)
    idx = indexer(broker, store, codec, "g")
    assert idx.run_once(0.1) == 3
    assert idx.dead_letters == 1
    dlq = broker.consumer("check")
    dlq.subscribe([names.DEAD_LETTER.name])
    letter = dlq.poll(0.1)
    assert letter is not None
    _record, datum = codec.decode(letter.value)
    assert datum["consumer"] == names.GROUP_QUERY_INDEXER
    assert datum["value"] == b"not avro at all"


def test_http_and_grpc_list_the_same_spans(
    broker: InMemoryBroker, store: DuckDBStore, codec: AvroCodec
) -> None:
    publish_spans(broker, codec, 6)
    indexer(broker, store, codec, "g").run_once(0.1)
    http = HttpApi(store, port=0).start()
    grpc = GrpcApi(store, port=0).start()
    try:
        with urllib.request.urlopen(f"{http.url}/api/v1/spans?pid=41&limit=10") as response:
            body = json.load(response)
        via_grpc = list_spans(grpc.address, pid=41, limit=10)
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(f"{http.url}/api/v1/spans?pid=abc")
        assert bad.value.code == 400
        bad.value.close()
    finally:
        http.stop()
        grpc.stop()
    assert body["count"] == 3
    assert [s["start_ns"] for s in body["spans"]] == [1005, 1003, 1001]  # newest first
    assert [s.span_id for s in via_grpc] == [s["span_id"] for s in body["spans"]]
    assert via_grpc[0].attributes[names.ATTR_FILE_PATH] == "/f5"


def test_span_filter_parsing() -> None:
    flt = parse_span_filter("kind=file.open&pid=3&from=10&to=20&limit=5")
    assert (flt.kind, flt.pid, flt.start_ns_from, flt.start_ns_to, flt.limit) == (
        "file.open",
        3,
        10,
        20,
        5,
    )
    with pytest.raises(ValueError, match="'limit'"):
        parse_span_filter("limit=x")
