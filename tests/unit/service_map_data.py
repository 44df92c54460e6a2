"""A realistic topology of spans and trace links for the service map tests (unit, integration,
web), with the answers worked out by hand.

Three hosts. node-a (10.0.0.5) runs the asyncio gateway (uvicorn, one thread), a load
generator calling it on 127.0.0.1:8000, PostgreSQL (observed: its server spans exist) and a
Redis zerotrace does not watch; the gateway also takes requests on 10.0.0.5:8000 from a host
with no zerotrace. node-b (10.0.0.7) runs an OpenAI-compatible llama.cpp server the gateway
calls (seen at both ends, joined by tcp_seq links), and a worker with its own observed Redis on
127.0.0.1:6379: the same loopback address as node-a's Redis, another Redis. node-c runs a
threaded inventory service (one thread per request) behind the virtual IP 10.96.0.10:80: the
gateway's calls reach its pod at 10.244.1.5:8081, joined by tcp_seq links only, the addresses
differ. The gateway also resolves names (DNS) and opens files (not calls: not on the map).

Spans start in [T0, T0 + RANGE_NS), spread evenly; the map's windows are STEP_NS wide.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from zerotrace import names

S = 1_000_000_000
MS = 1_000_000
US = 1_000
T0 = 1_700_000_000 * S
RANGE_NS = 60 * S
STEP_NS = 20 * S
NETWORK_NS = 200 * US  # client start -> server start, and server end -> client end, at most


@dataclass(frozen=True)
class Calls:
    """One client group's calls (or server spans with no observed client)."""

    node: str
    service: str
    protocol: str
    address: str
    port: int
    durations_ns: tuple[int, ...]
    errors: frozenset[int]  # indexes of the calls that fail (client's view)
    server: tuple[str, str, str, int] | None = None  # (node, service, address, port) answering
    linked: bool = False  # tcp_seq links from each call to its server span
    side: str = "client"
    client_address: str = "10.0.0.5"


def _mix(*parts: tuple[int, int]) -> tuple[int, ...]:
    """Durations interleaved evenly: (count, ns) parts, so every window gets its share."""
    out: list[int] = []
    total = sum(n for n, _ in parts)
    queues = [[d] * n for n, d in parts]
    for _ in range(total):
        # The part with the largest share left goes next (the first of equals).
        best = max(range(len(queues)), key=lambda k: (len(queues[k]) / parts[k][0], -k))
        out.append(queues[best].pop())
    return tuple(out)


LOADGEN = Calls(
    "node-a",
    "loadgen",
    "http",
    "127.0.0.1",
    8000,
    _mix((54, 35 * MS), (6, 120 * MS)),
    frozenset(range(3, 60, 10)),
    server=("node-a", "gateway", "127.0.0.1", 8000),
    client_address="127.0.0.1",
)
EXTERNAL = Calls(
    "node-a",
    "gateway",
    "http",
    "10.0.0.5",
    8000,
    _mix((27, 30 * MS), (3, 90 * MS)),
    frozenset({4, 14, 24}),
    side="server",
    client_address="10.9.9.9",
)
REDIS = Calls(
    "node-a",
    "gateway",
    names.PROTOCOL_REDIS,
    "127.0.0.1",
    6379,
    _mix((100, 400 * US), (80, 600 * US), (20, 2500 * US)),
    frozenset({10, 60, 110, 160}),
    client_address="127.0.0.1",
)
POSTGRES = Calls(
    "node-a",
    "gateway",
    names.PROTOCOL_POSTGRESQL,
    "127.0.0.1",
    5432,
    _mix((40, 1200 * US), (10, 4 * MS)),
    frozenset(range(0, 50, 10)),
    server=("node-a", "postgres", "127.0.0.1", 5432),
    client_address="127.0.0.1",
)
LLM = Calls(
    "node-a",
    "gateway",
    "http",
    "10.0.0.7",
    8080,
    _mix((30, 800 * MS), (10, 2200 * MS)),
    frozenset({7, 27}),
    server=("node-b", "llama_cpp.server", "10.0.0.7", 8080),
    linked=True,
)
INVENTORY = Calls(
    "node-a",
    "gateway",
    "http",
    "10.96.0.10",
    80,
    _mix((25, 12 * MS), (5, 45 * MS)),
    frozenset({9}),
    server=("node-c", "inventory", "10.244.1.5", 8081),
    linked=True,
)
DNS = Calls(
    "node-a",
    "gateway",
    names.PROTOCOL_DNS,
    "127.0.0.53",
    53,
    _mix((12, 300 * US)),
    frozenset(),
    client_address="127.0.0.1",
)
WORKER_REDIS = Calls(
    "node-b",
    "worker",
    names.PROTOCOL_REDIS,
    "127.0.0.1",
    6379,
    _mix((20, 150 * US)),
    frozenset({5}),
    server=("node-b", "redis-server", "127.0.0.1", 6379),
    client_address="127.0.0.1",
)
ALL_CALLS = (LOADGEN, EXTERNAL, REDIS, POSTGRES, LLM, INVENTORY, DNS, WORKER_REDIS)
FILE_OPENS = 5


