"""Each LLM request once, though zerotrace saw it at both ends (pure).

An OpenAI-compatible request between two observed processes gives two
zerotrace.derived.LlmRequest documents: one written from the client process's traffic
(`observation_point` CLIENT) and one from the server process's (SERVER), each with its own
span id, service, node and timings. Trace assembly already found that they are one exchange:
it wrote a TraceEdge whose child is the server's span and whose parent is the client's, by
rule tcp_sequence (the same first request byte at both ends) or same_connection (no sequence
numbers, as under TLS). This module pairs the two documents by those links.

Definitions, shared by the HTTP and gRPC APIs (zerotrace_query/llm_search.py):

- A SERVER document and a CLIENT document are one request when an edge of rule tcp_sequence or
  same_connection has the server document's span id as its child and the client document's as
  its parent. A link with no parent is one assembly took back and links nothing. Records with
  the same edge id are one link, the last given replacing the earlier, as the store replaces
  it. When one child has several links, tcp_sequence wins over same_connection (trace_trees
  RULE_ORDER), then the greatest edge id; each document pairs at most once.
- The "once" view keeps the SERVER document, the server's own measurement of the request, and
  drops its paired CLIENT document. The kept document is a copy with two more fields:
  `also_seen_at`, a list of {"observation_point": "CLIENT", "span_id", "service", "node_id",
  "start_ns", "end_ns", "ttft_ns"} of the client's view, and `client_gap_ns`, what the client
  saw beyond the server (the network both ways and any queueing in between):
    start: server.start_ns - client.start_ns (the request's way in),
    ttft:  client.ttft_ns - server.ttft_ns (None when either is None),
    end:   client.end_ns - server.end_ns (the last bytes' way back).
  Across hosts the two ends' clocks differ, so a gap there includes their offset.
- Documents with no pair stay as they are, unannotated: a SERVER whose client was not
  observed, a CLIENT whose server was not (a hosted API), and every NETWORK document (a packet
  capture sees the wire between two ends, not an end).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zerotrace import names

# The observation points documents carry (zerotrace_correlator spells them so).
CLIENT = "CLIENT"
SERVER = "SERVER"
NETWORK = "NETWORK"
POINTS = (CLIENT, SERVER, NETWORK)
# The rules that join the two ends of one exchange, the better first.
PAIR_RULES = (names.TRACE_RULE_TCP_SEQ, names.TRACE_RULE_CONNECTION)
# What `also_seen_at` keeps of the other end's document.
SEEN_AT_FIELDS = ("observation_point", "span_id", "service", "node_id", "start_ns", "end_ns")

LlmDoc = Mapping[str, Any]


@dataclass(frozen=True)
class Once:
    """The documents with each request once, in the order given (paired CLIENT documents left
    out, their SERVER documents annotated), and how many of them were seen at both ends."""

    requests: list[dict[str, Any]]
    seen_at_both: int


def _point(doc: LlmDoc) -> str:
    return str(doc.get("observation_point") or "")


def pairs(docs: Sequence[LlmDoc], edges: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Server span id -> client span id for each SERVER document paired with a CLIENT
    document among `docs` (see the module doc)."""
    servers = {str(d["span_id"]) for d in docs if _point(d) == SERVER}
    clients = {str(d["span_id"]) for d in docs if _point(d) == CLIENT} if servers else set()
    by_id = {str(e["edge_id"]): e for e in edges} if clients else {}
    candidates = []
    for edge_id, edge in by_id.items():
        rule = str(edge["rule"])
        child, parent = str(edge["child_span_id"]), str(edge.get("parent_span_id") or "")
        if rule in PAIR_RULES and child in servers and parent in clients and child != parent:
            candidates.append((PAIR_RULES.index(rule), edge_id, child, parent))
    # The better rule first, then the greatest edge id (two stable sorts).
    candidates.sort(key=lambda c: c[1], reverse=True)
    candidates.sort(key=lambda c: c[0])
    paired: dict[str, str] = {}
    taken: set[str] = set()
    for _, _, child, parent in candidates:
        if child not in paired and parent not in taken:
            paired[child] = parent
            taken.add(parent)
    return paired


def seen_at(doc: LlmDoc) -> dict[str, Any]:
    """One entry of `also_seen_at`: where and when the other end saw the request."""
    out = {name: doc.get(name) for name in SEEN_AT_FIELDS}
    out["ttft_ns"] = doc.get("ttft_ns")
    return out


def client_gap(server: LlmDoc, client: LlmDoc) -> dict[str, int | None]:
    """{"start", "ttft", "end"} in ns: what the client saw beyond the server (module doc)."""
    server_ttft, client_ttft = server.get("ttft_ns"), client.get("ttft_ns")
    ttft = None if server_ttft is None or client_ttft is None else client_ttft - server_ttft
    return {
        "start": int(server["start_ns"]) - int(client["start_ns"]),
        "ttft": None if ttft is None else int(ttft),
        "end": int(client["end_ns"]) - int(server["end_ns"]),
    }


def once(docs: Sequence[LlmDoc], edges: Iterable[Mapping[str, Any]]) -> Once:
    """Each request once: `docs` in their order, each paired CLIENT document dropped and its
    SERVER document annotated with `also_seen_at` and `client_gap_ns`; the rest unchanged."""
    paired = pairs(docs, edges)
    clients = {str(d["span_id"]): d for d in docs if _point(d) == CLIENT}
    dropped = set(paired.values())
    out: list[dict[str, Any]] = []
    for doc in docs:
        span_id = str(doc.get("span_id"))
        if _point(doc) == CLIENT and span_id in dropped:
            continue
        if _point(doc) == SERVER and span_id in paired:
            client = clients[paired[span_id]]
            out.append(
                {**doc, "also_seen_at": [seen_at(client)], "client_gap_ns": client_gap(doc, client)}
            )
        else:
            out.append(dict(doc))
    return Once(requests=out, seen_at_both=len(paired))
