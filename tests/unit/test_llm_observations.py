"""Each LLM request once though seen at both ends (zerotrace_query/llm_observations.py): a
SERVER record paired with the CLIENT record of the same exchange by trace assembly's links,
the client's view folded into the server's with the exact gaps, everything else untouched."""

from __future__ import annotations

from typing import Any

import pytest

from zerotrace import names
from zerotrace_query.llm_observations import CLIENT, NETWORK, SERVER, client_gap, once, pairs

pytestmark = pytest.mark.unit

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def doc(span_id: str, point: str, start_ms: int, end_ms: int, ttft_ms: int | None) -> Any:
    return {
        "request_id": span_id,
        "span_id": span_id,
        "observation_point": point,
        "service": {CLIENT: "agent", SERVER: "vllm", NETWORK: ""}[point],
        "node_id": "node-c" if point == CLIENT else "node-s",
        "model": "m",
        "start_ns": T0 + start_ms * MS,
        "end_ns": T0 + end_ms * MS,
        "ttft_ns": None if ttft_ms is None else ttft_ms * MS,
    }


def edge(parent: str, child: str, rule: str = names.TRACE_RULE_TCP_SEQ, eid: str = "") -> Any:
    return {
        "edge_id": eid or f"e-{rule}-{child}",
        "parent_span_id": parent,
        "child_span_id": child,
        "rule": rule,
        "ts_ns": 0,
    }


CLIENT_1 = doc("c1", CLIENT, 0, 1000, 130)
SERVER_1 = doc("s1", SERVER, 2, 997, 120)


def test_the_server_record_is_kept_with_the_client_s_view_and_the_exact_gaps() -> None:
    result = once([SERVER_1, CLIENT_1], [edge("c1", "s1")])
    assert result.seen_at_both == 1
    [kept] = result.requests
    assert {k: v for k, v in kept.items() if k not in ("also_seen_at", "client_gap_ns")} == SERVER_1
    assert kept["also_seen_at"] == [
        {
            "observation_point": CLIENT,
            "span_id": "c1",
            "service": "agent",
            "node_id": "node-c",
            "start_ns": T0,
            "end_ns": T0 + 1000 * MS,
            "ttft_ns": 130 * MS,
        }
    ]
    # start: 2 ms on the way in; ttft: 130 - 120; end: 1000 - 997 on the way back.
    assert kept["client_gap_ns"] == {"start": 2 * MS, "ttft": 10 * MS, "end": 3 * MS}
    assert "also_seen_at" not in SERVER_1  # the input is not changed


def test_an_unknown_ttft_at_either_end_leaves_the_ttft_gap_unknown() -> None:
    no_ttft = doc("c1", CLIENT, 0, 1000, None)
    assert client_gap(SERVER_1, no_ttft) == {"start": 2 * MS, "ttft": None, "end": 3 * MS}
    assert client_gap(doc("s1", SERVER, 2, 997, None), CLIENT_1)["ttft"] is None


def test_same_connection_pairs_too_but_other_rules_do_not() -> None:
    assert pairs([SERVER_1, CLIENT_1], [edge("c1", "s1", names.TRACE_RULE_CONNECTION)]) == {
        "s1": "c1"
    }
    for rule in (names.TRACE_RULE_SAME_THREAD, names.TRACE_RULE_TRACEPARENT):
        assert pairs([SERVER_1, CLIENT_1], [edge("c1", "s1", rule)]) == {}


def test_a_taken_back_link_links_nothing() -> None:
    result = once([SERVER_1, CLIENT_1], [edge("", "s1")])
    assert result.seen_at_both == 0
    assert result.requests == [SERVER_1, CLIENT_1]
    # The take-back replaces the link it took back (same edge id), as the store replaces it.
    taken_back = [edge("c1", "s1", eid="e1"), edge("", "s1", eid="e1")]
    assert pairs([SERVER_1, CLIENT_1], taken_back) == {}


def test_the_link_must_point_from_client_to_server() -> None:
    assert pairs([SERVER_1, CLIENT_1], [edge("s1", "c1")]) == {}  # reversed
    other_server = doc("s2", SERVER, 2, 997, 120)
    assert pairs([SERVER_1, other_server], [edge("s2", "s1")]) == {}  # not a client record


def test_unpaired_records_of_any_point_stay_as_they_are() -> None:
    lone_server = doc("s9", SERVER, 50, 60, 5)
    lone_client = doc("c9", CLIENT, 70, 90, 8)  # a hosted API: no server observed
    capture = doc("n1", NETWORK, 3, 996, 121)
    docs = [lone_client, capture, SERVER_1, lone_server, CLIENT_1]
    result = once(docs, [edge("c1", "s1"), edge("c1", "n1")])
    assert [r["span_id"] for r in result.requests] == ["c9", "n1", "s1", "s9"]
    assert result.requests[0] == lone_client and result.requests[1] == capture
    assert result.requests[3] == lone_server
    assert result.seen_at_both == 1


def test_a_link_to_a_record_not_given_pairs_nothing() -> None:
    assert once([SERVER_1], [edge("c1", "s1")]).requests == [SERVER_1]
    assert once([CLIENT_1], [edge("c1", "s1")]).requests == [CLIENT_1]


def test_two_links_for_one_child_tcp_sequence_wins_then_the_greatest_edge_id() -> None:
    other_client = doc("c2", CLIENT, 1, 999, 125)
    docs = [SERVER_1, CLIENT_1, other_client]
    by_both_rules = [
        edge("c2", "s1", names.TRACE_RULE_CONNECTION, eid="z"),
        edge("c1", "s1", names.TRACE_RULE_TCP_SEQ, eid="a"),
    ]
    result = once(docs, by_both_rules)
    assert [r["span_id"] for r in result.requests] == ["s1", "c2"]
    assert result.requests[0]["also_seen_at"][0]["span_id"] == "c1"
    same_rule = [edge("c1", "s1", eid="a"), edge("c2", "s1", eid="b")]
    assert pairs(docs, same_rule) == {"s1": "c2"}
    assert pairs(docs, list(reversed(same_rule))) == {"s1": "c2"}  # whatever the order


def test_a_client_record_pairs_with_one_server_at_most() -> None:
    other_server = doc("s2", SERVER, 3, 990, 118)
    links = [edge("c1", "s1", eid="a"), edge("c1", "s2", eid="b")]
    result = once([SERVER_1, other_server, CLIENT_1], links)
    assert result.seen_at_both == 1
    assert [r["span_id"] for r in result.requests] == ["s1", "s2"]
    assert "also_seen_at" in result.requests[1] and "also_seen_at" not in result.requests[0]


def test_many_requests_each_counted_once() -> None:
    docs, links = [], []
    for i in range(7):
        docs += [
            doc(f"s{i}", SERVER, 10 * i + 1, 10 * i + 8, 3),
            doc(f"c{i}", CLIENT, 10 * i, 10 * i + 9, 4),
        ]
        links.append(edge(f"c{i}", f"s{i}"))
    result = once(docs, links)
    assert result.seen_at_both == 7 and len(result.requests) == 7
    assert {r["observation_point"] for r in result.requests} == {SERVER}
    assert all(r["client_gap_ns"] == {"start": MS, "ttft": MS, "end": MS} for r in result.requests)