def _span(
    calls: Calls, i: int, side: str, node: str, service: str, start: int, end: int, tid: int
) -> dict[str, Any]:
    kind = (
        names.SPAN_KIND_HTTP_CLIENT
        if (calls.protocol, side) == ("http", "client")
        else names.SPAN_KIND_HTTP_SERVER
        if calls.protocol == "http"
        else names.protocol_span_kind(calls.protocol, side)
    )
    address, port = calls.address, calls.port
    if side == "server" and calls.server is not None:
        address, port = calls.server[2], calls.server[3]
    # A server's own view fails only on its 5xx: here every other call the client saw fail.
    failed = i in calls.errors and (side == "client" or calls.side == "server" or i % 2 == 0)
    attributes = {
        names.ATTR_SERVER_ADDRESS: address,
        names.ATTR_SERVER_PORT: str(port),
        names.ATTR_CLIENT_ADDRESS: calls.client_address,
        names.ATTR_CLIENT_PORT: str(40000 + i),
        names.ATTR_PROCESS_PID: str(100 + len(service)),
        names.ATTR_THREAD_ID: str(tid),
        names.ATTR_OBSERVATION_POINT: side.upper(),
        names.ATTR_TCP_REQUEST_SEQ: str(1_000_000 + 7919 * i + hash_of(calls) % 1000),
    }
    if calls.protocol == "http":
        attributes[names.ATTR_HTTP_METHOD] = "POST" if calls is LLM else "GET"
        attributes[names.ATTR_URL_PATH] = "/v1/chat/completions" if calls is LLM else "/items"
        attributes[names.ATTR_HTTP_STATUS] = "503" if failed else "200"
    elif calls.protocol != names.PROTOCOL_DNS:
        attributes[names.ATTR_DB_SYSTEM_NAME] = calls.protocol
    span_id = f"{hash_of(calls):04x}{'c' if side == 'client' else 'e'}{i:011x}"
    return {
        "span_id": span_id,
        "trace_id": span_id.rjust(32, "0"),
        "parent_span_id": None,
        "node_id": node,
        "pid": 100 + len(service),
        "tid": tid,
        "process_name": service.split(".")[0][:15],
        "container_id": None,
        "service": service,
        "kind": kind,
        "name": "GET" if calls.protocol == names.PROTOCOL_REDIS else f"{calls.protocol} call",
        "start_ns": start,
        "end_ns": end,
        "status": "ERROR" if failed else "OK",
        "attributes": attributes,
        "source_event_ids": [],
    }


def hash_of(calls: Calls) -> int:
    return ALL_CALLS.index(calls) + 1


def start_of(calls: Calls, i: int) -> int:
    """Calls spread evenly over the range, a little apart for each group."""
    return T0 + (i * RANGE_NS) // len(calls.durations_ns) + hash_of(calls) * 1000


