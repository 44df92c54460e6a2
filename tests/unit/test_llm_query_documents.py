"""LLM requests through the real indexing path (in-process bus -> Indexer -> DuckDB): the
document, its id, replays, and spans and LLM records side by side. Also the realistic
LlmRequest data the other LLM and web tests use."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.unit.test_query_service import publish_spans
from zerotrace import names
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.store import Query, Store
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import INDEX_SPECS, LLM_REQUESTS, SPANS, document_for
from zerotrace_query.indexer import Indexer

MS = 1_000_000
S = 1_000_000_000


def llm_request(**overrides: Any) -> dict[str, Any]:
    """One complete zerotrace.derived.LlmRequest datum: a streamed chat completion."""
    start = overrides.pop("start_ns", 1_700_000_000 * S)
    request = {
        "request_id": "req-1",
        "span_id": "span-1",
        "node_id": "node-a",
        "service": "vllm",
        "observation_point": "SERVER",
        "model": "llama-3.1-8b-instruct",
        "endpoint": "chat.completions",
        "stream": True,
        "start_ns": start,
        "end_ns": start + 2 * S,
        "ttft_ns": 120 * MS,
        "tpot_ns": 20 * MS,
        "input_tokens": 512,
        "output_tokens": 95,
        "output_tokens_estimated": False,
        "finish_reason": "stop",
        "error": None,
        "cached_tokens": None,
        "itl_p50_ns": 19 * MS,
        "itl_p99_ns": 31 * MS,
        "itl_max_ns": 40 * MS,
        "tokens_per_s": 50.0,
        "status_code": 200,
        "path": "/v1/chat/completions",
        "pid": 4242,
        "first_byte_ns": 110 * MS,
        "content_events": 95,
    }
    request.update(overrides)
    return request


# (model, service, observation point, base TTFT ms, TPOT ms): what a small serving fleet shows.
FLEET = (
    ("llama-3.1-8b-instruct", "vllm", "SERVER", 90, 14),
    ("qwen2.5-32b-instruct", "sglang", "SERVER", 260, 32),
    ("gpt-oss-20b", "gateway", "CLIENT", 180, 22),
)


def realistic_requests(
    end_ns: int, count: int, span_s: int = 600, seed: int = 7
) -> list[dict[str, Any]]:
    """`count` requests started over the `span_s` seconds before `end_ns`: log-normal TTFT and
    TPOT per model, streamed and not, estimated token counts, a few 5xx and cut streams."""
    rng = random.Random(seed)
    requests = []
    for i in range(count):
        model, service, point, ttft_ms, tpot_ms = FLEET[i % len(FLEET)]
        start = end_ns - span_s * S + rng.randrange(span_s * S - 30 * S)
        stream = rng.random() < 0.8
        out = int(rng.lognormvariate(5, 0.7)) + 2
        ttft = int(ttft_ms * MS * rng.lognormvariate(0, 0.35))
        tpot = int(tpot_ms * MS * rng.lognormvariate(0, 0.2))
        duration = ttft + tpot * (out - 1)
        request = llm_request(
            request_id=f"req-{seed}-{i:05d}",
            span_id=f"span-{seed}-{i:05d}",
            service=service,
            observation_point=point,
            model=model,
            endpoint=rng.choice(("chat.completions", "chat.completions", "completions")),
            stream=stream,
            start_ns=start,
            ttft_ns=ttft if stream else None,
            tpot_ns=tpot if stream else None,
            input_tokens=rng.randrange(40, 4000),
            output_tokens=out,
            output_tokens_estimated=stream and rng.random() < 0.3,
            tokens_per_s=round(S / tpot, 2) if stream else None,
            itl_p50_ns=tpot if stream else None,
            first_byte_ns=ttft if stream else duration,
            content_events=out if stream else 1,
            pid=1000 + i % len(FLEET),
        )
        request["end_ns"] = start + duration
        roll = rng.random()
        if roll < 0.04:
            request.update(
                status_code=503,
                error="HTTP 503: server overloaded",
                output_tokens=None,
                ttft_ns=None,
                tpot_ns=None,
                tokens_per_s=None,
                finish_reason=None,
            )
            request["end_ns"] = start + 5 * MS
        elif roll < 0.06:
            request.update(error="stream cut before [DONE]", finish_reason=None)
        requests.append(request)
    return requests


def publish_llm(
    broker: InMemoryBroker, codec: AvroCodec, requests: Sequence[dict[str, Any]]
) -> None:
    producer = broker.producer()
    for request in requests:
        producer.produce(
            names.DERIVED_LLM.name,
            request["service"].encode(),
            codec.encode(names.DERIVED_LLM.record, request),
        )


def index_all(broker: InMemoryBroker, store: Store, codec: AvroCodec, group: str) -> Indexer:
    """Run a fresh Indexer (its own consumer group) until it finds nothing more."""
    indexer = Indexer(broker.consumer(group), broker.producer(), store, codec, ManualClock(7))
    while indexer.run_once(0.05):
        pass
    return indexer


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


def test_llm_request_document_id_status_and_duration() -> None:
    index, doc_id, doc = document_for(names.DERIVED_LLM.record, llm_request())
    assert (index, doc_id) == (names.INDEX_LLM, "req-1")
    assert doc["status"] == "ok"
    assert doc["duration_ns"] == 2 * S
    assert doc["itl_p99_ns"] == 31 * MS  # fields outside the spec are kept
    failed = document_for(names.DERIVED_LLM.record, llm_request(status_code=500))[2]
    assert failed["status"] == "error"
    cut = document_for(names.DERIVED_LLM.record, llm_request(error="stream cut"))[2]
    assert cut["status"] == "error"


def test_the_spec_covers_the_searchable_fields() -> None:
    assert LLM_REQUESTS in INDEX_SPECS and SPANS in INDEX_SPECS
    for name in ("request_id", "model", "service", "observation_point", "ttft_ns", "pid"):
        assert name in LLM_REQUESTS.fields
    assert LLM_REQUESTS.fields["tokens_per_s"] == "double"


def test_spans_and_llm_requests_are_indexed_and_a_replay_does_not_duplicate(
    broker: InMemoryBroker, store: DuckDBStore, codec: AvroCodec
) -> None:
    requests = realistic_requests(1_700_000_600 * S, 40)
    publish_llm(broker, codec, requests)
    publish_spans(broker, codec, 5)
    first = index_all(broker, store, codec, "g1")
    assert (first.indexed, first.dead_letters) == (45, 0)
    index_all(broker, store, codec, "replay")  # reads everything again from the start
    assert store.count(names.INDEX_LLM, Query()) == 40
    assert store.count(names.INDEX_SPANS, Query()) == 5
    errors = store.count(names.INDEX_LLM, Query(equals={"status": "error"}))
    assert errors == sum(1 for r in requests if r["error"] or r["status_code"] >= 400) > 0
    (stored,) = store.search(names.INDEX_LLM, Query(equals={"request_id": "req-7-00003"}))
    assert stored["_id"] == "req-7-00003"
    assert {k: stored[k] for k in requests[3]} == requests[3]


def test_realistic_requests_fit_the_schema(codec: AvroCodec) -> None:
    for request in realistic_requests(1_700_000_600 * S, 60):
        record, datum = codec.decode(codec.encode(names.DERIVED_LLM.record, request))
        assert record == names.DERIVED_LLM.record
        assert datum == request
