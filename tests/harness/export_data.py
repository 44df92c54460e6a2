"""A store filled as a small LLM gateway topology would fill it, for the export tests: a load
generator calls an asyncio gateway, which calls Redis, PostgreSQL and an upstream
OpenAI-compatible server (llama.cpp), on three nodes. Every record has the derived schema's
shape and goes through the Avro codec and documents.document_for into the store, as the
indexer writes it.

Per request: client span -> gateway server span (tcp_seq) -> redis / postgresql / upstream
client spans (same_thread) -> upstream server span (tcp_seq, and for some also traceparent,
which wins); two LLM requests (the gateway's CLIENT view and the upstream's SERVER view); and
profile windows (10 s, every profile type) of the three processes. Times run across a UTC
midnight, so exports have two date partitions; one node id needs escaping in a path.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import duckdb

from tests.unit.profile_data import WINDOW_NS, WINDOW_STACKS
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.store import Query, Store
from zerotrace_query.documents import INDEX_SPECS, document_for

S = 1_000_000_000
MS = 1_000_000
# 2026-12-05T23:58:00Z: the data runs across midnight into 2026-12-06.
T0 = 1_796_515_080 * S
CLIENT_NODE, GATEWAY_NODE, UPSTREAM_NODE = "loadgen-1", "gpu-07", "edge:1"
MODEL = "llama-3.1-8b-instruct"


@dataclass
class World:
    spans: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    llm: list[dict[str, Any]] = field(default_factory=list)
    profiles: list[dict[str, Any]] = field(default_factory=list)

    def records(self) -> Iterable[tuple[str, dict[str, Any]]]:
        for topic, items in (
            (names.DERIVED_SPAN, self.spans),
            (names.DERIVED_TRACE, self.edges),
            (names.DERIVED_LLM, self.llm),
            (names.DERIVED_PROFILE, self.profiles),
        ):
            for item in items:
                yield topic.record, item


def _span(
    span_id: str,
    node: str,
    service: str,
    pid: int,
    kind: str,
    name: str,
    start: int,
    duration: int,
    attrs: Mapping[str, str],
    status: str = "OK",
) -> dict[str, Any]:
    return {
        "span_id": span_id,
        "trace_id": f"{span_id}{'0' * 16}",
        "parent_span_id": None,
        "node_id": node,
        "pid": pid,
        "tid": pid + 3,
        "process_name": service.split(".")[0],
        "container_id": None if node != UPSTREAM_NODE else "c0ffee" * 10 + "abcd",
        "service": service,
        "kind": kind,
        "name": name,
        "start_ns": start,
        "end_ns": start + duration,
        "status": status,
        "attributes": dict(attrs),
        "source_event_ids": [f"{node}/{pid}/{start}/r", f"{node}/{pid}/{start + duration}/w"],
    }


def _edge(parent: Mapping[str, Any], child: Mapping[str, Any], rule: str) -> dict[str, Any]:
    return {
        "edge_id": f"{parent['span_id']}>{child['span_id']}>{rule}",
        "trace_id": parent["trace_id"],
        "parent_span_id": parent["span_id"],
        "child_span_id": child["span_id"],
        "rule": rule,
        "ts_ns": child["start_ns"],
    }


def _llm(span: Mapping[str, Any], point: str, rng: random.Random, ok: bool) -> dict[str, Any]:
    output = rng.randrange(20, 400)
    ttft = rng.randrange(40, 400) * MS
    tpot = rng.randrange(8, 40) * MS
    return {
        "request_id": span["span_id"],
        "span_id": span["span_id"],
        "node_id": span["node_id"],
        "service": span["service"],
        "observation_point": point,
        "model": MODEL,
        "endpoint": "chat.completions",
        "stream": True,
        "start_ns": span["start_ns"],
        "end_ns": span["end_ns"],
        "ttft_ns": ttft if ok else None,
        "tpot_ns": tpot if ok else None,
        "input_tokens": rng.randrange(30, 2000),
        "output_tokens": output if ok else None,
        "output_tokens_estimated": point == "SERVER",
        "finish_reason": "stop" if ok else None,
        "error": None if ok else "upstream closed the stream before [DONE]",
        "cached_tokens": rng.choice([None, 0, 128]),
        "itl_p50_ns": tpot if ok else None,
        "itl_p99_ns": tpot * 3 if ok else None,
        "itl_max_ns": tpot * 5 if ok else None,
        "tokens_per_s": round(1e9 / tpot, 3) if ok else None,
        "status_code": 200 if ok else 502,
        "path": "/v1/chat/completions",
        "pid": span["pid"],
        "first_byte_ns": ttft - 2 * MS if ok else None,
        "content_events": output if ok else 3,
    }


def gateway_world(requests: int, seed: int = 5) -> World:
    """`requests` requests through the topology, one every ~700 ms from T0, and the three
    processes' profile windows over the same time."""
    rng = random.Random(seed)
    world = World()
    for i in range(requests):
        start = T0 + i * 700 * MS + rng.randrange(0, 300) * MS
        total = rng.randrange(300, 2500) * MS
        ok = rng.random() > 0.1
        tag = f"{seed:02x}{i:06x}"
        client = _span(
            f"a{tag}0000000"[:16],
            CLIENT_NODE,
            "loadgen",
            4100,
            names.SPAN_KIND_HTTP_CLIENT,
            "POST /v1/chat/completions",
            start,
            total,
            {
                names.ATTR_HTTP_METHOD: "POST",
                names.ATTR_URL_PATH: "/v1/chat/completions",
                names.ATTR_SERVER_ADDRESS: "10.0.0.7",
                names.ATTR_SERVER_PORT: "8000",
                names.ATTR_HTTP_STATUS: "200" if ok else "502",
                names.ATTR_CONNECT_DURATION: str(rng.randrange(50, 400) * 1000),
                names.ATTR_TCP_REQUEST_SEQ: str(rng.randrange(1, 2**32)),
            },
            "OK" if ok else "ERROR",
        )
        server = _span(
            f"b{tag}0000000"[:16],
            GATEWAY_NODE,
            "gateway.app",
            5200,
            names.SPAN_KIND_HTTP_SERVER,
            "POST /v1/chat/completions",
            start + 300_000,
            total - 600_000,
            {
                names.ATTR_HTTP_METHOD: "POST",
                names.ATTR_URL_PATH: "/v1/chat/completions",
                names.ATTR_CLIENT_ADDRESS: "10.0.0.3",
                names.ATTR_CLIENT_PORT: str(40000 + i),
                names.ATTR_SERVER_DURATION: str(total - 900_000),
            },
            "OK" if ok else "ERROR",
        )
        redis = _span(
            f"c{tag}0000000"[:16],
            GATEWAY_NODE,
            "gateway.app",
            5200,
            names.protocol_span_kind(names.PROTOCOL_REDIS, "client"),
            "GET",
            start + 1 * MS,
            rng.randrange(100, 900) * 1000,
            {names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_REDIS, names.ATTR_SERVER_PORT: "6379"},
        )
        postgres = _span(
            f"d{tag}0000000"[:16],
            GATEWAY_NODE,
            "gateway.app",
            5200,
            names.protocol_span_kind(names.PROTOCOL_POSTGRESQL, "client"),
            "SELECT quotas",
            start + 3 * MS,
            rng.randrange(1, 9) * MS,
            {names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_POSTGRESQL},
        )
        upstream_call = _span(
            f"e{tag}0000000"[:16],
            GATEWAY_NODE,
            "gateway.app",
            5200,
            names.SPAN_KIND_HTTP_CLIENT,
            "POST /v1/chat/completions",
            start + 15 * MS,
            total - 40 * MS,
            {
                names.ATTR_HTTP_METHOD: "POST",
                names.ATTR_SERVER_ADDRESS: "10.0.0.9",
                names.ATTR_SERVER_PORT: "8080",
                names.ATTR_GEN_AI_REQUEST_MODEL: MODEL,
            },
            "OK" if ok else "ERROR",
        )
        upstream = _span(
            f"f{tag}0000000"[:16],
            UPSTREAM_NODE,
            "llama_cpp.server",
            6300,
            names.SPAN_KIND_HTTP_SERVER,
            "POST /v1/chat/completions",
            start + 15 * MS + 400_000,
            total - 41 * MS,
            {names.ATTR_HTTP_METHOD: "POST", names.ATTR_GEN_AI_REQUEST_MODEL: MODEL},
            "OK" if ok else "ERROR",
        )
        world.spans += [client, server, redis, postgres, upstream_call, upstream]
        world.edges += [
            _edge(client, server, names.TRACE_RULE_TCP_SEQ),
            _edge(server, redis, names.TRACE_RULE_SAME_THREAD),
            _edge(server, postgres, names.TRACE_RULE_SAME_THREAD),
            _edge(server, upstream_call, names.TRACE_RULE_SAME_THREAD),
            _edge(upstream_call, upstream, names.TRACE_RULE_TCP_SEQ),
        ]
        if i % 3 == 0:  # the gateway propagated a traceparent: that link wins over tcp_seq
            world.edges.append(_edge(upstream_call, upstream, names.TRACE_RULE_TRACEPARENT))
        world.llm += [_llm(upstream_call, "CLIENT", rng, ok), _llm(upstream, "SERVER", rng, ok)]
    end = T0 + requests * 700 * MS + 3 * S
    in_use = {k: v // 2 for k, v in WINDOW_STACKS["GPU_MEM_ALLOC"].items()}
    kinds = {**WINDOW_STACKS, "GPU_MEM_INUSE": in_use}
    for node, service, pid in (
        (CLIENT_NODE, "loadgen", 4100),
        (GATEWAY_NODE, "gateway.app", 5200),
        (UPSTREAM_NODE, "llama_cpp.server", 6300),
    ):
        start = T0 - T0 % WINDOW_NS
        while start < end:
            for kind, stacks in sorted(kinds.items()):
                world.profiles.append(
                    {
                        "window_id": f"{node}/{service}/{pid}/{kind}/{start}",
                        "node_id": node,
                        "service": service,
                        "pid": pid,
                        "profile_type": kind,
                        "window_start_ns": start,
                        "window_end_ns": start + WINDOW_NS,
                        "stacks": {k: v + pid % 7 for k, v in stacks.items()},
                        "samples": sum(stacks.values()) % 10_000 + 1,
                        "dropped": 2 if kind == "GPU_MEM_INUSE" else 0,
                    }
                )
            start += WINDOW_NS
    return world


def fill(store: Store, world: World) -> None:
    """The world's records into the store as the indexer writes them: Avro round trip (the
    records must fit the schemas), documents.document_for, bulk writes."""
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    for spec in INDEX_SPECS:
        store.ensure_index(spec)
    batches: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for record, datum in world.records():
        _, decoded = codec.decode(codec.encode(record, datum))
        index, doc_id, doc = document_for(record, decoded)
        batches.setdefault(index, []).append((doc_id, doc))
    for index, docs in batches.items():
        for at in range(0, len(docs), 1000):
            result = store.bulk_upsert(index, docs[at : at + 1000])
            assert result.ok, result.failed[:3]
        store.refresh(index)


def stored(store: Store, index: str, field_name: str, low: int, high: int) -> list[dict[str, Any]]:
    """The store's documents of an index with low <= field < high, `_id` removed (10,000 at
    most: the test worlds are smaller)."""
    found = store.search(index, Query(ranges={field_name: (low, high)}, limit=10_000))
    assert len(found) < 10_000
    return [{k: v for k, v in doc.items() if k != "_id"} for doc in found]


def sql(text: str) -> duckdb.DuckDBPyRelation:
    """A DuckDB query (the Parquet read-backs), never None."""
    relation = duckdb.sql(text)
    assert relation is not None
    return relation