def topology() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(derived span records, TraceEdge records) of the whole topology."""
    spans: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for calls in ALL_CALLS:
        for i, duration in enumerate(calls.durations_ns):
            start = start_of(calls, i)
            # The gateway is asyncio (one thread); the inventory service threaded.
            tid = 100 + len(calls.service)
            if calls.side == "server":
                spans.append(
                    _span(
                        calls, i, "server", calls.node, calls.service, start, start + duration, tid
                    )
                )
                continue
            client = _span(
                calls, i, "client", calls.node, calls.service, start, start + duration, tid
            )
            spans.append(client)
            if calls.server is None:
                continue
            node, service, _, _ = calls.server
            gap = min(NETWORK_NS, duration // 10)
            server_tid = 3000 + i % 16 if service == "inventory" else 200 + len(service)
            server = _span(
                calls,
                i,
                "server",
                node,
                service,
                start + gap,
                start + duration - gap,
                server_tid,
            )
            spans.append(server)
            if calls.linked:
                edges.append(
                    {
                        "edge_id": f"{names.TRACE_RULE_TCP_SEQ}-{server['span_id']}",
                        "trace_id": client["trace_id"],
                        "parent_span_id": client["span_id"],
                        "child_span_id": server["span_id"],
                        "rule": names.TRACE_RULE_TCP_SEQ,
                        "ts_ns": server["start_ns"],
                    }
                )
    gateway_in = [s for s in spans if s["service"] == "gateway" and s["kind"].endswith("server")]
    gateway_out = [s for s in spans if s["service"] == "gateway" and s["kind"].endswith("client")]
    # Same-thread links (the gateway's incoming request -> its calls): not exchange links.
    for parent, child in zip(gateway_in, gateway_out, strict=False):
        edges.append(
            {
                "edge_id": f"{names.TRACE_RULE_SAME_THREAD}-{child['span_id']}",
                "trace_id": parent["trace_id"],
                "parent_span_id": parent["span_id"],
                "child_span_id": child["span_id"],
                "rule": names.TRACE_RULE_SAME_THREAD,
                "ts_ns": child["start_ns"],
            }
        )
    for i in range(FILE_OPENS):
        start = T0 + i * S
        spans.append(
            {
                **_span(REDIS, i, "client", "node-a", "gateway", start, start + 9 * US, 121),
                "span_id": f"f11e{i:012x}",
                "kind": names.SPAN_KIND_FILE_OPEN,
                "attributes": {names.ATTR_FILE_PATH: "/srv/gateway/config.yaml"},
            }
        )
    return spans, edges


# --- the answers, by hand --------------------------------------------------------------------

UNOBSERVED = "(unobserved clients)"


@dataclass(frozen=True)
class Expected:
    client: str
    server: str
    protocol: str
    calls: Calls
    resolved_by: tuple[str, ...]
    view: str = "client"
    connection_type: str = ""
    percentiles: tuple[int, int, int] | None = None  # p50, p95, p99 by hand, where given


EXPECTED = (
    Expected(UNOBSERVED, "gateway", "http", EXTERNAL, ("server_only",), "server", "virtual_node"),
    Expected(
        "gateway",
        "redis 127.0.0.1:6379",
        names.PROTOCOL_REDIS,
        REDIS,
        ("peer",),
        connection_type="database",
        # 100 x 0.4 ms, 80 x 0.6 ms, 20 x 2.5 ms; buckets ..0.3, 0.5, 0.7, 1, 1.5, 2, 3 ms..
        # p50: rank 100 in (0.3, 0.5] holding 100 -> 0.5 ms; p95: rank 190 in (2, 3] holding
        # 20 from 180 -> 2 + 10/20 ms; p99: rank 198 -> 2 + 18/20 ms.
        percentiles=(500_000, 2_500_000, 2_900_000),
    ),
    Expected(
        "gateway",
        "postgres",
        names.PROTOCOL_POSTGRESQL,
        POSTGRES,
        ("address",),
        connection_type="database",
        # 40 x 1.2 ms, 10 x 4 ms: p50 rank 25 in (1, 1.5] -> 1 + 0.5 * 25/40 ms; p95 rank 47.5
        # in (3, 5] from 40 -> 3 + 2 * 7.5/10 ms; p99 rank 49.5 -> 3 + 2 * 9.5/10 ms.
        percentiles=(1_312_500, 4_500_000, 4_900_000),
    ),
    Expected(
        "gateway",
        "llama_cpp.server",
        "http",
        LLM,
        ("link",),
        # 30 x 0.8 s, 10 x 2.2 s: p50 rank 20 in (0.7, 1] -> 0.7 + 0.3 * 20/30 s; p95 rank 38
        # in (2, 3] from 30 -> 2 + 8/10 s; p99 rank 39.6 -> 2 + 9.6/10 s.
        percentiles=(900_000_000, 2_800_000_000, 2_960_000_000),
    ),
    Expected("gateway", "inventory", "http", INVENTORY, ("link",)),
    Expected(
        "gateway",
        "dns 127.0.0.53:53",
        names.PROTOCOL_DNS,
        DNS,
        ("peer",),
        connection_type="virtual_node",
        # 12 x 0.3 ms, all in (0.2, 0.3]: p50 rank 6 -> 0.2 + 0.1 * 6/12 ms; p95 rank 11.4 ->
        # 0.2 + 0.1 * 11.4/12 ms; p99 rank 11.88 -> 0.2 + 0.1 * 11.88/12 ms.
        percentiles=(250_000, 295_000, 299_000),
    ),
    Expected("loadgen", "gateway", "http", LOADGEN, ("address",)),
    Expected(
        "worker",
        "redis-server",
        names.PROTOCOL_REDIS,
        WORKER_REDIS,
        ("address",),
        connection_type="database",
    ),
)


def expected_errors(calls: Calls) -> int:
    return len(calls.errors)


def in_window(calls: Calls, start: int, end: int) -> Iterator[int]:
    """Indexes of the calls that start in [start, end)."""
    return (i for i in range(len(calls.durations_ns)) if start <= start_of(calls, i) < end)


def index_topology(
    store: Any, codec: Any, spans: Sequence[dict[str, Any]], edges: Sequence[dict[str, Any]]
) -> None:
    """Through the real path: Avro records on the in-process bus, the Indexer into the store."""
    from tests.unit.test_llm_query_documents import index_all
    from zerotrace.bus_memory import InMemoryBroker

    broker = InMemoryBroker()
    broker.ensure_topics()
    producer = broker.producer()
    for span in spans:
        value = codec.encode(names.DERIVED_SPAN.record, span)
        producer.produce(names.DERIVED_SPAN.name, span["trace_id"].encode(), value)
    for edge in edges:
        value = codec.encode(names.DERIVED_TRACE.record, edge)
        producer.produce(names.DERIVED_TRACE.name, edge["trace_id"].encode(), value)
    indexer = index_all(broker, store, codec, "service-map")
    assert (indexer.indexed, indexer.dead_letters) == (len(spans) + len(edges), 0)
